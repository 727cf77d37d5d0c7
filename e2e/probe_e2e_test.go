package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// startProbeExporter builds the exporter from a providers file as run() does, runs its first
// round and serves its handler.
func startProbeExporter(t *testing.T, providers string, interval, timeout time.Duration) (*exporter.Exporter, *httptest.Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(providers), 0o600); err != nil {
		t.Fatal(err)
	}
	e := runExporter(t, path, interval, timeout)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return e, srv
}

// prometheusScrapeTimeout is the header Prometheus sends its scrape timeout in.
const prometheusScrapeTimeout = "X-Prometheus-Scrape-Timeout-Seconds"

// runExporter builds the exporter of the providers file at path as run() does, runs its rounds
// until the test ends, and returns it once its first round is done.
func runExporter(t testing.TB, path string, interval, timeout time.Duration) *exporter.Exporter {
	t.Helper()
	e, err := exporter.New(path, interval, timeout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Runner().Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		e.Close()
	})
	select {
	case <-e.Runner().FirstRound():
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
	snap := e.Runner().Current()
	_, metricsBefore := testutil.Fetch(t, client, srv.URL+"/metrics")
	secrets := pemLines(t, kvm.PrivateKeyFile)

	code, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=hypervisors&target="+h0.Name)
	if s := testutil.ProbeSamples(t, body); code != http.StatusOK || s["probe_success"] != 1 || s[`probe_reason{reason="Ready"}`] != 1 {
		t.Errorf("a healthy host: %d %v, want probe_success 1, reason Ready", code, s)
	}
	_, body = testutil.Fetch(t, client, srv.URL+"/probe?provider=hypervisors&target="+h0.Name+"&debug=true")
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
	code, body = testutil.Fetch(t, prometheusLike, srv.URL+"/probe?provider=hypervisors&target="+h1.Name+"&debug=true",
		prometheusScrapeTimeout, "4")
	if code != http.StatusOK || !regexp.MustCompile(`libvirt StoragePoolGetInfo +NO RESULT: still running`).MatchString(body) ||
		!strings.Contains(body, "verdict: Timeout (down)") || !strings.Contains(body, "deadline: 3.5s (X-Prometheus-Scrape-Timeout-Seconds 4 less a margin of 500ms)") {
		t.Errorf("the trace of a hung libvirtd: %d, want the hung call named and a Timeout verdict:\n%s", code, body)
	}
	noSecrets(t, "the trace of a hung libvirtd", body, secrets)
	code, body = testutil.Fetch(t, prometheusLike, srv.URL+"/probe?provider=hypervisors&target="+h1.Name, prometheusScrapeTimeout, "4")
	if s := testutil.ProbeSamples(t, body); code != http.StatusOK || s["probe_success"] != 0 || s[`probe_reason{reason="Timeout"}`] != 1 {
		t.Errorf("a hung libvirtd: %d %v, want probe_success 0 with reason Timeout", code, s)
	}
	h1.ResumeLibvirtd()
	resumed = true
	testutil.Eventually(t, 30*time.Second, "the resumed host to probe Ready", func() bool {
		_, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=hypervisors&target="+h1.Name)
		return testutil.ProbeSamples(t, body)["probe_success"] == 1
	})

	if e.Runner().Current() != snap {
		t.Error("probes published a new snapshot")
	}
	if _, after := testutil.Fetch(t, client, srv.URL+"/metrics"); testutil.VerdictLines(after) != testutil.VerdictLines(metricsBefore) {
		t.Errorf("the verdicts on /metrics changed after probes:\nbefore:\n%s\nafter:\n%s", testutil.VerdictLines(metricsBefore), testutil.VerdictLines(after))
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
	_, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=cluster&target=nope")
	m := regexp.MustCompile(`its targets: "([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the unknown-target answer does not list the kubernetes target: %q", body)
	}
	kubeTarget := m[1]
	probe := func(provider, target, wantReason string) string {
		t.Helper()
		q := "/probe?provider=" + provider + "&target=" + target
		code, body := testutil.Fetch(t, client, srv.URL+q)
		s := testutil.ProbeSamples(t, body)
		wantSuccess := 0.0
		if wantReason == "Ready" {
			wantSuccess = 1
		}
		if code != http.StatusOK || s["probe_success"] != wantSuccess || s[`probe_reason{reason="`+wantReason+`"}`] != 1 {
			t.Errorf("%s: %d %v, want probe_success %v with reason %s", q, code, s, wantSuccess, wantReason)
		}
		_, trace := testutil.Fetch(t, client, srv.URL+q+"&debug=true")
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
	b, err := os.ReadFile(repoFile("docs", "metrics.md"))
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

	f := fakechecks.New()
	f.Use(t)
	e := runExporter(t, fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "hypervisors", Project: "hv-project", Targets: "hv1,down-hv2"},
		fakechecks.Provider{Name: "gce", Project: "phe-prod", Targets: "phe-prod"}), time.Minute, 15*time.Second)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	const docAddr = "provider-health-exporter:9847"
	if !strings.Contains(cfg, docAddr) || !strings.Contains(cfg, "scrape_interval: 30s") || !strings.Contains(cfg, "scrape_timeout: 10s") ||
		!strings.Contains(cfg, "[hv1, hv2]") {
		t.Fatalf("the documented config changed shape (want %s, scrape_interval: 30s, scrape_timeout: 10s, [hv1, hv2]):\n%s", docAddr, cfg)
	}
	live := strings.NewReplacer(docAddr, addr, "scrape_interval: 30s", "scrape_interval: 2s", "scrape_timeout: 10s", "scrape_timeout: 2s",
		// A target the fake checker reads down, to see probe_success 0 in Prometheus too.
		"[hv1, hv2]", "[hv1, down-hv2]").Replace(cfg)
	if err := os.WriteFile(file, []byte(live), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := testutil.MustFreeLoopbackAddr(t)
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

// standInProviders writes the providers of a test on stand-in hosts: one kvm provider "fleet"
// of the hosts of kvm (a kvmstandin fleet's KVMConfig) with the given TCP connect and SSH
// handshake bounds, and the extra YAML (other providers).
func standInProviders(kvm testenv.KVMBlock, tcpBound, sshBound time.Duration, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `providers:
  - name: fleet
    type: kvm
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      tcpTimeout: %s
      sshTimeout: %s
      hosts:
`, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool, tcpBound, sshBound)
	for _, h := range kvm.Hosts {
		fmt.Fprintf(&b, "        - {address: %q, name: %s}\n", h.Address, h.Name)
	}
	b.WriteString(extra)
	return b.String()
}

// TestProbeHealthyHostsBesideHangingOnes keeps the pool's property through /probe, on the scale
// stand-in (in-process SSH + libvirt servers; a dropping host's full accept queue makes the
// kernel drop its SYNs, so a connect hangs): with 25 probes of hosts whose connect hangs in
// flight, probes of healthy hosts answer probe_success 1 within their scrape timeout (4s: the
// probe's deadline is 3.5s, a bound a loaded machine meets), and the hanging ones answer their
// own verdict (down), never an answer made up.
func TestProbeHealthyHostsBesideHangingOnes(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 3, Dropping: 25})
	// The connect bound (5s) outlasts the probes' deadline: each hanging probe holds its
	// place until its deadline.
	_, srv := startProbeExporter(t, standInProviders(f.KVMConfig(), 5*time.Second, kvm.DefaultSSHTimeout, ""), time.Minute, 15*time.Second)
	prometheusLike := &http.Client{Timeout: 4 * time.Second}
	type answer struct {
		host *kvmstandin.Host
		code int
		body string
	}
	probe := func(h *kvmstandin.Host, out chan<- answer) {
		code, body := testutil.Fetch(t, prometheusLike, srv.URL+"/probe?provider=fleet&target="+h.Name, prometheusScrapeTimeout, "4")
		out <- answer{h, code, body}
	}
	hanging := make(chan answer, 25)
	for _, h := range f.Hosts {
		if h.Mode == kvmstandin.Dropping {
			go probe(h, hanging)
		}
	}
	// Ordering only: the hanging probes are in flight (they hang for their 3.5s deadline)
	// when the healthy ones come.
	time.Sleep(300 * time.Millisecond)
	healthy := make(chan answer, 3)
	for _, h := range f.Hosts {
		if h.Mode == kvmstandin.Healthy {
			go probe(h, healthy)
		}
	}
	for range 3 {
		a := <-healthy
		if s := testutil.ProbeSamples(t, a.body); a.code != http.StatusOK || s["probe_success"] != 1 {
			t.Errorf("healthy %s beside 25 hanging probes: %d %v, want 200 probe_success 1", a.host.Name, a.code, s)
		}
	}
	for range 25 {
		a := <-hanging
		s := testutil.ProbeSamples(t, a.body)
		if a.code != http.StatusOK || s["probe_success"] != 0 ||
			(s[`probe_reason{reason="Timeout"}`] != 1 && s[`probe_reason{reason="TCPUnreachable"}`] != 1) {
			t.Errorf("dropping %s: %d %v, want 200 probe_success 0 (Timeout or TCPUnreachable)", a.host.Name, a.code, s)
		}
	}
}

// probeFleet is the fleet test of /probe: a real Prometheus probes every target of a KVM fleet
// of n hosts on the scale stand-in (in-process SSH + libvirt servers, not KVM hosts), 10% of
// them dead (half dropping SYNs, half accepting TCP and never speaking), through two exporter
// replicas, beside an API provider of each other type: a slow gcp one (the GCE wire server
// answering each call after 600ms), a kubernetes one (the real API server) and a vsphere one (the
// vCenter simulator).
// Over several scrapes of every target through both replicas: every scrape reads up 1, every
// healthy target probe_success 1 (never 0), every dead one probe_success 0 with the reason of
// the stage it really fails at (TCPUnreachable, SSHHandshakeFailed).
//
// The fleet's kvm provider bounds the TCP connect and the SSH handshake by stageBound each, and
// the libvirt handshake and each call by callBound (0: their defaults); the probes' scrape
// timeout must outlast stageBound, so that every dead host fails at its stage.
func probeFleet(tb testing.TB, n int, interval, scrapeTimeout, stageBound, callBound time.Duration, scrapes int) {
	bins := promstack.RequireBinaries(tb)
	dead := n / 10
	f := kvmstandin.Start(tb, kvmstandin.Counts{Healthy: n - dead, Silent: dead / 2, Dropping: dead - dead/2})
	gce := gcefake.Start(tb)
	gce.SetLatency(600 * time.Millisecond)
	key := gce.ServiceAccountKey(tb)
	env := kube.Start(tb)
	sim := vcsim.Start(tb, vcsim.Options{})
	// Every dead host fails within its stage's bound, well inside the probe's deadline.
	providers := standInProviders(f.KVMConfig(), stageBound, stageBound, fmt.Sprintf(`  - name: gce
    type: gcp
    gcp:
      project: %s
      credentialsFile: %s
      endpoint: %s
  - name: cluster
    type: kubernetes
    kubernetes:
      kubeconfig: %s
  - name: vcenter
    type: vsphere
    vsphere:
      url: %s
      usernameFile: %s
      passwordFile: %s
      caFile: %s
      datacenter: DC0
`, gcefake.DefaultProject, key, gce.URL(), env.Kubeconfig, sim.URL(), sim.UsernameFile(), sim.PasswordFile(), sim.CAFile()))
	// A round fits a host that runs out every bound (the loader checks it).
	roundTimeout := 15 * time.Second
	if callBound > 0 {
		providers = strings.Replace(providers, "      hosts:\n", fmt.Sprintf("      libvirtTimeout: %s\n      rpcTimeout: %s\n      hosts:\n", callBound, callBound), 1)
		roundTimeout = max(roundTimeout, 3*stageBound+(2+kvm.CallsPerCheck)*callBound)
	}
	path := filepath.Join(tb.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(providers), 0o600); err != nil {
		tb.Fatal(err)
	}
	var replicas []string
	// The API providers' targets, probed beside the fleet: each provider's one target, as the
	// first round lists it (the vsphere provider's first, the vCenter's own; its ESXi hosts
	// follow).
	api := map[string]string{"gce": gcefake.DefaultProject}
	for range 2 {
		e := runExporter(tb, path, time.Minute, roundTimeout)
		srv := httptest.NewServer(e.Handler())
		tb.Cleanup(srv.Close)
		replicas = append(replicas, strings.TrimPrefix(srv.URL, "http://"))
		for _, p := range e.Runner().Current().Providers {
			if p.Name == "cluster" && len(p.Targets) == 1 || p.Name == "vcenter" && len(p.Targets) > 0 {
				api[p.Name] = p.Targets[0].Target
			}
		}
	}
	if len(api) != 3 {
		tb.Fatalf("API providers' targets %v, want gce, cluster and vcenter", api)
	}

	// The documented probe job, once per replica, each target labelled with what it is.
	var cfg strings.Builder
	// Prometheus refuses a scrape timeout longer than the interval.
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %ds\n  scrape_timeout: %ds\nscrape_configs:\n", interval/time.Second, min(interval, scrapeTimeout)/time.Second)
	for i, addr := range replicas {
		fmt.Fprintf(&cfg, "  - job_name: probe-%d\n    metrics_path: /probe\n    static_configs:\n", i)
		for _, h := range f.Hosts {
			fmt.Fprintf(&cfg, "      - {targets: [%s], labels: {__param_provider: fleet, mode: %s}}\n", h.Name, h.Mode)
		}
		for _, p := range slices.Sorted(maps.Keys(api)) {
			fmt.Fprintf(&cfg, "      - {targets: [%q], labels: {__param_provider: %s, mode: api}}\n", api[p], p)
		}
		fmt.Fprintf(&cfg, `    relabel_configs:
      - {source_labels: [__address__], target_label: __param_target}
      - {source_labels: [__param_target], target_label: target}
      - {source_labels: [__param_target], target_label: instance}
      - {source_labels: [__param_provider], target_label: provider}
      - {target_label: __address__, replacement: %q}
`, addr)
	}
	dir := tb.TempDir()
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	promAddr := testutil.MustFreeLoopbackAddr(tb)
	d, err := testenv.StartCommand("prometheus", exec.Command(bins.Prometheus, "--config.file="+file,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr), filepath.Join(dir, "prometheus.log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = d.Kill(5 * time.Second)
		if tb.Failed() {
			tb.Logf("prometheus log:\n%s", d.LogTail(40))
		}
	})
	query := func(q string) map[string]float64 {
		tb.Helper()
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil // not listening yet
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
			return nil
		}
		out := map[string]float64{}
		for _, s := range r.Data.Result {
			v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
			out[s.Metric["job"]+"/"+s.Metric["target"]+"/"+s.Metric["reason"]] = v
		}
		return out
	}
	targets := 2 * (n + len(api))
	// From the first scrape of every target on, count `scrapes` more of each.
	window := time.Duration(scrapes) * interval
	start := time.Now()
	testutil.Eventually(tb, 3*time.Minute, "Prometheus to scrape every target through both replicas", func() bool {
		return len(query(`up{job=~"probe-.*"}`)) == targets
	})
	time.Sleep(window)
	w := fmt.Sprintf("%ds", (time.Since(start)+interval)/time.Second)
	tb.Logf("%d targets through 2 replicas, scrape interval %s: judging the last %s", targets, interval, w)

	upZero := query(fmt.Sprintf(`count_over_time(up{job=~"probe-.*"}[%s]) - sum_over_time(up{job=~"probe-.*"}[%s]) > 0`, w, w))
	for k, v := range upZero {
		tb.Errorf("%s: %v scrapes read up 0, want every scrape served", k, v)
	}
	if scraped := query(fmt.Sprintf(`count_over_time(up{job=~"probe-.*"}[%s]) >= %d`, w, scrapes)); len(scraped) != targets {
		tb.Errorf("%d of %d targets were scraped %d times or more, want every one", len(scraped), targets, scrapes)
	}
	healthy := `{job=~"probe-.*",mode=~"healthy|api"}`
	if got := query(`count(probe_success` + healthy + `)`); got["//"] != float64(2*(n-dead+len(api))) {
		tb.Errorf("%v healthy targets have probe_success, want %d", got, 2*(n-dead+len(api)))
	}
	for _, p := range []string{"gce", "cluster", "vcenter"} {
		if got := query(fmt.Sprintf(`count_over_time(probe_success{job=~"probe-.*",provider=%q}[%s]) >= %d`, p, w, scrapes)); len(got) != 2 {
			tb.Errorf("provider %s: %d of 2 replicas' probes scraped %d times or more, want both", p, len(got), scrapes)
		}
	}
	for k := range query(fmt.Sprintf(`min_over_time(probe_success%s[%s]) < 1`, healthy, w)) {
		tb.Errorf("healthy %s read probe_success 0 in a scrape, want 1 in every one", k)
	}
	deadSel := `{job=~"probe-.*",mode=~"silent|dropping"}`
	for k := range query(fmt.Sprintf(`max_over_time(probe_success%s[%s]) > 0`, deadSel, w)) {
		tb.Errorf("dead %s read probe_success 1", k)
	}
	for k := range query(fmt.Sprintf(`count_over_time(probe_reason{job=~"probe-.*",mode="dropping",reason!="TCPUnreachable"}[%s])`, w)) {
		tb.Errorf("dropping host: %s, want only TCPUnreachable", k)
	}
	for k := range query(fmt.Sprintf(`count_over_time(probe_reason{job=~"probe-.*",mode="silent",reason!="SSHHandshakeFailed"}[%s])`, w)) {
		tb.Errorf("silent host: %s, want only SSHHandshakeFailed", k)
	}
	if got := query(`count(probe_reason{job=~"probe-.*",mode=~"silent|dropping"})`); got["//"] != float64(2*dead) {
		tb.Errorf("%v dead targets have a reason, want %d", got, 2*dead)
	}
}

// TestProbeFleet is probeFleet at the size make test affords on a shared 2-core machine: 100
// stand-in hosts, 10 of them dead, every stage bound 2s (a healthy host of a loaded machine
// answers within it) and a 5s scrape timeout (a dead host fails at its stage within it);
// BenchmarkProbeFleet runs the 1,000-host fleet (make bench).
func TestProbeFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and 100 stand-in hosts")
	}
	probeFleet(t, 100, 5*time.Second, 5*time.Second, 2*time.Second, 2*time.Second, 5)
}

// BenchmarkProbeFleet is the fleet test at 1,000 stand-in hosts (100 dead) and two replicas:
// 2,002 probe targets scraped every 10s. It asserts what TestProbeFleet does, once.
func BenchmarkProbeFleet(b *testing.B) {
	probeFleet(b, 1000, 10*time.Second, 3*time.Second, 500*time.Millisecond, 0, 4)
}
