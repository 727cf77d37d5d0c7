// Package promstack starts Prometheus 3 and Alertmanager for a test, both built from the module
// proxy by the tools modules tools/prometheus and tools/alertmanager into bin/ (once, see
// EnsureBinaries; promtool comes with Prometheus): Prometheus scrapes
// the exporter addresses the test gives, evaluates its rule files and sends alerts to the
// Alertmanager, which routes every alert to a webhook receiver inside the test process. Helpers
// query Prometheus's HTTP API and wait for targets, series, alerts and notifications.
package promstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// JobName is the scrape job that holds Options.ScrapeTargets, so tests and rules can select
// the exporter's series with job="provider-health-exporter".
const JobName = "provider-health-exporter"

// ReceiverName is the Alertmanager receiver every alert is routed to (the in-process webhook).
const ReceiverName = "test-webhook"

// Options configure the stack. The zero value is a Prometheus without scrape targets or rules.
type Options struct {
	// ScrapeTargets are host:port addresses scraped by the job JobName.
	ScrapeTargets []string
	// KubernetesPods, when set, has the job JobName discover its targets among a Kubernetes
	// cluster's pods (kubernetes_sd_configs, role pod) instead of ScrapeTargets.
	KubernetesPods *KubernetesPods
	// MetricsPath is the scrape path; "" means /metrics.
	MetricsPath string
	// ScrapeInterval defaults to 1s; the scrape timeout equals it.
	ScrapeInterval time.Duration
	// EvaluationInterval defaults to 1s.
	EvaluationInterval time.Duration
	// RuleFiles are loaded by Prometheus (absolute paths, or relative to the test's directory).
	RuleFiles []string
	// Scheme of the scrape job: "http" (default) or "https".
	Scheme string
	// TLSInsecureSkipVerify skips verification of the exporter's certificate.
	TLSInsecureSkipVerify bool
	// TLSCAFile, when set, is the CA bundle the exporter's certificate is verified against.
	TLSCAFile string
	// TLSServerName overrides the name the certificate is checked for.
	TLSServerName string
	// BasicAuthUser and BasicAuthPassword, when the user is set, are sent with every scrape.
	BasicAuthUser     string
	BasicAuthPassword string
	// ExternalLabels are added to every alert Prometheus sends.
	ExternalLabels map[string]string
	// ResendDelay is Prometheus's --rules.alert.resend-delay (how often a firing alert is sent
	// again); 0 keeps Prometheus's default, 1m. A test scaling every duration down scales it too.
	ResendDelay time.Duration
	// DiscoveryReloadInterval is Prometheus's hidden --scrape.discovery-reload-interval: the
	// scrape manager applies discovered targets at most this often, and so scrapes first up to
	// this long after the start (default 5s). A test scaling every duration down scales it
	// too: at 1/60 an alert's for: of 5m is 5s, and a first scrape 5s late reads as an
	// exporter that is not scraped. 0 keeps Prometheus's default.
	DiscoveryReloadInterval time.Duration

	// Alertmanager, when set, is another stack whose Alertmanager this stack's Prometheus sends
	// its alerts to, instead of starting one of its own (several Prometheus servers, one
	// Alertmanager): the notifications then arrive at that stack's receiver, and the settings
	// below are that stack's.
	Alertmanager *Stack

	// GroupWait, GroupInterval and RepeatInterval of Alertmanager's route; they default to
	// 1s, 1s and 1h so a test sees a notification about a second after an alert arrives.
	GroupWait      time.Duration
	GroupInterval  time.Duration
	RepeatInterval time.Duration
	// InhibitRules are Alertmanager's inhibit_rules, each as alertmanager.yml writes one
	// (source_matchers, target_matchers, equal), e.g. decoded from the mixin's
	// alertmanager/inhibit_rules.yaml.
	InhibitRules []map[string]any
	// Routes are child routes of the top-level route, each as alertmanager.yml writes one
	// (matchers, group_by, group_wait, ...), e.g. decoded from the mixin's
	// alertmanager/route.yaml. They inherit the receiver (the webhook); an alert no child route
	// matches is grouped by every label.
	Routes []map[string]any
	// StartTimeout bounds the wait for both daemons to be ready; it defaults to 30s.
	StartTimeout time.Duration

	// PrometheusAddr and AlertmanagerAddr, when set (host:port), are where the daemons listen
	// instead of free loopback ports (the demo's fixed addresses). Start fails, naming the
	// address, when one is taken.
	PrometheusAddr   string
	AlertmanagerAddr string
}

// KubernetesPods are the pods the job JobName scrapes through Prometheus's Kubernetes service
// discovery: one target per pod of Namespace matching LabelSelector, at its container port
// named Port, labelled pod with the pod's name. A pod without an IP (not scheduled yet) is no
// target; a terminating one is while its containers run (phase Running), as the Prometheus
// Operator's PodMonitor and ServiceMonitor have it.
type KubernetesPods struct {
	// Kubeconfig is the kubeconfig file Prometheus reads the pods with (their list and watch).
	Kubeconfig string
	// Namespace holds the pods; LabelSelector selects them ("" all of the namespace's).
	Namespace, LabelSelector string
	// Port is the name of the container port scraped.
	Port string
}

func (o Options) withDefaults() Options {
	if o.ScrapeInterval <= 0 {
		o.ScrapeInterval = time.Second
	}
	if o.EvaluationInterval <= 0 {
		o.EvaluationInterval = time.Second
	}
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	if o.MetricsPath == "" {
		o.MetricsPath = "/metrics"
	}
	if o.GroupWait <= 0 {
		o.GroupWait = time.Second
	}
	if o.GroupInterval <= 0 {
		o.GroupInterval = time.Second
	}
	if o.RepeatInterval <= 0 {
		o.RepeatInterval = time.Hour
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	return o
}

// Stack is a running Prometheus and Alertmanager (or a Prometheus sending to another stack's
// Alertmanager, see Options.Alertmanager). Everything is stopped in the test's cleanup.
type Stack struct {
	// PrometheusURL and AlertmanagerURL are the daemons' base URLs (http://127.0.0.1:PORT).
	PrometheusURL   string
	AlertmanagerURL string
	// WebhookURL is the in-process receiver Alertmanager notifies.
	WebhookURL string
	// PrometheusConfigFile and AlertmanagerConfigFile are the generated configurations.
	PrometheusConfigFile   string
	AlertmanagerConfigFile string
	// Dir holds configurations, data and logs of both daemons.
	Dir string

	client       *http.Client
	alertmanager *daemon
	prometheus   *daemon
	amAddr       string // host:port of Alertmanager, written into prometheus.yml

	mu            sync.Mutex
	notifications []Notification
	webhookErrs   []error
}

// Start starts Alertmanager, then Prometheus, and waits until both are ready, building them
// first when bin/ has no current build (see EnsureBinaries). When this machine cannot build them
// it calls testenv.Unavailable; any other failure fails the test. Both processes are
// killed and reaped in tb's cleanup, and their logs are written to the test log if tb failed.
//
// Both are ready in well under a second, but Prometheus's service discovery hands targets to
// the scrape and notify managers at most every 5 seconds: the first scrape, and the first alert
// sent to Alertmanager, come about 5s after Start (and after a Reconfigure that changes targets).
func Start(tb testing.TB, opts Options) *Stack {
	tb.Helper()
	opts = opts.withDefaults()
	bins := RequireBinaries(tb)
	promBin, amBin := bins.Prometheus, bins.Alertmanager

	// TempDir first: cleanups run last-in first-out, so the directory is removed only after
	// the daemons writing into it are gone and their logs have been dumped.
	dir := tb.TempDir()
	s := &Stack{
		Dir:                    dir,
		PrometheusConfigFile:   filepath.Join(dir, "prometheus.yml"),
		AlertmanagerConfigFile: filepath.Join(dir, "alertmanager.yml"),
		client:                 &http.Client{Timeout: 10 * time.Second},
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			s.dumpLogs(tb)
		}
	})

	if opts.Alertmanager == nil {
		webhook := httptest.NewServer(http.HandlerFunc(s.receive))
		tb.Cleanup(webhook.Close)
		s.WebhookURL = webhook.URL
	}

	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()

	if shared := opts.Alertmanager; shared != nil {
		s.amAddr, s.AlertmanagerURL, s.WebhookURL = shared.amAddr, shared.AlertmanagerURL, shared.WebhookURL
	} else if err := s.startAlertmanager(ctx, tb, amBin, opts); err != nil {
		tb.Fatalf("start alertmanager: %v", err)
	}
	if err := s.startPrometheus(ctx, tb, promBin, opts); err != nil {
		tb.Fatalf("start prometheus: %v", err)
	}
	return s
}

// maxPortAttempts bounds retries when a picked port is taken before the daemon binds it.
const maxPortAttempts = 3

func (s *Stack) startAlertmanager(ctx context.Context, tb testing.TB, bin string, opts Options) error {
	cfg, err := alertmanagerConfig(s.WebhookURL, opts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.AlertmanagerConfigFile, cfg, 0o644); err != nil {
		return fmt.Errorf("write alertmanager config: %w", err)
	}
	data := filepath.Join(s.Dir, "alertmanager-data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("create alertmanager storage: %w", err)
	}
	d, addr, err := startWithFreePort(ctx, tb, "alertmanager", bin, opts.AlertmanagerAddr, filepath.Join(s.Dir, "alertmanager.log"), func(addr string) []string {
		return []string{
			"--config.file=" + s.AlertmanagerConfigFile,
			"--storage.path=" + data,
			"--web.listen-address=" + addr,
			// Empty disables clustering; otherwise it binds 0.0.0.0:9094 and gossips.
			"--cluster.listen-address=",
			"--log.level=debug",
		}
	})
	if err != nil {
		return err
	}
	s.alertmanager, s.amAddr, s.AlertmanagerURL = d, addr, "http://"+addr
	return nil
}

func (s *Stack) startPrometheus(ctx context.Context, tb testing.TB, bin string, opts Options) error {
	if err := s.writePrometheusConfig(opts); err != nil {
		return err
	}
	data := filepath.Join(s.Dir, "prometheus-data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("create prometheus storage: %w", err)
	}
	d, addr, err := startWithFreePort(ctx, tb, "prometheus", bin, opts.PrometheusAddr, filepath.Join(s.Dir, "prometheus.log"), func(addr string) []string {
		args := []string{
			"--config.file=" + s.PrometheusConfigFile,
			"--storage.tsdb.path=" + data,
			"--web.listen-address=" + addr,
			"--web.enable-lifecycle",
			"--log.level=debug",
		}
		if opts.ResendDelay > 0 {
			args = append(args, "--rules.alert.resend-delay="+promDuration(opts.ResendDelay))
		}
		if opts.DiscoveryReloadInterval > 0 {
			args = append(args, "--scrape.discovery-reload-interval="+promDuration(opts.DiscoveryReloadInterval))
		}
		return args
	})
	if err != nil {
		return err
	}
	s.prometheus, s.PrometheusURL = d, "http://"+addr
	return nil
}

// startWithFreePort starts a daemon on a free loopback port and waits until it is ready,
// retrying with another port when the first was taken in between. With a fixed address it makes
// one attempt, at that address. The daemon is registered for cleanup as soon as it runs.
func startWithFreePort(ctx context.Context, tb testing.TB, name, bin, fixed, logPath string, args func(addr string) []string) (*daemon, string, error) {
	var lastErr error
	for range maxPortAttempts {
		addr := fixed
		if addr == "" {
			var err error
			if addr, err = freeLoopbackAddr(); err != nil {
				return nil, "", err
			}
		}
		d, err := startDaemon(name, bin, args(addr), logPath)
		if err != nil {
			return nil, "", err
		}
		tb.Cleanup(func() {
			if err := d.Kill(killTimeout); err != nil {
				tb.Errorf("stop %s: %v", name, err)
			}
		})
		err = waitReady(ctx, d, "http://"+addr)
		if err == nil {
			return d, addr, nil
		}
		_ = d.Kill(killTimeout)
		lastErr = err
		if fixed != "" && errors.Is(err, errAddrInUse) {
			return nil, "", fmt.Errorf("%s: address %s is already in use", name, fixed)
		}
		if fixed != "" || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, "", fmt.Errorf("%w\n%s log (%s):\n%s", lastErr, name, logPath, fileTail(logPath, 8<<10))
}

// writePrometheusConfig writes prometheus.yml for opts, with the stack's Alertmanager.
func (s *Stack) writePrometheusConfig(opts Options) error {
	cfg, err := prometheusConfig(opts, s.amAddr)
	if err != nil {
		return err
	}
	// Write then rename, so a reload never reads a half-written file.
	tmp := s.PrometheusConfigFile + ".tmp"
	if err := os.WriteFile(tmp, cfg, 0o644); err != nil {
		return fmt.Errorf("write prometheus config: %w", err)
	}
	if err := os.Rename(tmp, s.PrometheusConfigFile); err != nil {
		return fmt.Errorf("replace prometheus config: %w", err)
	}
	return nil
}

// LogFiles returns the paths of the daemons' logs.
func (s *Stack) LogFiles() (prometheus, alertmanager string) {
	return filepath.Join(s.Dir, "prometheus.log"), filepath.Join(s.Dir, "alertmanager.log")
}

// dumpLogs logs the tail of each daemon's configuration and log, and keeps the whole files in
// tb's artifact directory (go test -artifacts -outputdir DIR keeps it; make soak does), so that a
// finding of a long run can be read back.
func (s *Stack) dumpLogs(tb testing.TB) {
	promLog, amLog := s.LogFiles()
	keep := tb.ArtifactDir()
	for _, p := range []string{s.PrometheusConfigFile, s.AlertmanagerConfigFile, amLog, promLog} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		tb.Logf("==== %s ====\n%s", p, fileTail(p, 64<<10))
		if b, err := os.ReadFile(p); err == nil {
			_ = os.WriteFile(filepath.Join(keep, filepath.Base(s.Dir)+"-"+filepath.Base(p)), b, 0o644)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range s.webhookErrs {
		tb.Logf("webhook receiver: %v", err)
	}
}

// PIDs returns the process ids of Alertmanager and Prometheus, for tests that check nothing
// outlives them.
func (s *Stack) PIDs() []int {
	var pids []int
	for _, d := range []*daemon{s.alertmanager, s.prometheus} {
		if d != nil && d.Cmd != nil && d.Cmd.Process != nil {
			pids = append(pids, d.PID())
		}
	}
	return pids
}
