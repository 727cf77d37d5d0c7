package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestReadyFlipsAfterFirstRound: /-/ready answers 503 while the first round runs and 200 once
// it has finished; /-/healthy answers 200 throughout.
func TestReadyFlipsAfterFirstRound(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	release := f.Gate("alpha-project")
	t.Cleanup(release)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	// A long interval gives a long round deadline (15s): the round cannot end by itself while
	// the test looks at it.
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=1m")

	// The first round has started (the checker was called) and is held at the gate.
	testutil.Eventually(t, 20*time.Second, "the first check", func() bool { return f.Checked("alpha") > 0 })
	if code, body := x.get("/-/ready"); code != http.StatusServiceUnavailable {
		t.Fatalf("/-/ready during the first round: %d %q, want 503", code, body)
	}
	if code, body := x.get("/-/healthy"); code != http.StatusOK || strings.TrimSpace(body) != "Healthy" {
		t.Fatalf("/-/healthy: %d %q, want 200 Healthy", code, body)
	}
	release()
	testutil.Eventually(t, 20*time.Second, "/-/ready to answer 200", func() bool {
		code, _ := x.get("/-/ready")
		return code == http.StatusOK
	})
}

// TestLandingPage: the status page links to /metrics and shows each target with its verdict,
// reason and (escaped) message, and the round.
func TestLandingPage(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s")
	testutil.Eventually(t, 20*time.Second, "readiness", func() bool { code, _ := x.get("/-/ready"); return code == 200 })

	code, body := x.get("/")
	if code != http.StatusOK {
		t.Fatalf("/: %d", code)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="30">`,
		`<a href="metrics">`,
		"Round 1 started",
		"alpha <span class=\"note\">(gcp)</span>",
		"<span class=\"down\">1/2 ready</span> &mdash; worst reason: <span class=\"down\">APIError</span> (1 of 1 down)",
		// The down target is listed, the ready one folded under a <details> summary.
		"<tr class=\"target\"><td><a href=\"probe?provider=alpha&amp;target=down-a2&amp;debug=true\">down-a2</a></td>\n<td class=\"down\">down</td>\n<td title=\"The API answered with another error (5xx, unexpected response).\">APIError</td><td>&lt;b&gt;boom&lt;/b&gt; from down-a2</td>",
		"<details><summary>1 ready target</summary>\n<table>\n<tr class=\"target\"><td><a href=\"probe?provider=alpha&amp;target=a1&amp;debug=true\">a1</a></td>\n<td class=\"up\">up</td>\n<td title=\"Compute Engine answered one page of at most one instance of instances.aggregatedList for the project.\">Ready</td>",
		"for 0s",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page lacks %q", want)
		}
	}
	if strings.Contains(body, "<b>boom") {
		t.Errorf("landing page carries the check message unescaped")
	}
	if t.Failed() {
		t.Logf("landing page:\n%s", body)
	}
	if code, _ := x.get("/nonexistent"); code != http.StatusNotFound {
		t.Errorf("/nonexistent: %d, want 404", code)
	}
	if code, body := x.get("/?state=down"); code != http.StatusOK || strings.Contains(body, ">a1</a></td>") || !strings.Contains(body, ">down-a2</a></td>") {
		t.Errorf("/?state=down: %d, lists a1 or not down-a2:\n%s", code, body)
	}
	if code, body := x.get("/?state=sideways"); code != http.StatusBadRequest {
		t.Errorf("/?state=sideways: %d %q, want 400", code, body)
	}
}

// TestChecksOff: with --provider-check-interval=0 no check runs, the exporter is ready at once,
// /metrics has provider_info but no verdicts, and the status page says checks are off.
func TestChecksOff(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	release := f.Gate("alpha-project") // a check would hang: none may run
	t.Cleanup(release)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=0")

	if code, body := x.get("/-/ready"); code != http.StatusOK {
		t.Fatalf("/-/ready: %d %q, want 200 at once", code, body)
	}
	_, metrics := x.get("/metrics")
	if v, ok := testutil.Metric(t, metrics, `proxy_operator_provider_info{provider="alpha",type="gcp"}`); !ok || v != 1 {
		t.Errorf("provider_info for alpha: %v (present %v), want 1", v, ok)
	}
	if _, ok := testutil.Metric(t, metrics, "proxy_operator_provider_target_up"); ok {
		t.Errorf("checks are off but /metrics has target_up")
	}
	if v, ok := testutil.Metric(t, metrics, "proxy_operator_build_info"); !ok || v != 1 {
		t.Errorf("no proxy_operator_build_info")
	}
	for _, name := range []string{"proxy_operator_provider_check_interval_seconds", "proxy_operator_provider_check_timeout_seconds"} {
		if v, ok := testutil.Metric(t, metrics, name); !ok || v != 0 {
			t.Errorf("checks are off: %s = %v (present %v), want 0", name, v, ok)
		}
	}
	if _, ok := testutil.Metric(t, metrics, "go_goroutines"); !ok {
		t.Errorf("no go collector metrics")
	}
	_, page := x.get("/")
	if !strings.Contains(page, "Checks are off") || !strings.Contains(page, "alpha <span class=\"note\">(gcp)</span> &mdash;\n<span class=\"unchecked\">not checked yet</span>") {
		t.Errorf("status page does not say checks are off, or lacks the provider:\n%s", page)
	}
	if n := f.Checked("alpha"); n != 0 {
		t.Errorf("checks are off but the checker ran %d times", n)
	}
}

// TestReload: a good file swaps the checkers (unchanged ones kept, removed ones closed, new
// ones checked by the next round); a bad file keeps the running set, answers 500 with the
// reason and drops the reload gauge to 0; SIGHUP reloads too; GET may not reload.
func TestReload(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"}, fakechecks.Provider{Name: "beta", Project: "beta-project", Targets: "b1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s", "--web.enable-lifecycle")
	testutil.Eventually(t, 20*time.Second, "readiness", func() bool { code, _ := x.get("/-/ready"); return code == 200 })
	_, metrics := x.get("/metrics")
	if v, ok := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_successful"); !ok || v != 1 {
		t.Fatalf("reload success gauge at start %v (present %v), want 1", v, ok)
	}
	// --provider-check-timeout=0 derives min(15s, interval): 10s here.
	for name, want := range map[string]float64{"proxy_operator_provider_check_interval_seconds": 10, "proxy_operator_provider_check_timeout_seconds": 10} {
		if v, ok := testutil.Metric(t, metrics, name); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	firstTS, ok := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_success_timestamp_seconds")
	if !ok || firstTS < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("reload timestamp at start %v (present %v)", firstTS, ok)
	}

	// Good file: alpha unchanged, beta removed, gamma added. Timestamps have a resolution
	// finer than a second, but make sure the new one can be told apart.
	time.Sleep(10 * time.Millisecond)
	fakechecks.WriteProviders(t, path, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"}, fakechecks.Provider{Name: "gamma", Project: "gamma-project", Targets: "g1"})
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload with a good file: %d %q", code, body)
	}
	_, metrics = x.get("/metrics")
	if v, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_successful"); v != 1 {
		t.Fatalf("reload success gauge %v after a good reload, want 1", v)
	}
	goodTS, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_success_timestamp_seconds")
	if goodTS <= firstTS {
		t.Fatalf("reload timestamp %v did not move past %v", goodTS, firstTS)
	}
	if n := f.Built("alpha"); n != 1 {
		t.Errorf("alpha (unchanged) built %d times, want 1: its checker must be kept", n)
	}
	if n := f.Closed("alpha"); n != 0 {
		t.Errorf("alpha (unchanged) closed %d times, want 0", n)
	}
	if n := f.Closed("beta"); n != 1 {
		t.Errorf("beta (removed) closed %d times, want 1", n)
	}
	if n := f.Built("gamma"); n != 1 {
		t.Errorf("gamma (added) built %d times, want 1", n)
	}
	// The next round checks gamma.
	testutil.Eventually(t, 30*time.Second, "gamma's first verdict", func() bool {
		_, page := x.get("/")
		return strings.Contains(page, `<tbody id="provider-gamma">`) && strings.Contains(page, `>g1</a></td>`)
	})
	_, page := x.get("/")
	if strings.Contains(page, `id="provider-beta"`) || !strings.Contains(page, `<tbody id="provider-alpha">`) {
		t.Errorf("the removed provider beta is still on the status page")
	}

	// Bad file: nothing changes.
	bad := "providers:\n  - name: alpha\n    type: gcp\n    gcp:\n      project: alpha-project\n      colour: blue\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, body := x.do(http.MethodPost, "/-/reload")
	if code != http.StatusInternalServerError {
		t.Fatalf("POST /-/reload with a bad file: %d %q, want 500", code, body)
	}
	if !strings.Contains(body, "colour") {
		t.Fatalf("the 500 body does not carry the loader's error: %q", body)
	}
	_, metrics = x.get("/metrics")
	if v, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_successful"); v != 0 {
		t.Fatalf("reload success gauge %v after a bad reload, want 0", v)
	}
	if ts, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_success_timestamp_seconds"); ts != goodTS {
		t.Fatalf("a failed reload moved the success timestamp from %v to %v", goodTS, ts)
	}
	if r := x.logs.Find("reload failed, keeping the running providers"); r == nil {
		t.Fatalf("no log record for the failed reload")
	}
	_, page = x.get("/")
	for _, want := range []string{`<tbody id="provider-alpha">`, `<tbody id="provider-gamma">`} {
		if !strings.Contains(page, want) {
			t.Errorf("after a bad reload the status page lacks %q: the running set must be kept", want)
		}
	}
	if n := f.Closed("alpha") + f.Closed("gamma"); n != 0 {
		t.Errorf("a bad reload closed %d running checkers", n)
	}

	if code, _ := x.get("/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: %d, want 405", code)
	}

	// SIGHUP with the file fixed again.
	fakechecks.WriteProviders(t, path, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x.signals <- syscall.SIGHUP
	testutil.Eventually(t, 20*time.Second, "the SIGHUP reload", func() bool {
		_, metrics := x.get("/metrics")
		v, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_successful")
		return v == 1
	})
	if n := f.Closed("gamma"); n != 1 {
		t.Errorf("gamma (removed by the SIGHUP reload) closed %d times, want 1", n)
	}
	if n := f.Closed("alpha"); n != 0 {
		t.Errorf("alpha closed %d times before exit, want 0", n)
	}
}

// TestReloadNeedsLifecycleFlag: without --web.enable-lifecycle, POST /-/reload answers 403
// (as Prometheus does) with a message naming the flag and reloads nothing; SIGHUP still reloads.
func TestReloadNeedsLifecycleFlag(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s")
	testutil.Eventually(t, 20*time.Second, "readiness", func() bool { code, _ := x.get("/-/ready"); return code == 200 })
	_, metrics := x.get("/metrics")
	startTS, ok := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_success_timestamp_seconds")
	if !ok {
		t.Fatal("no reload timestamp at start")
	}

	time.Sleep(10 * time.Millisecond) // a reload's timestamp must be told apart from the start's
	fakechecks.WriteProviders(t, path, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"}, fakechecks.Provider{Name: "beta", Project: "beta-project", Targets: "b1"})
	code, body := x.do(http.MethodPost, "/-/reload")
	if code != http.StatusForbidden || !strings.Contains(body, "--web.enable-lifecycle") {
		t.Fatalf("POST /-/reload without --web.enable-lifecycle: %d %q, want 403 naming the flag", code, body)
	}
	_, metrics = x.get("/metrics")
	if ts, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_success_timestamp_seconds"); ts != startTS {
		t.Errorf("the refused POST reloaded: timestamp %v, was %v", ts, startTS)
	}
	if n := f.Built("beta"); n != 0 {
		t.Errorf("the refused POST built beta %d times, want 0", n)
	}
	if code, _ := x.get("/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: %d, want 405", code)
	}

	x.signals <- syscall.SIGHUP
	testutil.Eventually(t, 20*time.Second, "the SIGHUP reload", func() bool {
		_, metrics := x.get("/metrics")
		ts, _ := testutil.Metric(t, metrics, "proxy_operator_config_last_reload_success_timestamp_seconds")
		return ts > startTS
	})
	if n := f.Built("beta"); n != 1 {
		t.Errorf("beta (added) built %d times by the SIGHUP reload, want 1", n)
	}
}

// TestShutdownClosesCheckers: SIGTERM closes every running checker before run returns.
func TestShutdownClosesCheckers(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"}, fakechecks.Provider{Name: "beta", Project: "beta-project", Targets: "b1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s")
	testutil.Eventually(t, 20*time.Second, "readiness", func() bool { code, _ := x.get("/-/ready"); return code == 200 })
	x.signals <- syscall.SIGTERM
	select {
	case code := <-x.done:
		if code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		x.done <- code // for the cleanup's check
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return within 20s of SIGTERM")
	}
	for _, name := range []string{"alpha", "beta"} {
		if n := f.Closed(name); n != 1 {
			t.Errorf("%s closed %d times at exit, want 1", name, n)
		}
	}
	if _, err := http.Get(x.base + "/-/healthy"); err == nil {
		t.Errorf("the HTTP server still answers after exit")
	}
}

// TestListenFailure: an address already in use ends run with exit code 1, closing checkers.
func TestListenFailure(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	var stdout, stderr testutil.SyncBuffer
	code := run([]string{"--config.file=" + path, "--web.listen-address=" + l.Addr().String(), "--provider-check-interval=0"}, &stdout, &stderr, nil)
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "address already in use") {
		t.Fatalf("stderr does not say why:\n%s", stderr.String())
	}
	if n := f.Closed("alpha"); n != 1 {
		t.Fatalf("alpha closed %d times, want 1", n)
	}
}

// TestWebConfigTLSAndBasicAuth serves through a real exporter-toolkit web config file with a
// certificate made here and a bcrypt-hashed password.
func TestWebConfigTLSAndBasicAuth(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	dir := t.TempDir()
	certPEM, keyPEM := selfSignedCert(t)
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	// Relative paths: exporter-toolkit resolves them against the web config file's directory.
	content := fmt.Sprintf("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: %s\n", hash)
	if err := os.WriteFile(webConfig, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "https", "--config.file="+path, "--provider-check-interval=0", "--web.config.file="+webConfig)
	client := tlsClient(t, certPEM)

	getPath := func(path, user, password string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, x.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /metrics over TLS: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	get := func(user, password string) int { t.Helper(); return getPath("/metrics", user, password) }
	// Every endpoint is behind the same TLS and basic auth: the status page and its JSON too.
	for _, path := range []string{"/", "/api/v1/status", "/probe?provider=alpha&target=a1"} {
		if code := getPath(path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", path, code)
		}
	}
	if code := getPath("/api/v1/status", "prometheus", "s3cret"); code != http.StatusOK {
		t.Errorf("/api/v1/status with the right password: %d, want 200", code)
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", code)
	}
	if code := get("prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	if code := get("prometheus", "s3cret"); code != http.StatusOK {
		t.Errorf("right password: %d, want 200", code)
	}

	// Plain HTTP to the TLS port never reaches the handler: Go's TLS server answers a
	// plain-text request with 400.
	plain := &http.Client{Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http"+strings.TrimPrefix(x.base, "https")+"/metrics", nil)
	req.SetBasicAuth("prometheus", "s3cret")
	resp, err := plain.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d, want a failure", resp.StatusCode)
		}
	}

	// A client that does not trust the certificate fails the handshake.
	untrusting := &http.Client{Timeout: 10 * time.Second}
	if resp, err := untrusting.Get(x.base + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without the certificate connected: %d", resp.StatusCode)
	}
}

// selfSignedCert makes a certificate for 127.0.0.1 and its key, PEM-encoded.
func selfSignedCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "provider-health-exporter test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func x509CertPool(t *testing.T, certPEM []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("the test certificate does not parse")
	}
	return pool
}

// TestInsecureHostKeyWarningAtEveryLoad: turning host-key verification off is logged as a
// warning naming the provider at start and again at every reload, so that it stays in recent
// logs for as long as the setting stays in the file. (Checks are off: nothing is dialled.)
func TestInsecureHostKeyWarningAtEveryLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "providers.yml")
	content := "providers:\n" +
		"  - name: lab\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: /nonexistent/id_ed25519\n" +
		"      insecureSkipHostKeyVerification: true\n      storagePool: default\n      hosts:\n        - address: 198.18.0.1\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=0", "--web.enable-lifecycle")
	count := func() int {
		n := 0
		for _, r := range x.logs.Records() {
			w, _ := r["warning"].(string)
			if r["msg"] == "providers file warning" && r["level"] == "WARN" &&
				strings.Contains(w, `provider "lab"`) && strings.Contains(w, "host key verification is off") {
				n++
			}
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d host-key warnings after start, want 1; logs:\n%s", n, x.logs.String())
	}
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d host-key warnings after a reload, want 2; logs:\n%s", n, x.logs.String())
	}
}

// TestReloadLabels: a reload that changes only a provider's labels keeps its checker (no
// rebuild, no redial) and serves the new labels in target_info at once.
func TestReloadLabels(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := filepath.Join(t.TempDir(), "providers.yml")
	write := func(labels string) {
		t.Helper()
		file := "providers:\n  - name: alpha\n    type: gcp\n    labels: " + labels + "\n    gcp:\n      project: alpha-project\n      filter: \"a1\"\n"
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("{site: ams1, owner: platform}")
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s", "--web.enable-lifecycle")
	testutil.Eventually(t, 20*time.Second, "readiness", func() bool { code, _ := x.get("/-/ready"); return code == 200 })
	const before = `proxy_operator_provider_target_info{owner="platform",provider="alpha",site="ams1",target="a1"} 1`
	if _, metrics := x.get("/metrics"); !strings.Contains(metrics, before) {
		t.Fatalf("/metrics lacks %s", before)
	}
	write("{site: fra2}")
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %q", code, body)
	}
	_, metrics := x.get("/metrics")
	if want := `proxy_operator_provider_target_info{provider="alpha",site="fra2",target="a1"} 1`; !strings.Contains(metrics, want) || strings.Contains(metrics, `site="ams1"`) {
		t.Errorf("after the reload /metrics lacks %s or still has the old labels", want)
	}
	if n := f.Built("alpha"); n != 1 {
		t.Errorf("alpha built %d times, want 1: a change of labels alone keeps the checker", n)
	}
	if n := strings.Count(metrics, "proxy_operator_provider_target_info{"); n != 1 {
		t.Errorf("%d target_info series, want 1", n)
	}
}

// TestProbeNeedsCredentials: /probe is served through exporter-toolkit like /metrics, so a web
// config with basic auth protects it.
func TestProbeNeedsCredentials(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	webConfig := basicAuthWebConfig(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=0", "--web.config.file="+webConfig)
	get := func(user, password string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, x.base+"/probe?provider=alpha&target=a1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := x.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("", ""); code != http.StatusUnauthorized || strings.Contains(body, "probe_success") {
		t.Errorf("no credentials: %d %q, want 401 without a verdict", code, body)
	}
	if code, _ := get("prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	code, body := get("prometheus", "s3cret")
	if v, ok := testutil.Metric(t, body, "probe_success"); code != http.StatusOK || !ok || v != 1 {
		t.Errorf("right password: %d %q, want 200 with probe_success 1", code, body)
	}
}

// TestAutoReloadFlag: the exporter started with --config.auto-reload applies a maintenance
// label written into its providers file from a following round, with no signal and no POST.
func TestAutoReloadFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(fakechecks.ClosedPortKVM("{}")), 0o600); err != nil {
		t.Fatal(err)
	}
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s", "--config.auto-reload")
	metrics := func() string { _, m := x.get("/metrics"); return m }
	testutil.Eventually(t, 30*time.Second, "hv1 checked (KeyMaterialError)", func() bool { return testutil.TargetReason(metrics(), "hv1") == "KeyMaterialError" })
	if err := os.WriteFile(path, []byte(fakechecks.ClosedPortKVM(`{maintenance: "true"}`)), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "hv1 in Maintenance without a reload signal", func() bool { return testutil.TargetReason(metrics(), "hv1") == "Maintenance" })
	if !strings.Contains(x.logs.String(), "providers file changed, reloading (--config.auto-reload)") {
		t.Errorf("no log line of the auto-reload:\n%s", x.logs.String())
	}
}

// TestSecurityHeadersOnEveryAnswer: with basic auth on, the security headers are on every
// answer, exporter-toolkit's own 401 included, and on the 400, 404 and 405 of the routes.
func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	webConfig := basicAuthWebConfig(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=0", "--web.config.file="+webConfig)
	for _, c := range []struct {
		method, path string
		auth         bool
		want         int
	}{
		{"GET", "/metrics", false, http.StatusUnauthorized},
		{"GET", "/", false, http.StatusUnauthorized},
		{"GET", "/metrics", true, http.StatusOK},
		{"GET", "/?state=sideways", true, http.StatusBadRequest},
		{"GET", "/probe", true, http.StatusBadRequest},
		{"GET", "/nowhere", true, http.StatusNotFound},
		{"DELETE", "/metrics", true, http.StatusMethodNotAllowed},
	} {
		req, err := http.NewRequest(c.method, x.base+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.auth {
			req.SetBasicAuth("prometheus", "s3cret")
		}
		resp, err := x.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
		for _, h := range []string{"X-Content-Type-Options", "X-Frame-Options", "Content-Security-Policy"} {
			if resp.Header.Get(h) == "" {
				t.Errorf("%s %s (%d): no %s header", c.method, c.path, resp.StatusCode, h)
			}
		}
	}
}

// TestIdleConnectionsAreClosed: a kept-alive connection that sends no further request is
// closed by the exporter after --web.idle-timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=0", "--web.idle-timeout=1s")
	conn, err := net.Dial("tcp", strings.TrimPrefix(x.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The read header timeout (10s) would also close it: the deadline is shorter than that.
	if err := conn.SetReadDeadline(time.Now().Add(8 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the idle connection was not closed within 8s (--web.idle-timeout=1s): %v; read %q", err, got)
	}
	if !strings.Contains(string(got), "Healthy") {
		t.Errorf("answer %q, want Healthy", got)
	}
}

// TestWriteTimeoutDerivation: --web.write-timeout 0 derives a bound that cuts neither a slow
// /metrics nor a /probe that checks for the whole check timeout; a given one shorter than the
// check timeout is refused.
func TestWriteTimeoutDerivation(t *testing.T) {
	if got := writeTimeout(0, 15*time.Second); got != defaultWriteTimeout {
		t.Errorf("derived from a 15s check timeout: %s, want %s", got, defaultWriteTimeout)
	}
	if got := writeTimeout(0, 5*time.Minute); got <= 5*time.Minute {
		t.Errorf("derived from a 5m check timeout: %s, want longer than it", got)
	}
	if got := writeTimeout(time.Minute, 15*time.Second); got != time.Minute {
		t.Errorf("given 1m: %s", got)
	}
	err := checkWebTimeouts(&options{timeout: time.Minute, writeTimeout: 30 * time.Second, idleTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "--web.write-timeout=30s") {
		t.Errorf("a write timeout shorter than the check timeout: %v, want an error naming the flag", err)
	}
}

// basicAuthWebConfig writes a web config file of basic auth alone (user prometheus, password
// s3cret) and returns its path.
func basicAuthWebConfig(t *testing.T) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte(fmt.Sprintf("basic_auth_users:\n  prometheus: %s\n", hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	return webConfig
}
