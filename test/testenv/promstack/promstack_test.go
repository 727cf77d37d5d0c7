package promstack_test

import (
	"bufio"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// wait bounds every wait of these tests; on this machine each takes a few seconds at most.
const wait = 20 * time.Second

// metricsServer serves a registry holding one gauge, like a tiny exporter.
func metricsServer(t *testing.T, gauge prometheus.Gauge, wrap func(http.Handler) http.Handler, tls bool) (*httptest.Server, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(gauge)
	var h http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if wrap != nil {
		h = wrap(h)
	}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return srv, u.Host
}

const smokeRules = `groups:
  - name: promstack-smoke
    rules:
      - alert: PromstackSmokeGaugePositive
        expr: promstack_smoke_value{job="provider-health-exporter"} > 0
        for: 0s
        labels:
          severity: warning
        annotations:
          summary: The smoke gauge is positive.
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubernetesPodsDiscovery: the Prometheus the stack builds has the Kubernetes service
// discovery (-tags enable_kubernetes_sd beside remove_all_sd): it starts with a job that
// discovers pods, where a build without it exits on the configuration ("field
// kubernetes_sd_configs not found"). TestChartOnNode (charts/) scrapes real pods through it.
func TestKubernetesPodsDiscovery(t *testing.T) {
	t.Parallel()
	// A cluster nobody answers for: the discovery retries in the background, Prometheus runs.
	kubeconfig := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	s := promstack.Start(t, promstack.Options{KubernetesPods: &promstack.KubernetesPods{
		Kubeconfig: kubeconfig, Namespace: "phe", LabelSelector: "app.kubernetes.io/instance=phe", Port: "http-metrics"}})
	if b, err := os.ReadFile(s.PrometheusConfigFile); err != nil || !strings.Contains(string(b), "kubernetes_sd_configs") {
		t.Errorf("the running configuration has no kubernetes_sd_configs (%v):\n%s", err, b)
	}
}

// TestScrapeRuleAlertNotify follows a value from an exporter through a scrape, a rule, an
// alert in Alertmanager, to the webhook notification, then back to resolved.
func TestScrapeRuleAlertNotify(t *testing.T) {
	t.Parallel()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "promstack_smoke_value", Help: "Smoke test value."})
	gauge.Set(42)
	_, target := metricsServer(t, gauge, nil, false)

	s := promstack.Start(t, promstack.Options{
		ScrapeTargets:  []string{target},
		RuleFiles:      []string{writeFile(t, "rules.yml", smokeRules)},
		ExternalLabels: map[string]string{"cluster": "smoke"},
		// A scaled test's first scrape must not wait out the default 5s discovery reload.
		DiscoveryReloadInterval: 500 * time.Millisecond,
	})
	if got := prometheusFlag(t, s, "scrape.discovery-reload-interval"); got != "500ms" {
		t.Errorf("Prometheus runs with --scrape.discovery-reload-interval=%q, want 500ms", got)
	}

	tg := s.WaitTargetUp(t, target, wait)
	if tg.ScrapePool != promstack.JobName || tg.Labels["job"] != promstack.JobName {
		t.Errorf("target scrape pool %q, job %q; want %q", tg.ScrapePool, tg.Labels["job"], promstack.JobName)
	}
	if want := "http://" + target + "/metrics"; tg.ScrapeURL != want {
		t.Errorf("scrape URL %q, want %q", tg.ScrapeURL, want)
	}

	up := s.WaitForQuery(t, `up{job="provider-health-exporter"} == 1`, func(r []promstack.Sample) bool { return len(r) == 1 }, wait)
	if up[0].Labels["instance"] != target || up[0].Value != 1 {
		t.Errorf("up: %v; want instance %s with value 1", up[0], target)
	}
	ctx := t.Context()
	got, err := s.Query(ctx, `promstack_smoke_value`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Value != 42 {
		t.Errorf("promstack_smoke_value: %v; want one sample of 42", got)
	}
	if _, err := s.Query(ctx, `sum(`); err == nil || !strings.Contains(err.Error(), "bad_data") {
		t.Errorf("query with a syntax error: err = %v; want a bad_data error", err)
	}

	a := s.WaitForAlert(t, "PromstackSmokeGaugePositive", wait)
	for k, want := range map[string]string{"severity": "warning", "cluster": "smoke", "instance": target, "job": promstack.JobName} {
		if a.Labels[k] != want {
			t.Errorf("alert label %s = %q, want %q (labels %v)", k, a.Labels[k], want, a.Labels)
		}
	}
	if len(a.Receivers) != 1 || a.Receivers[0].Name != promstack.ReceiverName {
		t.Errorf("alert receivers %+v, want only %s", a.Receivers, promstack.ReceiverName)
	}

	n := s.WaitForNotification(t, func(n promstack.Notification) bool {
		_, ok := n.Alert("PromstackSmokeGaugePositive", "firing")
		return ok
	}, wait)
	if n.Receiver != promstack.ReceiverName {
		t.Errorf("notification receiver %q, want %q", n.Receiver, promstack.ReceiverName)
	}
	if fa, _ := n.Alert("PromstackSmokeGaugePositive", "firing"); fa.Annotations["summary"] != "The smoke gauge is positive." {
		t.Errorf("notified annotations %v", fa.Annotations)
	}

	// Back to zero: Prometheus sends the resolved alert and the receiver hears of it.
	gauge.Set(0)
	s.WaitForNotification(t, func(n promstack.Notification) bool {
		_, ok := n.Alert("PromstackSmokeGaugePositive", "resolved")
		return ok
	}, wait)
}

// prometheusFlag is the value Prometheus reports for its command-line flag name.
func prometheusFlag(t *testing.T, s *promstack.Stack, name string) string {
	t.Helper()
	resp, err := http.Get(s.PrometheusURL + "/api/v1/status/flags")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data map[string]string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET /api/v1/status/flags: %v", err)
	}
	return r.Data[name]
}

// TestPostAlertDirectly pushes a test alert to Alertmanager without Prometheus.
func TestPostAlertDirectly(t *testing.T) {
	t.Parallel()
	s := promstack.Start(t, promstack.Options{})
	ctx := t.Context()
	if err := s.PostAlert(ctx, promstack.PostableAlert{
		Labels:      map[string]string{"alertname": "PromstackPostedAlert", "provider": "kvm-a"},
		Annotations: map[string]string{"summary": "Posted by the test."},
	}); err != nil {
		t.Fatal(err)
	}
	a := s.WaitForAlert(t, "PromstackPostedAlert", wait)
	if a.Labels["provider"] != "kvm-a" || a.Annotations["summary"] != "Posted by the test." {
		t.Errorf("listed alert %+v does not carry the posted labels and annotations", a)
	}
	s.WaitForNotification(t, func(n promstack.Notification) bool {
		na, ok := n.Alert("PromstackPostedAlert", "firing")
		return ok && na.Labels["provider"] == "kvm-a"
	}, wait)

	// An alert without labels is refused by Alertmanager's API: the error must reach the caller.
	if err := s.PostAlert(ctx, promstack.PostableAlert{}); err == nil {
		t.Error("posting an alert without labels succeeded; want an error")
	}
}

// TestHTTPSBasicAuthAndReload scrapes an exporter behind TLS and basic auth, then reloads
// Prometheus with a wrong password (the target goes down with a 401) and with a broken rule
// file (the reload is refused and the running config kept).
func TestHTTPSBasicAuthAndReload(t *testing.T) {
	t.Parallel()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "promstack_tls_value", Help: "TLS test value."})
	gauge.Set(7)
	const user, pass = "prometheus", "s3cret"
	_, target := metricsServer(t, gauge, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, true)

	opts := promstack.Options{
		ScrapeTargets:         []string{target},
		Scheme:                "https",
		TLSInsecureSkipVerify: true,
		BasicAuthUser:         user,
		BasicAuthPassword:     pass,
	}
	s := promstack.Start(t, opts)
	tg := s.WaitTargetUp(t, target, wait)
	if !strings.HasPrefix(tg.ScrapeURL, "https://") {
		t.Errorf("scrape URL %q is not https", tg.ScrapeURL)
	}
	s.WaitForQuery(t, `promstack_tls_value`, func(r []promstack.Sample) bool { return len(r) == 1 && r[0].Value == 7 }, wait)

	ctx := t.Context()
	wrong := opts
	wrong.BasicAuthPassword = "wrong"
	if err := s.Reconfigure(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	s.WaitForQuery(t, `up{job="provider-health-exporter"} == 0`, func(r []promstack.Sample) bool { return len(r) == 1 }, wait)
	targets, err := s.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 1 || targets[0].Health != "down" || !strings.Contains(targets[0].LastError, "401") {
		t.Errorf("targets after the wrong password: %+v; want one down target with a 401", targets)
	}

	broken := opts
	broken.RuleFiles = []string{writeFile(t, "broken.yml", "groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: sum(\n")}
	if err := s.Reconfigure(ctx, broken); err == nil {
		t.Error("reload with a broken rule file succeeded; want an error")
	}
	// The refused reload kept the previous (wrong-password) config, which still answers.
	if _, err := s.Query(ctx, `up`); err != nil {
		t.Errorf("query after a refused reload: %v", err)
	}
}

// TestPromtoolRules checks that promtool accepts the smoke rule file, rejects a broken one, and
// runs a rule unit test.
func TestPromtoolRules(t *testing.T) {
	t.Parallel()
	promtool := promstack.Promtool(t)
	ctx := t.Context()
	good := writeFile(t, "good.yml", smokeRules)
	out, err := promstack.CheckRules(ctx, promtool, good)
	if err != nil {
		t.Fatalf("check rules on a valid file: %v", err)
	}
	if !strings.Contains(out, "SUCCESS: 1 rules found") {
		t.Errorf("check rules output %q does not report the one rule", out)
	}

	for name, content := range map[string]string{
		"syntax": "groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: sum(\n",
		"yaml":   "groups:\n  - name: x\n    rules: [\n",
		"field":  "groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: up\n        fro: 5m\n",
	} {
		if out, err := promstack.CheckRules(ctx, promtool, writeFile(t, name+".yml", content)); err == nil {
			t.Errorf("check rules accepted the %s-broken file: %s", name, out)
		}
	}

	test := writeFile(t, "good_test.yml", fmt.Sprintf(`rule_files:
  - %s
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'promstack_smoke_value{job="provider-health-exporter", instance="a:1"}'
        values: '0 3'
    alert_rule_test:
      - eval_time: 0m
        alertname: PromstackSmokeGaugePositive
        exp_alerts: []
      - eval_time: 1m
        alertname: PromstackSmokeGaugePositive
        exp_alerts:
          - exp_labels:
              severity: warning
              job: provider-health-exporter
              instance: a:1
            exp_annotations:
              summary: The smoke gauge is positive.
`, good))
	if out, err := promstack.TestRules(ctx, promtool, test); err != nil {
		t.Errorf("rule unit test: %v\n%s", err, out)
	}
}

// childPIDFileEnv, set to a file name, makes TestNoProcessOutlivesKilledTest run as its own
// child process: it starts a stack, writes the daemons' pids to the file and waits to be killed.
const childPIDFileEnv = "PROMSTACK_CHILD_PIDFILE"

// TestNoProcessOutlivesKilledTest starts a stack in a child test process, kills that process
// with SIGKILL (no cleanup can run), and checks that Prometheus and Alertmanager died with it.
func TestNoProcessOutlivesKilledTest(t *testing.T) {
	if pidFile := os.Getenv(childPIDFileEnv); pidFile != "" {
		holdStack(t, pidFile)
		return
	}
	testenv.SkipIfShort(t, "starts Prometheus and Alertmanager in a child test process")
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	logPath := filepath.Join(dir, "child.log")
	// The killed child cannot remove its temporary directories: they go under this test's.
	childTmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(childTmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// A file, not a buffer: the child writes it directly, so reading it here races with nothing.
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	childLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoProcessOutlivesKilledTest$", "-test.v")
	cmd.Env = testenv.ChildEnv(childTmp, childPIDFileEnv+"="+pidFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	child := testutil.StartProcess(t, cmd)

	var pids []int
	deadline := time.Now().Add(wait)
	for len(pids) == 0 {
		if child.Exited() {
			if strings.Contains(childLog(), "--- SKIP: TestNoProcessOutlivesKilledTest") {
				// Start skips only through testenv.Unavailable: a missing part.
				testenv.Unavailable(t, "the child test could not start the stack:\n%s", childLog())
			}
			t.Fatalf("child test exited before starting the stack (%v):\n%s", child.Wait(), childLog())
		}
		time.Sleep(100 * time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatalf("child test did not start a stack within %v:\n%s", wait, childLog())
		}
		pids = readPIDs(t, pidFile)
	}
	if len(pids) != 2 {
		t.Fatalf("child reported pids %v, want two", pids)
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("pid %d not running while the child holds the stack", pid)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if child.Wait() == nil {
		t.Fatal("child test ended cleanly; want it killed")
	}
	deadline = time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still running 10s after its test process was killed", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// holdStack is TestNoProcessOutlivesKilledTest in its child process: it starts a stack,
// reports its pids in pidFile and waits to be killed.
func holdStack(t *testing.T, pidFile string) {
	s := promstack.Start(t, promstack.Options{})
	var b strings.Builder
	for _, pid := range s.PIDs() {
		fmt.Fprintln(&b, pid)
	}
	tmp := pidFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, pidFile); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute)
	t.Fatal("child was not killed within a minute")
}

func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("pid file line %q: %v", sc.Text(), err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// alive reports whether pid is a running process; a zombie waiting for its reaper counts as dead.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestBinariesAreCurrentReleases runs each built binary's --version: Prometheus and promtool
// are 3.x with the version stamped (an unstamped build prints an empty version), Alertmanager
// and amtool are 0.31.
func TestBinariesAreCurrentReleases(t *testing.T) {
	t.Parallel()
	b := promstack.RequireBinaries(t)
	for _, c := range []struct{ path, prefix string }{
		{b.Prometheus, "prometheus, version 3."},
		{b.Promtool, "promtool, version 3."},
		{b.Alertmanager, "alertmanager, version 0.31."},
		{b.Amtool, "amtool, version 0.31."},
	} {
		out, err := exec.Command(c.path, "--version").CombinedOutput()
		if err != nil {
			t.Errorf("%s --version: %v\n%s", c.path, err, out)
			continue
		}
		if !strings.HasPrefix(string(out), c.prefix) {
			t.Errorf("%s --version printed %q, want it to start with %q", c.path, out, c.prefix)
		}
	}
}
