package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// envRunMain makes the test binary run the exporter's main instead of the tests, so that the
// signal handling of the real process can be tested from a subprocess.
const envRunMain = "PROVIDER_HEALTH_EXPORTER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		fakechecks.New().Install()
		main()
		return
	}
	os.Exit(m.Run())
}

// testExporter is run() running in the test process, on a loopback port of its own.
type testExporter struct {
	t       *testing.T
	base    string // http://127.0.0.1:PORT or https://...
	signals chan os.Signal
	done    chan int
	logs    *testutil.SyncBuffer
	stdout  *testutil.SyncBuffer
	client  *http.Client
}

// startExporter runs run() with args plus a loopback listen address and JSON logs. It stops the
// exporter (SIGTERM) at the end of the test and expects exit code 0.
func startExporter(t *testing.T, scheme string, args ...string) *testExporter {
	t.Helper()
	x := &testExporter{
		t:       t,
		signals: make(chan os.Signal, 1),
		done:    make(chan int, 1),
		logs:    &testutil.SyncBuffer{},
		stdout:  &testutil.SyncBuffer{},
		client:  &http.Client{Timeout: 10 * time.Second},
	}
	args = append([]string{"--web.listen-address=127.0.0.1:0", "--log.format=json", "--log.level=debug"}, args...)
	go func() { x.done <- run(args, x.stdout, x.logs, x.signals) }()
	var code *int
	exited := func() bool {
		if code != nil {
			return true
		}
		select {
		case c := <-x.done:
			code = &c
			return true
		default:
			return false
		}
	}
	t.Cleanup(func() {
		if !exited() {
			x.signals <- syscall.SIGTERM
			select {
			case c := <-x.done:
				code = &c
			case <-time.After(20 * time.Second):
				t.Errorf("the exporter did not stop within 20s of SIGTERM; logs:\n%s", x.logs.String())
				return
			}
		}
		if *code != 0 {
			t.Errorf("exit code %d, want 0; logs:\n%s", *code, x.logs.String())
		}
	})
	x.base = scheme + "://" + testutil.ListenAddress(t, x.logs, exited)
	return x
}

// get fetches a path and returns the status and body.
func (x *testExporter) get(path string) (int, string) {
	x.t.Helper()
	return x.do(http.MethodGet, path)
}

func (x *testExporter) do(method, path string) (int, string) {
	x.t.Helper()
	return testutil.Request(x.t, x.client, method, x.base+path)
}

func TestCheckTiming(t *testing.T) {
	for _, tc := range []struct {
		interval, timeout time.Duration
		want              time.Duration
		wantErr           []string // every line of the error, in order
	}{
		{interval: 12 * time.Second, want: 12 * time.Second},
		{interval: 10 * time.Second, want: 10 * time.Second},
		{interval: time.Minute, want: 15 * time.Second},
		{interval: 15 * time.Second, want: 15 * time.Second},
		{interval: time.Minute, timeout: 30 * time.Second, want: 30 * time.Second},
		{interval: 12 * time.Second, timeout: 12 * time.Second, want: 12 * time.Second},
		{interval: 0, want: 0},
		{interval: 0, timeout: 5 * time.Second, want: 0},
		{interval: 5 * time.Second, wantErr: []string{"--provider-check-interval=5s: must be 0 (checks off) or at least 10s"}},
		{interval: 9 * time.Second, wantErr: []string{"--provider-check-interval=9s: must be 0 (checks off) or at least 10s"}},
		{interval: -time.Second, wantErr: []string{"--provider-check-interval=-1s: must be 0 (checks off) or at least 10s"}},
		{interval: 12 * time.Second, timeout: 13 * time.Second, wantErr: []string{
			"--provider-check-timeout=13s: may not exceed --provider-check-interval (12s); allowed: 0 (derive min(15s, interval)) or up to 12s"}},
		{interval: time.Minute, timeout: -time.Second, wantErr: []string{
			"--provider-check-timeout=-1s: must be 0 (derive min(15s, interval)) or a positive duration up to the interval"}},
		{interval: 5 * time.Second, timeout: -time.Second, wantErr: []string{
			"--provider-check-interval=5s: must be 0 (checks off) or at least 10s",
			"--provider-check-timeout=-1s: must be 0 (derive min(15s, interval)) or a positive duration up to the interval"}},
	} {
		t.Run(fmt.Sprintf("interval=%s,timeout=%s", tc.interval, tc.timeout), func(t *testing.T) {
			got, err := checkTiming(tc.interval, tc.timeout)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("got timeout %s, want error %q", got, tc.wantErr)
				}
				if lines := strings.Split(err.Error(), "\n"); !slicesEqual(lines, tc.wantErr) {
					t.Fatalf("error:\n%s\nwant:\n%s", err, strings.Join(tc.wantErr, "\n"))
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tc.want {
				t.Fatalf("timeout %s, want %s", got, tc.want)
			}
		})
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestIntervalFlagAloneStarts: --provider-check-interval=12s with no timeout flag starts, with
// the derived timeout of 12s.
func TestIntervalFlagAloneStarts(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=12s")
	r := x.logs.Find("checks on")
	if r == nil {
		t.Fatalf("no \"checks on\" log record; logs:\n%s", x.logs.String())
	}
	if r["interval"] != "12s" || r["timeout"] != "12s" {
		t.Fatalf("interval %v, timeout %v; want 12s and 12s", r["interval"], r["timeout"])
	}
	if r := x.logs.Find("starting provider_health_exporter"); r == nil || r["version"] == nil || r["build_context"] == nil {
		t.Fatalf("no start record with version and build context; logs:\n%s", x.logs.String())
	}
}

// TestFlagsCheckedBeforeFile: a bad flag is reported, naming the flag, even when the providers
// file does not exist; the file is not read.
func TestFlagsCheckedBeforeFile(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--provider-check-interval=5s"}, "--provider-check-interval=5s: must be 0 (checks off) or at least 10s"},
		{[]string{"--provider-check-interval=9s"}, "--provider-check-interval=9s: must be 0 (checks off) or at least 10s"},
		{[]string{"--provider-check-interval=30s", "--provider-check-timeout=31s"}, "--provider-check-timeout=31s: may not exceed --provider-check-interval (30s)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr testutil.SyncBuffer
			missing := filepath.Join(t.TempDir(), "missing.yml")
			args := append([]string{"--config.file=" + missing, "--web.listen-address=127.0.0.1:0"}, tc.args...)
			if code := run(args, &stdout, &stderr, nil); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
			if strings.Contains(stderr.String(), "missing.yml") {
				t.Fatalf("the providers file was read before the flags were checked:\n%s", stderr.String())
			}
		})
	}
}

func TestUnparsableFlag(t *testing.T) {
	var stdout, stderr testutil.SyncBuffer
	if code := run([]string{"--provider-check-interval=often"}, &stdout, &stderr, nil); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "provider-check-interval") {
		t.Fatalf("stderr does not name the flag:\n%s", stderr.String())
	}
}

func TestVersionFlag(t *testing.T) {
	var stdout, stderr testutil.SyncBuffer
	if code := run([]string{"--version"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"provider_health_exporter, version", "branch:", "revision:", "build user:", "build date:", "go version:"} {
		if !strings.Contains(out, want) {
			t.Errorf("--version output lacks %q:\n%s", want, out)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	// kvm checks are absent from this test's build whatever the binary registers, so that the
	// "not available" problem is reported.
	fakechecks.WithoutType(t, kvm.Type)
	dir := t.TempDir()

	t.Run("ok", func(t *testing.T) {
		path := fakechecks.WriteProviders(t, filepath.Join(dir, "good.yml"), fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,a2"})
		var stdout, stderr testutil.SyncBuffer
		if code := run([]string{"--config.check", "--config.file=" + path}, &stdout, &stderr, nil); code != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr.String())
		}
		if got := stdout.String(); got != "ok\n" {
			t.Fatalf("stdout %q, want \"ok\\n\"", got)
		}
		if f.Closed("alpha") != 1 {
			t.Fatalf("the checker built for the check was closed %d times, want 1", f.Closed("alpha"))
		}
	})

	t.Run("bad file", func(t *testing.T) {
		// Two problems the loader reports (an unknown field, an unknown type), each on its line.
		path := filepath.Join(dir, "bad.yml")
		content := "providers:\n" +
			"  - name: alpha\n    type: gcp\n    gcp:\n      project: alpha-project\n      colour: blue\n" +
			"  - name: beta\n    type: vmware\n"
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, loadErr := config.Load(path)
		if loadErr == nil {
			t.Fatal("config.Load accepted the bad file")
		}
		var stdout, stderr testutil.SyncBuffer
		args := []string{"--config.check", "--config.file=" + path, "--provider-check-interval=5s"}
		if code := run(args, &stdout, &stderr, nil); code != 1 {
			t.Fatalf("exit code %d, want 1", code)
		}
		want := "--provider-check-interval=5s: must be 0 (checks off) or at least 10s\n" + loadErr.Error() + "\n"
		if got := stderr.String(); got != want {
			t.Fatalf("stderr:\n%s\nwant:\n%s", got, want)
		}
		if strings.Contains(stdout.String(), "ok") {
			t.Fatalf("stdout says ok: %q", stdout.String())
		}
	})

	t.Run("kvm bounds longer than the round", func(t *testing.T) {
		// The same file fits a 16s round and not the 10s one the shortest interval derives:
		// the check knows the round's deadline from the flags.
		path := filepath.Join(dir, "slow-kvm.yml")
		content := "providers:\n" +
			"  - name: lab\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: /nonexistent/id_ed25519\n" +
			"      insecureSkipHostKeyVerification: true\n      storagePool: default\n      sshTimeout: 5s\n" +
			"      hosts:\n        - address: 198.18.0.1\n"
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.LoadFor(path, 16*time.Second); err != nil {
			t.Fatalf("the file does not fit a 16s round either: %v", err)
		}
		var stdout, stderr testutil.SyncBuffer
		args := []string{"--config.check", "--config.file=" + path, "--provider-check-interval=10s"}
		if code := run(args, &stdout, &stderr, nil); code != 1 {
			t.Fatalf("exit code %d, want 1; stdout %q", code, stdout.String())
		}
		want := path + ":4:5: providers[0].kvm: a host's bounds add up to more than a round's deadline of 10s " +
			"(--provider-check-timeout): tcpTimeout 2s + 2 × sshTimeout 5s + 2 × libvirtTimeout 1s + 4 calls × rpcTimeout 500ms = 16s;"
		if got := stderr.String(); !strings.HasPrefix(got, want) {
			t.Fatalf("stderr:\n%s\nwant it to start with:\n%s", got, want)
		}
	})

	t.Run("bad web config", func(t *testing.T) {
		path := fakechecks.WriteProviders(t, filepath.Join(dir, "good-too.yml"), fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
		webConfig := filepath.Join(dir, "web.yml")
		if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr testutil.SyncBuffer
		args := []string{"--config.check", "--config.file=" + path, "--web.config.file=" + webConfig}
		if code := run(args, &stdout, &stderr, nil); code != 1 {
			t.Fatalf("exit code %d, want 1; stdout %q", code, stdout.String())
		}
		if got := stderr.String(); !strings.HasPrefix(got, "--web.config.file="+webConfig+": ") || !strings.Contains(got, "missing.crt") {
			t.Fatalf("stderr does not name the web config problem:\n%s", got)
		}
	})

	t.Run("type not in this build", func(t *testing.T) {
		path := filepath.Join(dir, "kvm.yml")
		content := "providers:\n" +
			"  - name: lab\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: /nonexistent/id_ed25519\n" +
			"      insecureSkipHostKeyVerification: true\n      storagePool: default\n      hosts:\n        - address: 198.18.0.1\n" +
			"  - name: alpha\n    type: gcp\n    gcp:\n      project: fail-to-build\n      filter: a1\n"
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(path); err != nil {
			t.Fatalf("config.Load rejected the file, the test needs a valid one: %v", err)
		}
		var stdout, stderr testutil.SyncBuffer
		if code := run([]string{"--config.check", "--config.file=" + path}, &stdout, &stderr, nil); code != 1 {
			t.Fatalf("exit code %d, want 1", code)
		}
		want := "provider lab: checks of type kvm are not available in this build\n" +
			"provider alpha: cannot build this one\n"
		if got := stderr.String(); got != want {
			t.Fatalf("stderr:\n%s\nwant:\n%s", got, want)
		}
	})
}

// TestSignalsSubprocess starts the real binary (this test binary running main) and sends it real
// signals: SIGHUP reloads the providers file, SIGTERM stops it with exit code 0.
func TestSignalsSubprocess(t *testing.T) {
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	logs := &testutil.SyncBuffer{}
	cmd := exec.Command(os.Args[0], "--config.file="+path, "--web.listen-address=127.0.0.1:0",
		"--log.format=json", "--provider-check-interval=10s")
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	cmd.Stdout, cmd.Stderr = logs, logs
	p := testutil.StartProcess(t, cmd)
	x := &testExporter{t: t, logs: logs, client: &http.Client{Timeout: 10 * time.Second}}
	x.base = "http://" + testutil.ListenAddress(t, logs, p.Exited)
	testutil.Eventually(t, 20*time.Second, "readiness", func() bool { code, _ := x.get("/-/ready"); return code == 200 })

	fakechecks.WriteProviders(t, path, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"}, fakechecks.Provider{Name: "beta", Project: "beta-project", Targets: "b1"})
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the reload log record", func() bool { return logs.Find("providers file reloaded") != nil })
	r := logs.Find("providers file reloaded")
	if r["added"] != float64(1) || r["kept"] != float64(1) || r["providers"] != float64(2) {
		t.Fatalf("reload record %v, want added 1, kept 1, providers 2", r)
	}
	_, body := x.get("/metrics")
	if v, ok := testutil.Metric(t, body, "proxy_operator_config_last_reload_successful"); !ok || v != 1 {
		t.Fatalf("reload success gauge %v (present %v), want 1", v, ok)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the exporter to exit", p.Exited)
	if err := p.Wait(); err != nil {
		t.Fatalf("exit: %v; logs:\n%s", err, logs.String())
	}
	if logs.Find("stopped") == nil {
		t.Fatalf("no \"stopped\" record; logs:\n%s", logs.String())
	}
}

// tlsClient trusts the certificate at certPEM.
func tlsClient(t *testing.T, certPEM []byte) *http.Client {
	t.Helper()
	pool := x509CertPool(t, certPEM)
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
}

// TestCheckCRD: the --crd.* flags are validated with messages that name the flag.
func TestCheckCRD(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    crdOptions
		want string // "" = valid
	}{
		{"off", crdOptions{heartbeatInterval: 5 * time.Minute, instance: "provider-health-exporter"}, ""},
		{"on", crdOptions{enabled: true, heartbeatInterval: 5 * time.Minute, instance: "provider-health-exporter"}, ""},
		{"leader election", crdOptions{enabled: true, leaderElect: true, heartbeatInterval: time.Minute, instance: "provider-health-exporter"}, ""},
		{"heartbeat too short", crdOptions{enabled: true, heartbeatInterval: 500 * time.Millisecond, instance: "provider-health-exporter"}, "--crd.heartbeat-interval=500ms: must be at least 1s"},
		{"leader election without the writer", crdOptions{leaderElect: true, heartbeatInterval: time.Minute, instance: "provider-health-exporter"}, "--crd.leader-elect: needs --crd.enabled"},
		{"another instance", crdOptions{enabled: true, heartbeatInterval: time.Minute, instance: "team-b.eu_1"}, ""},
		{"empty instance", crdOptions{enabled: true, heartbeatInterval: time.Minute}, `--crd.instance="": must be a non-empty label value (at most 63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)`},
		{"instance not a label value", crdOptions{enabled: true, heartbeatInterval: time.Minute, instance: "team b/"}, `--crd.instance="team b/": must be a non-empty label value (at most 63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkCRD(tc.o)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("checkCRD = %q, want %q", got, tc.want)
			}
		})
	}

	// Through the command line: --config.check reports it, and a start refuses it before the
	// providers file is read.
	var stdout, stderr bytes.Buffer
	code := run([]string{"--config.file=" + fakechecks.WriteProviders(t, ""), "--config.check", "--crd.leader-elect"}, &stdout, &stderr, nil)
	if code != 1 || !strings.Contains(stderr.String(), "--crd.leader-elect: needs --crd.enabled") {
		t.Errorf("--config.check --crd.leader-elect: exit %d, stderr %q", code, stderr.String())
	}
}

func TestCheckShard(t *testing.T) {
	ok := shardOptions{enabled: true, leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	with := func(f func(o *shardOptions)) shardOptions {
		o := ok
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		o    shardOptions
		want string // "" = valid
	}{
		{"off", shardOptions{}, ""},
		{"defaults", ok, ""},
		{"identity", with(func(o *shardOptions) { o.identity = "phe-0.example" }), ""},
		{"identity not a name", with(func(o *shardOptions) { o.identity = "PHE_0" }), `--shard.identity="PHE_0": must name a Lease: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters`},
		{"retry period as long as the lease", with(func(o *shardOptions) { o.retryPeriod = 15 * time.Second }), "--shard.retry-period=15s: must be above 0 and below --shard.lease-duration (15s)"},
		{"renew deadline past the lease", with(func(o *shardOptions) { o.renewDeadline = 20 * time.Second }), "--shard.renew-deadline=20s: must be above 0 and at most --shard.lease-duration (15s)"},
		{"lease too short", with(func(o *shardOptions) {
			o.leaseDuration, o.retryPeriod, o.renewDeadline = 500*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
		}), "--shard.lease-duration=500ms: must be at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if err := checkShard(tc.o); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("checkShard = %q, want %q", got, tc.want)
			}
		})
	}

	// Through the command line: --config.check reports it.
	var stdout, stderr bytes.Buffer
	code := run([]string{"--config.file=" + fakechecks.WriteProviders(t, ""), "--config.check", "--shard.enabled", "--shard.retry-period=1m"}, &stdout, &stderr, nil)
	if code != 1 || !strings.Contains(stderr.String(), "--shard.retry-period=1m0s: must be above 0 and below --shard.lease-duration (15s)") {
		t.Errorf("--config.check --shard.retry-period=1m: exit %d, stderr %q", code, stderr.String())
	}
}

// TestConfigCheckWarnsAboutUnreadableFiles: --config.check names every referenced file it cannot
// read as a warning (a verdict at run time, not a problem of the file), and still says ok.
func TestConfigCheckWarnsAboutUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	if err := os.WriteFile(present, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	content := fmt.Sprintf(`providers:
  - name: cluster
    type: kubernetes
    kubernetes:
      kubeconfig: %[2]s
  - name: cloud
    type: gcp
    gcp:
      project: my-project-123
      credentialsFile: %[1]s
  - name: lab
    type: kvm
    kvm:
      user: root
      privateKeyFile: %[2]s
      knownHostsFile: %[1]s
      storagePool: default
      hosts:
        - address: 198.18.0.1
  - name: vcenter
    type: vsphere
    vsphere:
      url: https://vcenter.example.com/sdk
      usernameFile: %[1]s
      passwordFile: %[2]s
`, present, missing)
	path := filepath.Join(dir, "providers.yml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testutil.SyncBuffer
	if code := run([]string{"--config.check", "--config.file=" + path}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr %q", code, stderr.String())
	}
	want := "warning: provider cluster: kubeconfig: stat " + missing + ": no such file or directory (its checks will fail until the file is readable)\n" +
		"warning: provider lab: privateKeyFile: stat " + missing + ": no such file or directory (its checks will fail until the file is readable)\n" +
		"warning: provider vcenter: passwordFile: stat " + missing + ": no such file or directory (its checks will fail until the file is readable)\n" +
		"ok\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
}

// TestConfigCheckReadsHostFiles: --config.check reads every host file a kvm provider's
// hostFiles match, prints each problem at its file, line and column and fails; a pattern
// matching no file and a host listed twice are warnings.
func TestConfigCheckReadsHostFiles(t *testing.T) {
	dir := t.TempDir()
	path := fakechecks.HostFilesProviders(t, dir)
	good := filepath.Join(dir, "inventory", "good.yml")
	testutil.ReplaceFile(t, good, "- targets: ['127.0.0.1:1', '127.0.0.9:1']\n")
	var stdout, stderr testutil.SyncBuffer
	if code := run([]string{"--config.check", "--config.file=" + path}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr %q", code, stderr.String())
	}
	want := "warning: provider kvm-inv: privateKeyFile: stat /nonexistent/key: no such file or directory (its checks will fail until the file is readable)\n" +
		"warning: provider kvm-inv: hostFiles: " + good + `:1: host "127.0.0.1:1" is already listed in hosts; left out` + "\n" +
		"warning: provider kvm-inv: hostFiles: " + filepath.Join(dir, "inventory", "*.json") + " matches no file (its hosts are checked once it exists)\n" +
		"ok\n"
	if got := stdout.String(); !strings.HasPrefix(got, `warning: provider "kvm-inv": SSH host key verification is off`) || !strings.HasSuffix(got, want) {
		t.Errorf("stdout:\n%s\nwant it to end with:\n%s", got, want)
	}

	bad := filepath.Join(dir, "inventory", "bad.json")
	testutil.ReplaceFile(t, bad, "[\n  {\"targets\": [\"127.0.0.2:99999\"], \"labels\": {\"job\": \"x\"}}\n]\n")
	stdout, stderr = testutil.SyncBuffer{}, testutil.SyncBuffer{}
	if code := run([]string{"--config.check", "--config.file=" + path}, &stdout, &stderr, nil); code != 1 {
		t.Fatalf("exit code %d, want 1; stdout %q", code, stdout.String())
	}
	wantErr := bad + `:2:16: [0].targets[0]: invalid address "127.0.0.2:99999": port "99999" is not a number from 1 to 65535 (allowed: host, host:port or [v6]:port)` + "\n" +
		bad + `:2:47: [0].labels.job: label name "job" is reserved (the exporter's or Prometheus's own label; not allowed: provider, target, job, instance, or a name starting with __)` + "\n"
	if got := stderr.String(); got != wantErr {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, wantErr)
	}
}
