// Package vcsim starts govmomi's vCenter simulator (the simulator package, VPX model: datacenters
// DC0, DC1, ... each with a cluster, hosts and VMs) as a process of its own, for the tests of the
// vsphere checker and for the demo. The process is the small main in cmd/vcsim, built once into
// bin/vcsim-<source hash>-<govmomi version>/ (test/testenv/toolbuild: one build at a time
// across processes, about a minute on two cores the first time).
//
// The simulator serves its SDK on https://127.0.0.1:<port>/sdk with a certificate of its own: a
// throw-away CA (CAFile) signs a server certificate for IP 127.0.0.1 and DNS localhost. A second,
// unrelated CA (OtherCAFile) signs nothing the simulator serves. Exactly one username and password
// log in (UsernameFile, PasswordFile hold them, without a trailing newline); any other pair gets
// the simulator's InvalidLogin ("Login failure").
//
// API:
//
//	sim := vcsim.Start(t, vcsim.Options{})   // Port 0: a free port; Datacenters 0: one (DC0);
//	                                         // ListenIP "": 127.0.0.1; Username/Password "": generated
//	sim.URL()                                // "https://127.0.0.1:PORT/sdk"
//	sim.Host()                               // "127.0.0.1:PORT"
//	sim.CAFile(), sim.OtherCAFile()          // PEM files
//	sim.Username(), sim.Password()           // the accepted credentials
//	sim.UsernameFile(), sim.PasswordFile()   // the same, as files
//	sim.Sessions()                           // live sessions: key, user, callCount (logins count 1)
//	sim.DropSessions()                       // terminate every live session server-side
//	sim.InjectFault("RetrievePropertiesEx", vcsim.SystemError, 0) // that method answers a fault
//	                                         // (SystemError, NotAuthenticated, NoPermission), N times or always
//	sim.ClearFaults()
//	sim.Stop(), sim.Restart()                // kill, and start again on the same port and cert
//	sim.Pause(), sim.Resume()                // SIGSTOP / SIGCONT: calls hang, TCP still accepted
//	sim.LogPath(), sim.LogTail(n)
//
// Sessions and DropSessions ask the process's admin endpoint, which reads the SessionManager
// through the simulator's internal session: asking opens no session and counts no call. A
// restart loses every session (the process is new). The process is stopped at the test's
// cleanup, dies with the test binary (Pdeathsig), and its log (in t.TempDir()) is printed when
// the test failed.
//
// Start uses only what the demo's Session implements of testing.TB (Helper, Logf, Errorf,
// Fatalf, Skip, TempDir, Cleanup, Failed), so the demo launcher can start it too.
//
// Start skips under -short. When the simulator cannot be built here (no Go, no module proxy)
// the test skips, or fails under REQUIRE_INTEGRATION=1 (testenv.Unavailable).
package vcsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/toolbuild"
)

// Options configure a simulator.
type Options struct {
	// Port is the SDK's TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Username and Password are the one accepted pair; empty picks "phe-monitor" and a random
	// password.
	Username, Password string
	// Datacenters is how many datacenters the model has (DC0, DC1, ...); 0 means one.
	Datacenters int
	// ListenIP is the loopback address the SDK listens on; empty means 127.0.0.1. The
	// certificate is always for 127.0.0.1 and localhost: another address (127.0.0.2) gives a
	// certificate that does not match the URL's host.
	ListenIP string
}

// Session is one live session of the simulator.
type Session struct {
	Key       string `json:"key"`
	UserName  string `json:"userName"`
	CallCount int64  `json:"callCount"`
}

// Sim is a running simulator process.
type Sim struct {
	tb   testing.TB
	dir  string
	bin  string
	opts Options

	caFile, otherCAFile, certFile, keyFile string
	usernameFile, passwordFile             string
	logPath, statePath                     string

	mu     sync.Mutex
	daemon *testenv.Daemon
	url    *url.URL
	admin  string
	paused bool
}

const pkg = "./test/testenv/vcsim/cmd/vcsim"

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// EnsureBinary returns the path of the simulator's command, building it first when the cache
// under bin/vcsim-<hash>-<govmomi version>/ is missing or stale (about a minute on two cores,
// once; toolbuild.Ensure, which in a test binary builds only when toolbuild.MayBuild). An error
// wrapping toolbuild.ErrNoGo or toolbuild.ErrNoModuleProxy means this machine cannot build it.
func EnsureBinary(ctx context.Context, logf func(format string, args ...any)) (string, error) {
	root, err := toolbuild.RepoRoot(".")
	if err != nil {
		return "", err
	}
	hash, err := sourceHash(filepath.Join(root, pkg))
	if err != nil {
		return "", err
	}
	spec := toolbuild.Spec{
		// The main is part of this module: its source names the cache as well as go.mod.
		Name:          "vcsim-" + hash,
		ToolsDir:      ".",
		VersionModule: "github.com/vmware/govmomi",
		Targets:       []toolbuild.Target{{Pkg: pkg, File: "vcsim"}},
		BuildHint:     "make test-env",
	}
	paths, err := toolbuild.Ensure(ctx, spec, logf)
	if err != nil {
		return "", err
	}
	return paths[0], nil
}

// binary builds the command once per test binary (toolbuild keeps it across test binaries).
func binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		ctx, cancel := toolbuild.BuildContext(tb)
		defer cancel()
		buildBin, buildErr = EnsureBinary(ctx, tb.Logf)
	})
	switch {
	case errors.Is(buildErr, toolbuild.ErrNotBuilt):
		testenv.Unavailable(tb, "%v", buildErr)
	case errors.Is(buildErr, toolbuild.ErrNoGo), errors.Is(buildErr, toolbuild.ErrNoModuleProxy):
		testenv.Unavailable(tb, "the vCenter simulator cannot be built here: %v (it needs Go and the Go module proxy once)", buildErr)
	case buildErr != nil:
		tb.Fatalf("vcsim: build the simulator: %v", buildErr)
	}
	return buildBin
}

// sourceHash is a short hash of the Go files of the directory dir.
func sourceHash(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("vcsim: no source in %s: %v", dir, err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write([]byte(filepath.Base(f) + "\x00"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// Start builds (once) and starts a simulator, stopped at tb's cleanup.
func Start(tb testing.TB, opts Options) *Sim {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts the vCenter simulator")
	bin := binary(tb)
	if opts.Username == "" {
		opts.Username = "phe-monitor"
	}
	if opts.Password == "" {
		opts.Password = "vcsim-" + randomHex(12)
	}
	if opts.Datacenters <= 0 {
		opts.Datacenters = 1
	}
	if opts.ListenIP == "" {
		opts.ListenIP = "127.0.0.1"
	}
	dir := tb.TempDir()
	s := &Sim{tb: tb, dir: dir, bin: bin, opts: opts,
		caFile: filepath.Join(dir, "ca.pem"), otherCAFile: filepath.Join(dir, "other-ca.pem"),
		certFile: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server-key.pem"),
		usernameFile: filepath.Join(dir, "username"), passwordFile: filepath.Join(dir, "password"),
		logPath: filepath.Join(dir, "vcsim.log"), statePath: filepath.Join(dir, "state.json"),
	}
	if err := s.writePKI(); err != nil {
		tb.Fatalf("vcsim: %v", err)
	}
	for path, content := range map[string]string{s.usernameFile: opts.Username, s.passwordFile: opts.Password} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		s.Stop()
		if tb.Failed() {
			tb.Logf("vcsim log (%s), last lines:\n%s", s.logPath, testenv.LogTail(s.logPath, 40))
		}
	})
	s.start(opts.Port)
	return s
}

func (s *Sim) start(port int) {
	s.tb.Helper()
	_ = os.Remove(s.statePath)
	cmd := exec.Command(s.bin, "-listen", net.JoinHostPort(s.opts.ListenIP, strconv.Itoa(port)),
		"-cert", s.certFile, "-key", s.keyFile, "-username", s.opts.Username, "-password-file", s.passwordFile,
		"-datacenters", strconv.Itoa(s.opts.Datacenters), "-state", s.statePath)
	// The model's datastores are temporary directories: keep them in the test's.
	cmd.Env = testenv.ChildEnv(s.dir)
	d, err := testenv.StartCommand("vcsim", cmd, s.logPath)
	if err != nil {
		s.tb.Fatalf("vcsim: %v", err)
	}
	s.mu.Lock()
	s.daemon, s.paused = d, false
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(s.statePath)
		if err == nil {
			var st struct{ URL, Admin string }
			if err := json.Unmarshal(b, &st); err != nil {
				s.tb.Fatalf("vcsim: state file: %v", err)
			}
			u, err := url.Parse(st.URL)
			if err != nil {
				s.tb.Fatalf("vcsim: state file: %v", err)
			}
			u.User = nil
			s.mu.Lock()
			s.url, s.admin = u, st.Admin
			s.mu.Unlock()
			return
		}
		if d.Exited() {
			s.tb.Fatalf("vcsim exited before serving: %v\n%s", d.WaitErr(), testenv.LogTail(s.logPath, 40))
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("vcsim not serving after 60s:\n%s", testenv.LogTail(s.logPath, 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is the SDK URL, https://127.0.0.1:PORT/sdk.
func (s *Sim) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url.String()
}

// Host is 127.0.0.1:PORT.
func (s *Sim) Host() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url.Host
}

// Port is the SDK's port.
func (s *Sim) Port() int {
	p, _ := strconv.Atoi(s.url.Port())
	return p
}

// CAFile is the PEM CA that signs the simulator's certificate.
func (s *Sim) CAFile() string { return s.caFile }

// OtherCAFile is a PEM CA that signs nothing the simulator serves.
func (s *Sim) OtherCAFile() string { return s.otherCAFile }

// Username is the accepted username.
func (s *Sim) Username() string { return s.opts.Username }

// Password is the accepted password.
func (s *Sim) Password() string { return s.opts.Password }

// UsernameFile holds Username.
func (s *Sim) UsernameFile() string { return s.usernameFile }

// PasswordFile holds Password. Rewriting it does not change what the running simulator accepts.
func (s *Sim) PasswordFile() string { return s.passwordFile }

// LogPath is the process's log file.
func (s *Sim) LogPath() string { return s.logPath }

// LogTail is the log's last lines.
func (s *Sim) LogTail(lines int) string { return testenv.LogTail(s.logPath, lines) }

// Stop kills the process (and waits until it is reaped): calls get "connection refused".
func (s *Sim) Stop() {
	s.mu.Lock()
	d := s.daemon
	s.daemon = nil
	s.mu.Unlock()
	if d != nil {
		_ = d.Signal(syscall.SIGCONT)
		if err := d.Kill(30 * time.Second); err != nil {
			s.tb.Errorf("vcsim: %v", err)
		}
	}
}

// Restart stops the process and starts a new one on the same port with the same certificate
// and credentials; the sessions of the old one are gone.
func (s *Sim) Restart() {
	s.tb.Helper()
	port := s.Port()
	s.Stop()
	s.start(port)
}

// Pause stops the process (SIGSTOP): the kernel still accepts TCP connections, nothing answers.
// It returns once every thread of the process is stopped.
func (s *Sim) Pause() {
	s.tb.Helper()
	s.signal(syscall.SIGSTOP, true)
	s.mu.Lock()
	pid := s.daemon.PID()
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			s.tb.Fatalf("vcsim: not stopped 10s after SIGSTOP")
		}
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether every thread of pid is in state T (stopped), from /proc.
func allStopped(pid int) bool {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces and parentheses; the state follows the last ")".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Resume continues a paused process (SIGCONT).
func (s *Sim) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Sim) signal(sig syscall.Signal, paused bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.daemon == nil {
		s.tb.Fatalf("vcsim: not running")
	}
	if err := s.daemon.Signal(sig); err != nil {
		s.tb.Fatalf("vcsim: %v", err)
	}
	s.paused = paused
}

// Sessions lists the live sessions.
func (s *Sim) Sessions() []Session {
	s.tb.Helper()
	var list []Session
	s.adminCall(http.MethodGet, "/sessions", &list)
	return list
}

// SessionsOf lists the live sessions of user.
func (s *Sim) SessionsOf(user string) []Session {
	s.tb.Helper()
	var out []Session
	for _, x := range s.Sessions() {
		if x.UserName == user {
			out = append(out, x)
		}
	}
	return out
}

// DropSessions terminates every live session server-side and returns how many there were.
func (s *Sim) DropSessions() int {
	s.tb.Helper()
	var n int
	s.adminCall(http.MethodPost, "/sessions/terminate", &n)
	return n
}

// The faults InjectFault can make a method answer.
const (
	SystemError      = "SystemError"
	NotAuthenticated = "NotAuthenticated" // as a fault, as real vCenter answers a dead session
	NoPermission     = "NoPermission"
)

// InjectFault makes the next count calls of method (e.g. "RetrievePropertiesEx"; 0: every
// later call, until ClearFaults) answer fault (SystemError, NotAuthenticated or NoPermission),
// through the simulator's own fault injector.
func (s *Sim) InjectFault(method, fault string, count int) {
	s.tb.Helper()
	s.adminCall(http.MethodPost, "/fault?"+url.Values{"method": {method}, "fault": {fault}, "count": {strconv.Itoa(count)}}.Encode(), nil)
}

// ClearFaults removes every injected fault.
func (s *Sim) ClearFaults() {
	s.tb.Helper()
	s.adminCall(http.MethodDelete, "/fault", nil)
}

// The host tasks HostTask runs.
const (
	Disconnect       = "disconnect"       // DisconnectHost_Task
	Reconnect        = "reconnect"        // ReconnectHost_Task
	EnterMaintenance = "enterMaintenance" // EnterMaintenanceMode_Task
	ExitMaintenance  = "exitMaintenance"  // ExitMaintenanceMode_Task
)

// HostTask runs action (Disconnect, Reconnect, EnterMaintenance, ExitMaintenance) on the
// ESXi host named host (DC0_C0_H0) and waits for the task, through the simulator's internal
// session: no session of the test's user counts a call.
func (s *Sim) HostTask(host, action string) {
	s.tb.Helper()
	s.adminCall(http.MethodPost, "/host?"+url.Values{"name": {host}, "action": {action}}.Encode(), nil)
}

func (s *Sim) adminCall(method, path string, out any) {
	s.tb.Helper()
	s.mu.Lock()
	admin, paused := s.admin, s.paused
	s.mu.Unlock()
	if paused {
		s.tb.Fatalf("vcsim: paused; Resume it before asking it")
	}
	req, err := http.NewRequest(method, "http://"+admin+path, nil)
	if err != nil {
		s.tb.Fatal(err)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		s.tb.Fatalf("vcsim admin %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.tb.Fatalf("vcsim admin %s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			s.tb.Fatalf("vcsim admin %s %s: %v", method, path, err)
		}
	}
}

// writePKI writes the CA, the server certificate and key, and the unrelated CA.
func (s *Sim) writePKI() error {
	caCert, caKey, caPEM, err := newCA("vcsim test CA")
	if err != nil {
		return err
	}
	_, _, otherPEM, err := newCA("vcsim unrelated CA")
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "vcsim"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		s.caFile:      caPEM,
		s.otherCAFile: otherPEM,
		s.certFile:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		s.keyFile:     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create CA %q: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
