package vsphere_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// block is a block that logs in to sim, verified with its CA.
func block(sim *vcsim.Sim) *vsphere.Config {
	return &vsphere.Config{URL: sim.URL(), UsernameFile: sim.UsernameFile(), PasswordFile: sim.PasswordFile(), CAFile: sim.CAFile()}
}

// newChecker builds a checker whose debug log is checked for secrets at the test's end.
func newChecker(t *testing.T, cfg *vsphere.Config) *vsphere.Checker {
	t.Helper()
	var logs testutil.SyncBuffer
	c, err := vsphere.New("vc", cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		for _, s := range secrets {
			if s != "" && strings.Contains(logs.String(), s) {
				t.Errorf("the checker's log holds a secret:\n%s", logs.String())
			}
		}
	})
	return c
}

// secrets are strings no message may hold.
var secrets []string

// check runs one round bounded by timeout and returns the vCenter's verdict. Every verdict must
// come from the catalogue and hold no secret, and the round must report each of the checker's
// targets once, the vCenter's first.
func check(t *testing.T, c *vsphere.Checker, timeout time.Duration) checks.TargetResult {
	t.Helper()
	return checkAll(t, c, timeout)[c.Targets()[0]]
}

// checkAll is check's round, every verdict by target.
func checkAll(t *testing.T, c *vsphere.Checker, timeout time.Duration) map[string]checks.TargetResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rs := c.Check(ctx)
	targets := c.Targets()
	if len(rs) != len(targets) || rs[0].Target != targets[0] {
		t.Fatalf("Check returned %+v, want one verdict on each of %v, the vCenter's first", rs, targets)
	}
	byTarget := map[string]checks.TargetResult{}
	for _, r := range rs {
		if _, dup := byTarget[r.Target]; dup || !slices.Contains(targets, r.Target) {
			t.Fatalf("Check returned %+v, want one verdict on each of %v", rs, targets)
		}
		byTarget[r.Target] = r
		if !slices.Contains(vsphere.Reasons, r.Reason) {
			t.Errorf("reason %s is not in the catalogue %v", r.Reason, vsphere.Reasons)
		}
		if r.Up != (r.Reason == checks.ReasonReady) {
			t.Errorf("Up %v with reason %s", r.Up, r.Reason)
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(r.Message, s) {
				t.Errorf("message %q holds a secret", r.Message)
			}
		}
	}
	return byTarget
}

func want(t *testing.T, r checks.TargetResult, reason checks.Reason, in string) {
	t.Helper()
	if r.Reason != reason || !strings.Contains(r.Message, in) {
		t.Fatalf("verdict %s (%q), want %s with %q", r.Reason, r.Message, reason, in)
	}
}

func start(t *testing.T, opts vcsim.Options) *vcsim.Sim {
	t.Helper()
	sim := vcsim.Start(t, opts)
	secrets = append(secrets, sim.Password())
	return sim
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Ready, through one session kept across rounds: the simulator counts one session of the
// checker's user, one login and one call per round.
func TestOneSessionAcrossRounds(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	if got, want := c.Targets(), []string{sim.Host()}; !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	const rounds = 5
	for range rounds {
		want(t, check(t, c, 30*time.Second), checks.ReasonReady, "inventory answered")
	}
	if got, want := c.Targets(), []string{sim.Host(), "DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2", "DC0_H0"}; !slices.Equal(got, want) {
		t.Fatalf("targets %v after the rounds, want %v (the vCenter and its hosts)", got, want)
	}
	got := sim.SessionsOf(sim.Username())
	if len(got) != 1 {
		t.Fatalf("%d sessions of %s after %d rounds, want 1: %+v", len(got), sim.Username(), rounds, got)
	}
	if n := got[0].CallCount; n != 1+rounds {
		t.Errorf("the session counted %d calls, want %d (the login and one call per round)", n, 1+rounds)
	}
	if n := c.Logins(); n != 1 {
		t.Errorf("%d logins, want 1", n)
	}
	// Close logs out, once.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(sim.Sessions()); n != 0 {
		t.Errorf("%d sessions after Close, want 0 (logged out)", n)
	}
}

func TestWrongPassword(t *testing.T) {
	sim := start(t, vcsim.Options{})
	cfg := block(sim)
	cfg.PasswordFile = filepath.Join(t.TempDir(), "password")
	wrong := "not-" + sim.Password()
	secrets = append(secrets, wrong)
	writeFile(t, cfg.PasswordFile, wrong+"\n")
	c := newChecker(t, cfg)
	r := check(t, c, 30*time.Second)
	want(t, r, checks.ReasonUnauthorized, "InvalidLogin")
	if !strings.Contains(r.Message, sim.Username()) {
		t.Errorf("message %q does not name the user", r.Message)
	}
	if n := len(sim.Sessions()); n != 0 {
		t.Errorf("%d sessions after a refused login", n)
	}
}

func TestTLS(t *testing.T) {
	sim := start(t, vcsim.Options{})
	t.Run("CANotSigning", func(t *testing.T) {
		cfg := block(sim)
		cfg.CAFile = sim.OtherCAFile()
		want(t, check(t, newChecker(t, cfg), 30*time.Second), vsphere.ReasonTLSError, "not signed by caFile "+sim.OtherCAFile())
	})
	t.Run("SystemRoots", func(t *testing.T) {
		cfg := block(sim)
		cfg.CAFile = ""
		want(t, check(t, newChecker(t, cfg), 30*time.Second), vsphere.ReasonTLSError, "not signed by the system roots")
	})
	t.Run("InsecureSkipTLSVerify", func(t *testing.T) {
		cfg := block(sim)
		cfg.CAFile = sim.OtherCAFile()
		cfg.InsecureSkipTLSVerify = true
		want(t, check(t, newChecker(t, cfg), 30*time.Second), checks.ReasonReady, "inventory answered")
		if w := cfg.Warnings("vc"); len(w) != 1 || !strings.Contains(w[0], "insecureSkipTLSVerify") {
			t.Errorf("warnings %q, want one naming insecureSkipTLSVerify", w)
		}
		cfg.InsecureSkipTLSVerify = false
		if w := cfg.Warnings("vc"); w != nil {
			t.Errorf("warnings %q for a verified block", w)
		}
	})
}

// The certificate is for 127.0.0.1 and localhost: a simulator on 127.0.0.2 does not match.
func TestTLSHostnameMismatch(t *testing.T) {
	sim := start(t, vcsim.Options{ListenIP: "127.0.0.2"})
	want(t, check(t, newChecker(t, block(sim)), 30*time.Second), vsphere.ReasonTLSError, "not for 127.0.0.2")
}

// A stopped simulator is unreachable; once restarted (its sessions gone) the next round logs
// in again and reads Ready.
func TestStoppedAndRestarted(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	sim.Stop()
	want(t, check(t, c, 30*time.Second), checks.ReasonAPIUnreachable, sim.Host())
	sim.Restart()
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	if n := c.Logins(); n != 2 {
		t.Errorf("%d logins, want 2 (one before the stop, one after the restart)", n)
	}
	if n := len(sim.Sessions()); n != 1 {
		t.Errorf("%d sessions after the restart, want 1", n)
	}
}

// A session the server dropped is replaced in the same round: that round logs in again
// (with a new cookie jar, else the simulator refuses the login) and reads Ready.
func TestSessionDropped(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	if n := sim.DropSessions(); n != 1 {
		t.Fatalf("dropped %d sessions, want 1", n)
	}
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	if n := c.Logins(); n != 2 {
		t.Errorf("%d logins, want 2", n)
	}
	if got := sim.Sessions(); len(got) != 1 || got[0].CallCount != 3 {
		t.Errorf("sessions %+v, want one with 3 calls (login, the repeated call, the next round's)", got)
	}
}

func TestDatacenter(t *testing.T) {
	sim := start(t, vcsim.Options{Datacenters: 3})
	// calls is how many calls the one live session of the checker's user counted, the login
	// included; closing the checker logs that session out.
	calls := func(t *testing.T, c *vsphere.Checker) int64 {
		t.Helper()
		got := sim.SessionsOf(sim.Username())
		if len(got) != 1 {
			t.Fatalf("%d sessions, want 1", len(got))
		}
		_ = c.Close()
		return got[0].CallCount
	}
	for _, tc := range []struct {
		name, dc string
		reason   checks.Reason
	}{
		{"found", "DC1", checks.ReasonReady},
		{"missing", "nope", vsphere.ReasonDatacenterNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := block(sim)
			cfg.Datacenter = tc.dc
			c := newChecker(t, cfg)
			want(t, check(t, c, 30*time.Second), tc.reason, tc.dc)
			if n := calls(t, c); n != 2 {
				t.Errorf("%d calls, want 2 (the login and one RetrievePropertiesEx)", n)
			}
		})
	}
	// Pages of one object: the whole inventory (folders, datacenters, compute resources, hosts
	// and datastores of 3 datacenters) is read through continuations.
	restore := vsphere.SetPageSize(1)
	defer restore()
	cfg := block(sim)
	cfg.Datacenter = "DC2"
	c := newChecker(t, cfg)
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "DC2")
	if got, want := c.Targets(), []string{sim.Host(), "DC2_C0_H0", "DC2_C0_H1", "DC2_C0_H2", "DC2_H0"}; !slices.Equal(got, want) {
		t.Errorf("targets read one object a page: %v, want %v", got, want)
	}
	if n := calls(t, c); n < 20 {
		t.Errorf("%d calls with pages of one object, want the login, the first page and a continuation for each object of 3 datacenters", n)
	}
	cfg = block(sim)
	cfg.Datacenter = "DC9"
	c = newChecker(t, cfg)
	want(t, check(t, c, 30*time.Second), vsphere.ReasonDatacenterNotFound, "among the 3 datacenters")
	if got := c.Targets(); len(got) != 1 {
		t.Errorf("targets %v of a datacenter that does not exist, want only the vCenter's", got)
	}
}

// A rewritten password file is read at the next check and logs in again; the replaced
// session is logged out.
func TestPasswordRotated(t *testing.T) {
	sim := start(t, vcsim.Options{})
	cfg := block(sim)
	cfg.PasswordFile = filepath.Join(t.TempDir(), "password")
	writeFile(t, cfg.PasswordFile, sim.Password())
	c := newChecker(t, cfg)
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	wrong := sim.Password() + "-rotated"
	secrets = append(secrets, wrong)
	writeFile(t, cfg.PasswordFile, wrong)
	want(t, check(t, c, 30*time.Second), checks.ReasonUnauthorized, "InvalidLogin")
	if n := len(sim.Sessions()); n != 0 {
		t.Errorf("%d sessions after the password changed, want 0 (the old one logged out)", n)
	}
	writeFile(t, cfg.PasswordFile, sim.Password()+"\n") // a trailing newline is trimmed
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	if n := c.Logins(); n != 3 {
		t.Errorf("%d logins, want 3", n)
	}
	os.Remove(cfg.PasswordFile)
	want(t, check(t, c, 30*time.Second), checks.ReasonCredentialsError, "passwordFile")
}

// A stopped (SIGSTOP) simulator is cut at the deadline, on a pooled connection and on a new
// one (a TLS handshake that never ends); the session survives the pause.
func TestSlowServerCut(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	fresh := newChecker(t, block(sim))
	sim.Pause()
	const deadline = 500 * time.Millisecond
	for _, tc := range []struct {
		name, stage string
		c           *vsphere.Checker
	}{{"pooled", "inventory call", c}, {"new", "connecting", fresh}} {
		start := time.Now()
		r := check(t, tc.c, deadline)
		elapsed := time.Since(start)
		want(t, r, checks.ReasonTimeout, tc.stage)
		if elapsed > deadline+time.Second {
			t.Errorf("%s: Check returned after %v with a %v deadline", tc.name, elapsed, deadline)
		}
	}
	sim.Resume()
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	if n := c.Logins(); n != 1 {
		t.Errorf("%d logins, want 1: the session survives a pause", n)
	}
}

// A listener that accepts TCP and never speaks TLS: the check gives Timeout at its deadline,
// and the connection is closed, not left dialling.
func TestSilentListenerCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn
		}
	}()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "u"), "user")
	writeFile(t, filepath.Join(dir, "p"), "pass")
	c := newChecker(t, &vsphere.Config{URL: "https://" + ln.Addr().String() + "/sdk", UsernameFile: filepath.Join(dir, "u"), PasswordFile: filepath.Join(dir, "p")})
	const deadline = 300 * time.Millisecond
	start := time.Now()
	r := check(t, c, deadline)
	elapsed := time.Since(start)
	want(t, r, checks.ReasonTimeout, "connecting")
	if elapsed > deadline+time.Second {
		t.Errorf("Check returned after %v with a %v deadline", elapsed, deadline)
	}
	conn := <-accepted
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			if err != io.EOF {
				t.Errorf("the abandoned dial's connection was not closed: %v", err)
			}
			break
		}
	}
}

// Close does not wait for a check that is stuck on a paused server: it cuts the check's call,
// which returns while the server is still paused.
func TestCloseDoesNotWaitForAStuckCheck(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	sim.Pause()
	defer sim.Resume()
	done := make(chan checks.TargetResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		done <- c.Check(ctx)[0]
	}()
	testutil.Eventually(t, 30*time.Second, "the check is making its call", c.Busy)
	select {
	case r := <-done:
		t.Fatalf("the check on a paused server returned before Close: %s (%q)", r.Reason, r.Message)
	case <-time.After(time.Second):
	}
	// Close cuts the check; which of the two returns first is a race of goroutines: both
	// must, while the server is still paused.
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close waited for the check stuck on the paused server")
	}
	var r checks.TargetResult
	select {
	case r = <-done:
	case <-time.After(time.Minute): // the check's own deadline is 5 minutes away
		t.Fatal("Close did not cut the running check's call")
	}
	if r.Reason == checks.ReasonReady {
		t.Errorf("a check cut by Close on a paused server read Ready: %q", r.Message)
	}
}

func TestAPIError(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	sim.InjectFault("RetrievePropertiesEx", vcsim.SystemError, 0)
	want(t, check(t, c, 30*time.Second), checks.ReasonAPIError, "SystemError")
	sim.ClearFaults()
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
}

// Real vCenter answers a call on a dead session with a NotAuthenticated fault (the simulator
// with a missingSet, see TestSessionDropped): the round logs in again and reads Ready.
func TestNotAuthenticatedFault(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	sim.InjectFault("RetrievePropertiesEx", vcsim.NotAuthenticated, 1)
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
	if n := c.Logins(); n != 2 {
		t.Errorf("%d logins, want 2", n)
	}
	// A NotAuthenticated right after a login is not retried forever.
	sim.InjectFault("RetrievePropertiesEx", vcsim.NotAuthenticated, 2)
	want(t, check(t, c, 30*time.Second), checks.ReasonAPIError, "right after Login")
	if n := c.Logins(); n != 3 {
		t.Errorf("%d logins, want 3 (one retry only)", n)
	}
}

// A Login refused for lack of permission is Unauthorized too.
func TestLoginNoPermission(t *testing.T) {
	sim := start(t, vcsim.Options{})
	sim.InjectFault("Login", vcsim.NoPermission, 0)
	want(t, check(t, newChecker(t, block(sim)), 30*time.Second), checks.ReasonUnauthorized, "NoPermission")
}

// A wrong path answers 404: the server is there, the SDK is not.
func TestWrongPath(t *testing.T) {
	sim := start(t, vcsim.Options{})
	cfg := block(sim)
	cfg.URL = strings.TrimSuffix(sim.URL(), "/sdk") + "/wrong"
	want(t, check(t, newChecker(t, cfg), 30*time.Second), checks.ReasonAPIError, "404")
}

// A CA file without a certificate is a credentials problem: nothing is sent.
func TestCAFileWithoutCertificate(t *testing.T) {
	sim := start(t, vcsim.Options{})
	cfg := block(sim)
	cfg.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, cfg.CAFile, "not a certificate\n")
	c := newChecker(t, cfg)
	want(t, check(t, c, 30*time.Second), checks.ReasonCredentialsError, "no PEM certificate")
	if c.Logins() != 0 {
		t.Errorf("a login was attempted with an unusable CA file")
	}
	// Fixed in place: read again at the next check.
	data, err := os.ReadFile(sim.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg.CAFile, string(data))
	want(t, check(t, c, 30*time.Second), checks.ReasonReady, "")
}

// A check whose deadline has passed contacts nothing and says so.
func TestDeadlinePassed(t *testing.T) {
	sim := start(t, vcsim.Options{})
	c := newChecker(t, block(sim))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := c.Check(ctx)[0]
	if r.Reason != checks.ReasonTimeout || !r.NotContacted {
		t.Errorf("verdict %+v, want Timeout, not contacted", r)
	}
	if n := len(sim.Sessions()); n != 0 {
		t.Errorf("%d sessions: a check past its deadline logged in", n)
	}
}

func TestUnreachable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "u"), "user")
	writeFile(t, filepath.Join(dir, "p"), "pass")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, u := range []string{"https://" + addr + "/sdk", "https://vcenter.invalid/sdk"} {
		c := newChecker(t, &vsphere.Config{URL: u, UsernameFile: filepath.Join(dir, "u"), PasswordFile: filepath.Join(dir, "p")})
		want(t, check(t, c, 30*time.Second), checks.ReasonAPIUnreachable, "unreachable")
	}
}

func TestTargetName(t *testing.T) {
	for raw, want := range map[string]string{
		"https://vcenter.example.com/sdk":      "vcenter.example.com",
		"https://VCenter.Example.com:443/sdk":  "vcenter.example.com",
		"https://vcenter.example.com:8443/sdk": "vcenter.example.com:8443",
		"https://10.0.0.5":                     "10.0.0.5",
		"https://[fd00::5]:443/sdk":            "[fd00::5]",
		"https://[fd00::5]:9443/sdk":           "[fd00::5]:9443",
	} {
		u, err := vsphere.ParseURL(raw)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if got := vsphere.TargetName(u); got != want {
			t.Errorf("target of %s = %q, want %q", raw, got, want)
		}
	}
}

func TestParseURL(t *testing.T) {
	u, err := vsphere.ParseURL("https://vcenter.example.com")
	if err != nil || u.Path != "/sdk" {
		t.Errorf("an empty path: %v, %v; want /sdk", u, err)
	}
	for _, bad := range []string{
		"http://vcenter.example.com/sdk", "vcenter.example.com/sdk", "https:///sdk",
		"https://admin:hunter2@vcenter.example.com/sdk", "https://admin:hunter2 x@vcenter.example.com/sdk",
		"https://vcenter.example.com/sdk?x=1", "https://vcenter.example.com:44x/sdk",
		"https://vcenter.example.com:99999/sdk", "https://vcenter.example.com/sdk#frag",
	} {
		_, err := vsphere.ParseURL(bad)
		if err == nil {
			t.Errorf("%s accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error %q holds the password", bad, err)
		}
		if !strings.Contains(err.Error(), "https://vcenter.example.com/sdk") {
			t.Errorf("%s: the error %q does not say what is allowed", bad, err)
		}
	}
	if _, err := url.Parse("https://x"); err != nil {
		t.Fatal(err)
	}
}
