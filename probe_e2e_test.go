package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
)

// startProbeExporter builds the exporter from a providers file as run() does, runs its first
// round and serves its handler.
func startProbeExporter(t *testing.T, providers string, interval, timeout time.Duration) (*exporter, *httptest.Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(providers), 0o600); err != nil {
		t.Fatal(err)
	}
	e := runExporter(t, path, interval, timeout)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	return e, srv
}

// runExporter builds the exporter of the providers file at path as run() does, runs its rounds
// until the test ends, and returns it once its first round is done.
func runExporter(t *testing.T, path string, interval, timeout time.Duration) *exporter {
	t.Helper()
	e, err := newExporter(path, interval, timeout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.runner.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		e.close()
	})
	select {
	case <-e.runner.FirstRound():
	case <-time.After(60 * time.Second):
		t.Fatal("the first round did not finish within 60s")
	}
	return e
}

// pemLines returns the base64 lines of the PEM blocks (or JSON-escaped PEM) in the file: key
// material that must never appear in an answer.
func pemLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' || r == '\\' || r == '"' }) {
		if len(line) > 40 && strings.Trim(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == "" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no key material found in %s", path)
	}
	return out
}

func noSecrets(t *testing.T, what, body string, secrets []string) {
	t.Helper()
	for i, s := range secrets {
		if s != "" && strings.Contains(body, s) {
			t.Errorf("%s holds secret %d of the test", what, i)
		}
	}
	if strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("%s holds key material:\n%s", what, body)
	}
}

// TestProbeKVMEndToEnd probes real KVM hosts through the exporter's /probe: a healthy host
// probes 1 with reason Ready; a host whose libvirtd is stopped (SIGSTOP) answers within the
// deadline Prometheus's header gives, with a trace naming the call that hung; no probe changes
// the snapshot or /metrics; each host keeps its one SSH connection; no key material is shown.
func TestProbeKVMEndToEnd(t *testing.T) {
	fleet := kvmhost.Start(t, 2)
	for _, h := range fleet.Hosts {
		h.CountSSHConnections()
	}
	kvm := fleet.KVMConfig()
	var hosts strings.Builder
	for _, h := range kvm.Hosts {
		fmt.Fprintf(&hosts, "        - {address: %q, name: %s}\n", h.Address, h.Name)
	}
	e, srv := startProbeExporter(t, fmt.Sprintf(`providers:
  - name: hypervisors
    type: kvm
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      hosts:
%s`, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool, hosts.String()), time.Minute, 15*time.Second)
	client := &http.Client{Timeout: 30 * time.Second}
	h0, h1 := fleet.Hosts[0], fleet.Hosts[1]
	snap := e.runner.Current()
	_, metricsBefore := fetch(t, client, srv.URL+"/metrics")
	secrets := pemLines(t, kvm.PrivateKeyFile)

	code, body := fetch(t, client, srv.URL+"/probe?provider=hypervisors&target="+h0.Name)
	if s := probeSamples(t, body); code != http.StatusOK || s["probe_success"] != 1 || s[`probe_reason{reason="Ready"}`] != 1 {
		t.Errorf("a healthy host: %d %v, want probe_success 1, reason Ready", code, s)
	}
	code, body = fetch(t, client, srv.URL+"/probe?provider=hypervisors&target="+h0.Name+"&debug=true")
	// The round dialled the host and learnt its facts: a probe makes the steady check's one call.
	for _, want := range []string{"pooled connection", "ok: reusing the live link",
		"libvirt StoragePoolGetInfo", "verdict: Ready (up)", "probe_success 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("the trace of a healthy host lacks %q:\n%s", want, body)
		}
	}
	noSecrets(t, "the trace of a healthy host", body, secrets)

	// libvirtd stopped: Prometheus gives the scrape 4s; the exporter answers before that, with
	// the call that hangs named in the trace.
	h1.PauseLibvirtd()
	resumed := false
	defer func() {
		if !resumed {
			h1.ResumeLibvirtd()
		}
	}()
	prometheusLike := &http.Client{Timeout: 4 * time.Second}
	code, body = fetch(t, prometheusLike, srv.URL+"/probe?provider=hypervisors&target="+h1.Name+"&debug=true",
		scrapeTimeoutHeader, "4")
	if code != http.StatusOK || !regexp.MustCompile(`libvirt StoragePoolGetInfo +NO RESULT: still running`).MatchString(body) ||
		!strings.Contains(body, "verdict: Timeout (down)") || !strings.Contains(body, "deadline: 3.5s (X-Prometheus-Scrape-Timeout-Seconds 4 less a margin of 500ms)") {
		t.Errorf("the trace of a hung libvirtd: %d, want the hung call named and a Timeout verdict:\n%s", code, body)
	}
	noSecrets(t, "the trace of a hung libvirtd", body, secrets)
	code, body = fetch(t, prometheusLike, srv.URL+"/probe?provider=hypervisors&target="+h1.Name, scrapeTimeoutHeader, "4")
	if s := probeSamples(t, body); code != http.StatusOK || s["probe_success"] != 0 || s[`probe_reason{reason="Timeout"}`] != 1 {
		t.Errorf("a hung libvirtd: %d %v, want probe_success 0 with reason Timeout", code, s)
	}
	h1.ResumeLibvirtd()
	resumed = true
	testutil.Eventually(t, 30*time.Second, "the resumed host to probe Ready", func() bool {
		_, body := fetch(t, client, srv.URL+"/probe?provider=hypervisors&target="+h1.Name)
		return probeSamples(t, body)["probe_success"] == 1
	})

	if e.runner.Current() != snap {
		t.Error("probes published a new snapshot")
	}
	if _, after := fetch(t, client, srv.URL+"/metrics"); verdictLines(after) != verdictLines(metricsBefore) {
		t.Errorf("the verdicts on /metrics changed after probes:\nbefore:\n%s\nafter:\n%s", verdictLines(metricsBefore), verdictLines(after))
	}
	for _, h := range fleet.Hosts {
		if n := h.SSHConnectionsSeen(); n != 1 {
			t.Errorf("%s: %d SSH connections reached the host, want 1 (the round's, reused by every probe)", h.Name, n)
		}
	}
}

// TestProbeAPIProviders probes a kubernetes provider against the real API server and a gcp
// provider against the GCE wire server (real OAuth flow): Ready, then a failure of each.
func TestProbeAPIProviders(t *testing.T) {
	env := kube.Start(t)
	gce := gcefake.Start(t)
	key := gce.ServiceAccountKey(t)
	_, srv := startProbeExporter(t, fmt.Sprintf(`providers:
  - name: cluster
    type: kubernetes
    kubernetes:
      kubeconfig: %s
  - name: gce
    type: gcp
    gcp:
      project: %s
      credentialsFile: %s
      endpoint: %s
`, env.Kubeconfig, gcefake.DefaultProject, key, gce.URL()), time.Minute, 15*time.Second)
	client := &http.Client{Timeout: 30 * time.Second}
	_, body := fetch(t, client, srv.URL+"/probe?provider=cluster&target=nope")
	m := regexp.MustCompile(`its targets: "([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the unknown-target answer does not list the kubernetes target: %q", body)
	}
	kubeTarget := m[1]
	probe := func(provider, target, wantReason string) string {
		t.Helper()
		q := "/probe?provider=" + provider + "&target=" + target
		code, body := fetch(t, client, srv.URL+q)
		s := probeSamples(t, body)
		wantSuccess := 0.0
		if wantReason == "Ready" {
			wantSuccess = 1
		}
		if code != http.StatusOK || s["probe_success"] != wantSuccess || s[`probe_reason{reason="`+wantReason+`"}`] != 1 {
			t.Errorf("%s: %d %v, want probe_success %v with reason %s", q, code, s, wantSuccess, wantReason)
		}
		_, trace := fetch(t, client, srv.URL+q+"&debug=true")
		if !strings.Contains(trace, "verdict: "+wantReason) {
			t.Errorf("%s&debug=true: no %s verdict:\n%s", q, wantReason, trace)
		}
		return trace
	}
	secrets := append([]string{env.AdminConfig.BearerToken}, pemLines(t, key)...)
	requests := gce.InstancesRequests()
	noSecrets(t, "the kubernetes trace", probe("cluster", kubeTarget, "Ready"), secrets)
	trace := probe("gce", gcefake.DefaultProject, "Ready")
	if !strings.Contains(trace, "compute instances.aggregatedList of project "+gcefake.DefaultProject) {
		t.Errorf("the gcp trace does not name its call:\n%s", trace)
	}
	if n := gce.InstancesRequests() - requests; n != 2 {
		t.Errorf("two gcp probes made %d API requests, want 2 (one each)", n)
	}

	gce.SetFailure(http.StatusForbidden)
	probe("gce", gcefake.DefaultProject, "Forbidden")
	gce.SetFailure(0)
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	probe("cluster", kubeTarget, "APIUnreachable")
	secrets = append(secrets, gce.IssuedTokens()...)
	noSecrets(t, "the gcp trace", probe("gce", gcefake.DefaultProject, "Ready"), secrets)
}

// probeScrapeConfig returns the Prometheus configuration docs/metrics.md documents for /probe.
func probeScrapeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "<!-- probe-scrape-config -->\n```yaml\n")
	if !ok {
		t.Fatal("docs/metrics.md has no probe scrape config (a ```yaml block after <!-- probe-scrape-config -->)")
	}
	cfg, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("the probe scrape config in docs/metrics.md does not end")
	}
	return cfg
}

// TestProbeScrapeConfig: the scrape configuration docs/metrics.md documents passes promtool
// check config, and a real Prometheus 3 using it (the exporter's address and shorter intervals
// put in) scrapes /probe for each target, with the provider and target labels the relabelling
// sets.
func TestProbeScrapeConfig(t *testing.T) {
	cfg := probeScrapeConfig(t)
	bins := promstack.RequireBinaries(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := promstack.RunPromtool(ctx, bins.Promtool, "check", "config", file); err != nil {
		t.Fatalf("promtool check config of the documented scrape config: %v\n%s\n%s", err, out, cfg)
	}

	f := newFakeChecks()
	f.use(t)
	_, srv := probeTestExporter(t, f, maxProbesInFlight, provider{"hypervisors", "hv-project", "hv1,down-hv2"},
		provider{"gce", "phe-prod", "phe-prod"})
	addr := strings.TrimPrefix(srv.URL, "http://")
	const docAddr = "provider-health-exporter:9847"
	if !strings.Contains(cfg, docAddr) || !strings.Contains(cfg, "scrape_interval: 30s") || !strings.Contains(cfg, "scrape_timeout: 10s") ||
		!strings.Contains(cfg, "[hv1, hv2]") {
		t.Fatalf("the documented config changed shape (want %s, scrape_interval: 30s, scrape_timeout: 10s, [hv1, hv2]):\n%s", docAddr, cfg)
	}
	live := strings.NewReplacer(docAddr, addr, "scrape_interval: 30s", "scrape_interval: 1s", "scrape_timeout: 10s", "scrape_timeout: 1s",
		// A target the fake checker reads down, to see probe_success 0 in Prometheus too.
		"[hv1, hv2]", "[hv1, down-hv2]").Replace(cfg)
	if err := os.WriteFile(file, []byte(live), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := l.Addr().String()
	l.Close()
	d, err := testenv.StartCommand("prometheus", exec.Command(bins.Prometheus, "--config.file="+file,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr), filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Kill(5 * time.Second)
		if t.Failed() {
			t.Logf("prometheus log:\n%s", d.LogTail(40))
		}
	})
	want := map[string]string{
		`probe_success{instance="hv1",job="provider-health-probe",provider="hypervisors",target="hv1"}`:           "1",
		`probe_success{instance="down-hv2",job="provider-health-probe",provider="hypervisors",target="down-hv2"}`: "0",
		`probe_success{instance="phe-prod",job="provider-health-probe",provider="gce",target="phe-prod"}`:         "1",
	}
	var got string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Prometheus's last answer: %s", got)
		}
	})
	testutil.Eventually(t, 90*time.Second, "Prometheus to scrape /probe for every documented target", func() bool {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + promAddr + "/api/v1/query?query=probe_success")
		if err != nil {
			return false // not listening yet
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		body := string(b)
		got = body
		for series, v := range want {
			labels := regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(series, -1)
			var parts []string
			for _, l := range labels {
				parts = append(parts, fmt.Sprintf(`"%s":"%s"`, l[1], l[2]))
			}
			ok := false
			for _, res := range strings.Split(body, `{"metric":`)[1:] {
				all := true
				for _, p := range parts {
					all = all && strings.Contains(res, p)
				}
				if all && strings.Contains(res, `"`+v+`"]`) {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
}
