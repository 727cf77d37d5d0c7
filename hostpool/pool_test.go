package hostpool

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// acquireErr dials addr with a fresh pool and returns the dial error (the in-process server has
// no libvirt, so every dial fails at some stage).
func acquireErr(t *testing.T, opts Options, addr string, timeout time.Duration) (*Pool, error) {
	t.Helper()
	p := New(opts)
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, release, err := p.Acquire(ctx, addr)
	if err == nil {
		release()
		t.Fatalf("acquire %s: got a connection %v from a server without libvirt", addr, c.Addr())
	}
	return p, err
}

func stageOf(t *testing.T, err error) *DialError {
	t.Helper()
	var de *DialError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DialError", err, err)
	}
	return de
}

// TestDialStages checks that every dial failure is tagged with the stage that failed and
// unwraps to its cause.
func TestDialStages(t *testing.T) {
	dir := t.TempDir()
	keyPath, pub := clientKey(t, dir, "")
	srv := startServer(t, pub)
	okKnownHosts := writeKnownHosts(t, t.TempDir(), srv.Addr, srv.HostKeys[0].PublicKey()) // ed25519 only
	base := Options{User: "root", PrivateKeyFile: keyPath, KnownHostsFile: okKnownHosts, KeepaliveInterval: time.Hour}

	t.Run("key file missing", func(t *testing.T) {
		o := base
		o.PrivateKeyFile = filepath.Join(dir, "absent")
		before := srv.accepted.Load()
		_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
		de := stageOf(t, err)
		if de.Stage != StageKeyMaterial || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("got %v, want key material stage wrapping ErrNotExist", err)
		}
		if n := srv.accepted.Load() - before; n != 0 {
			t.Errorf("a dial without usable key material opened %d TCP connections", n)
		}
	})
	t.Run("encrypted key without passphrase", func(t *testing.T) {
		encDir := t.TempDir()
		encPath, _ := clientKey(t, encDir, "secret")
		o := base
		o.PrivateKeyFile = encPath
		_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
		var missing *ssh.PassphraseMissingError
		if de := stageOf(t, err); de.Stage != StageKeyMaterial || !errors.As(err, &missing) {
			t.Errorf("got %v, want key material stage wrapping *ssh.PassphraseMissingError", err)
		}
	})
	t.Run("encrypted key with passphrase file", func(t *testing.T) {
		encDir := t.TempDir()
		encPath, encPub := clientKey(t, encDir, "secret")
		passPath := filepath.Join(encDir, "pass")
		if err := os.WriteFile(passPath, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s2 := startServer(t, encPub)
		o := base
		o.PrivateKeyFile, o.PassphraseFile = encPath, passPath
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), s2.Addr, s2.HostKeys[0].PublicKey())
		_, err := acquireErr(t, o, s2.Addr, 5*time.Second)
		// Past the key, the handshake and authentication: the server has no libvirt socket.
		if de := stageOf(t, err); de.Stage != StageLibvirtSocket {
			t.Errorf("got %v, want the libvirt socket stage", err)
		}
	})
	t.Run("tcp refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		o := base
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), addr, srv.HostKeys[0].PublicKey())
		_, err = acquireErr(t, o, addr, 5*time.Second)
		if de := stageOf(t, err); de.Stage != StageTCP || !errors.Is(err, syscall.ECONNREFUSED) || de.Timeout() {
			t.Errorf("got %v, want the tcp stage wrapping ECONNREFUSED", err)
		}
	})
	t.Run("not ssh", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
				c.Close()
			}
		}()
		o := base
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), ln.Addr().String(), srv.HostKeys[0].PublicKey())
		_, err = acquireErr(t, o, ln.Addr().String(), 5*time.Second)
		if de := stageOf(t, err); de.Stage != StageSSHHandshake || de.Timeout() {
			t.Errorf("got %v, want the ssh handshake stage", err)
		}
	})
	t.Run("handshake hangs", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		held := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held <- c // accepted, never answered
			}
		}()
		t.Cleanup(func() {
			for len(held) > 0 {
				(<-held).Close()
			}
		})
		o := base
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), ln.Addr().String(), srv.HostKeys[0].PublicKey())
		// The deadline leaves the TCP connect room to finish on a loaded machine: it cuts the
		// handshake.
		_, err = acquireErr(t, o, ln.Addr().String(), 2*time.Second)
		de := stageOf(t, err)
		if de.Stage != StageSSHHandshake || !de.Timeout() || !errors.Is(err, context.DeadlineExceeded) || !IsTimeout(err) {
			t.Errorf("got %v, want a timed-out ssh handshake stage", err)
		}
	})
	t.Run("host key unknown", func(t *testing.T) {
		o := base
		other, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		otherAddr := other.Addr().String()
		other.Close()
		// known_hosts lists another address only.
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), otherAddr, srv.HostKeys[0].PublicKey())
		_, err = acquireErr(t, o, srv.Addr, 5*time.Second)
		de := stageOf(t, err)
		var ke *knownhosts.KeyError
		if de.Stage != StageHostKey || !de.HostKeyUnknown() || de.HostKeyMismatch() || !errors.As(err, &ke) {
			t.Errorf("got %v, want host key unknown", err)
		}
	})
	t.Run("host key mismatch", func(t *testing.T) {
		o := base
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), srv.Addr, newSigner(t, "ed25519").PublicKey())
		_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
		de := stageOf(t, err)
		if de.Stage != StageHostKey || !de.HostKeyMismatch() || de.HostKeyUnknown() {
			t.Errorf("got %v, want host key mismatch", err)
		}
	})
	t.Run("known_hosts a FIFO, /dev/zero or unparsable", func(t *testing.T) {
		khDir := t.TempDir()
		fifo := filepath.Join(khDir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		zero := filepath.Join(khDir, "zero")
		if err := os.Symlink("/dev/zero", zero); err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(khDir, "bad")
		if err := os.WriteFile(bad, []byte("127.0.0.1 ssh-ed25519 not-base64!\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{
			fifo: fifo + " is a named pipe (FIFO), not a regular file",
			zero: zero + " is a character device, not a regular file",
			bad:  "knownhosts: " + bad + ": no valid entries",
		} {
			o := base
			o.KnownHostsFile = path
			before := srv.accepted.Load()
			_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
			if err == nil || !strings.Contains(err.Error(), "read known_hosts: "+want) || strings.Contains(err.Error(), "/proc/self/fd") {
				t.Errorf("known_hosts %s: %v; want it refused, saying %q", filepath.Base(path), err, want)
			}
			if n := srv.accepted.Load() - before; n != 0 {
				t.Errorf("known_hosts %s: a dial opened %d TCP connections", filepath.Base(path), n)
			}
		}
	})
	t.Run("known_hosts with the second key type only", func(t *testing.T) {
		// The server offers ed25519 and ECDSA; x/crypto prefers ECDSA. With only the ECDSA line
		// and only the ed25519 line, both must verify.
		for i, k := range srv.HostKeys {
			o := base
			o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), srv.Addr, k.PublicKey())
			_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
			if de := stageOf(t, err); de.Stage != StageLibvirtSocket {
				t.Errorf("host key %d (%s) only: got %v, want to get past the handshake", i, k.PublicKey().Type(), err)
			}
		}
	})
	t.Run("known_hosts unreadable", func(t *testing.T) {
		o := base
		o.KnownHostsFile = filepath.Join(dir, "no_known_hosts")
		_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
		if de := stageOf(t, err); de.Stage != StageKeyMaterial || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("got %v, want key material stage", err)
		}
	})
	t.Run("auth refused", func(t *testing.T) {
		o := base
		o.PrivateKeyFile, _ = clientKey(t, t.TempDir(), "")
		_, err := acquireErr(t, o, srv.Addr, 5*time.Second)
		if de := stageOf(t, err); de.Stage != StageSSHAuth || de.Timeout() {
			t.Errorf("got %v, want ssh auth stage", err)
		}
	})
	t.Run("libvirt socket refused", func(t *testing.T) {
		p, err := acquireErr(t, base, srv.Addr, 5*time.Second)
		var oce *ssh.OpenChannelError
		if de := stageOf(t, err); de.Stage != StageLibvirtSocket || !errors.As(err, &oce) {
			t.Errorf("got %v, want libvirt socket stage wrapping *ssh.OpenChannelError", err)
		}
		st := p.Stats()
		if st.Dials["libvirt_socket"] != 1 || st.Handshakes != 1 || st.Links != 1 {
			t.Errorf("stats %+v: want one libvirt_socket dial over one kept link", st)
		}
		// The SSH link stays: the next attempt needs no new handshake.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, _, err := p.Acquire(ctx, srv.Addr); err == nil {
			t.Fatal("second acquire succeeded")
		}
		if st := p.Stats(); st.Handshakes != 1 || st.Dials["libvirt_socket"] != 2 {
			t.Errorf("after a second attempt: %+v, want still one handshake and two socket failures", st)
		}
	})
	t.Run("libvirt connect fails", func(t *testing.T) {
		s2 := startServer(t, pub)
		s2.mode.Store(int32(closeChannel))
		o := base
		o.KnownHostsFile = writeKnownHosts(t, t.TempDir(), s2.Addr, s2.HostKeys[0].PublicKey())
		_, err := acquireErr(t, o, s2.Addr, 5*time.Second)
		if de := stageOf(t, err); de.Stage != StageLibvirtConnect {
			t.Errorf("got %v, want libvirt connect stage", err)
		}
	})
	t.Run("address without port", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(srv.Addr)
		o := base
		o.Port = atoi(t, port)
		_, err := acquireErr(t, o, host, 5*time.Second)
		if de := stageOf(t, err); de.Stage != StageLibvirtSocket || de.Addr != srv.Addr {
			t.Errorf("got %v (addr %q), want %s dialled with the default port", err, de.Addr, srv.Addr)
		}
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

// TestAcquireWaitEndsWithContext: while another caller holds a host's slot (dialing a host
// whose handshake hangs), Acquire returns when its own context ends, with a timeout error, and
// the holder is still waiting.
func TestAcquireWaitEndsWithContext(t *testing.T) {
	dir := t.TempDir()
	keyPath, _ := clientKey(t, dir, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // never answered: the dial holding the slot hangs in the handshake
		}
	}()
	addr := ln.Addr().String()
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile: writeKnownHosts(t, dir, addr, newSigner(t, "ed25519").PublicKey())})
	defer p.Close()

	holderCtx, cancelHolder := context.WithCancel(context.Background())
	defer cancelHolder()
	holderDone := make(chan error, 1)
	go func() {
		_, _, err := p.Acquire(holderCtx, addr)
		holderDone <- err
	}()
	var held net.Conn
	select {
	case held = <-accepted:
		defer held.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the first acquire never connected")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err = p.Acquire(ctx, addr)
	if !errors.Is(err, context.DeadlineExceeded) || !IsTimeout(err) {
		t.Fatalf("waiting acquire: got %v, want the context's deadline", err)
	}
	var de *DialError
	if errors.As(err, &de) {
		t.Fatalf("waiting acquire dialed (%v): it must only wait for the slot", err)
	}
	select {
	case err := <-holderDone:
		t.Fatalf("the holder returned (%v) before the waiter: the waiter did not wait for the slot", err)
	default:
	}
	// The holder's dial ends with its own context.
	cancelHolder()
	if de := stageOf(t, <-holderDone); !de.Aborted || de.Stage != StageSSHHandshake || de.BoundExpired() {
		t.Errorf("holder: got %v, want a dial cut short by its context during the ssh handshake", de)
	}
	// The holder's dial was cut by its caller, not failed by the host: the dials metric does
	// not count it, and the waiter made none.
	for result, n := range p.Stats().Dials {
		if n != 0 {
			t.Errorf("dials %v: %s counted %d, want no dial counted", p.Stats().Dials, result, n)
		}
	}
}

// TestKeepaliveClosesDeadLink: a link whose peer stops answering keepalives is closed, and the
// next acquire dials a new one.
func TestKeepaliveClosesDeadLink(t *testing.T) {
	dir := t.TempDir()
	keyPath, pub := clientKey(t, dir, "")
	srv := startServer(t, pub)
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile:    writeKnownHosts(t, dir, srv.Addr, srv.HostKeys[0].PublicKey()),
		KeepaliveInterval: 50 * time.Millisecond, KeepaliveTimeout: 2 * time.Second})
	defer p.Close()
	ctx := context.Background()
	// The server refuses the libvirt channel, but the SSH link is kept.
	if _, _, err := p.Acquire(ctx, srv.Addr); stageOf(t, err).Stage != StageLibvirtSocket {
		t.Fatalf("got %v", err)
	}
	// Answered keepalives keep the link open across several intervals.
	time.Sleep(300 * time.Millisecond)
	if st := p.Stats(); st.Links != 1 {
		t.Fatalf("a link whose keepalives are answered was closed: %+v", st)
	}
	srv.silentKeepalives.Store(true)
	testutil.Eventually(t, 10*time.Second, "the dead link to be closed", func() bool { return p.Stats().Links == 0 })
	srv.silentKeepalives.Store(false)
	if _, _, err := p.Acquire(ctx, srv.Addr); stageOf(t, err).Stage != StageLibvirtSocket {
		t.Fatalf("got %v", err)
	}
	if st := p.Stats(); st.Handshakes != 2 || st.Links != 1 {
		t.Errorf("after the redial: %+v, want a second handshake and one link", st)
	}
}

// settleGoroutines waits until the number of goroutines is at most want and fails otherwise,
// with the stacks.
func settleGoroutines(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines after close, want at most %d:\n%s", n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCloseLeavesNothing: Close ends every link and goroutine of the pool, even with links open
// and in-flight dials, and later calls fail with ErrClosed.
func TestCloseLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	keyPath, pub := clientKey(t, dir, "")
	srv := startServer(t, pub)
	srv2 := startServer(t, pub)
	kh := filepath.Join(dir, "known_hosts")
	var lines []string
	for _, s := range []*sshServer{srv, srv2} {
		lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKeys[0].PublicKey()))
	}
	if err := os.WriteFile(kh, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	p := New(Options{Name: "leak-test", User: "root", PrivateKeyFile: keyPath, KnownHostsFile: kh,
		KeepaliveInterval: 20 * time.Millisecond})
	for _, s := range []*sshServer{srv, srv2} {
		if _, _, err := p.Acquire(context.Background(), s.Addr); stageOf(t, err).Stage != StageLibvirtSocket {
			t.Fatalf("got %v", err)
		}
	}
	if st := p.Stats(); st.Links != 2 {
		t.Fatalf("stats %+v, want 2 links", st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Links != 0 {
		t.Errorf("after close: %+v", st)
	}
	if _, _, err := p.Acquire(context.Background(), srv.Addr); !errors.Is(err, ErrClosed) {
		t.Errorf("acquire after close: %v, want ErrClosed", err)
	}
	if err := p.Probe(context.Background(), srv.Addr, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("probe after close: %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	settleGoroutines(t, before)
}

// TestMetrics: pools of several providers register into one registry without collision, a
// rebuilt pool of the same provider (a reload) neither panics nor resets the counters while
// the old one is open, and a provider's series go with its last pool.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	keyPath, pub := clientKey(t, dir, "")
	srv := startServer(t, pub)
	kh := writeKnownHosts(t, dir, srv.Addr, srv.HostKeys[0].PublicKey())
	reg := prometheus.NewPedanticRegistry()
	opts := func(name string) Options {
		return Options{Name: name, User: "root", PrivateKeyFile: keyPath, KnownHostsFile: kh, Registerer: reg,
			KeepaliveInterval: time.Hour}
	}
	a, b := New(opts("metrics-a")), New(opts("metrics-b"))
	for _, p := range []*Pool{a, b} {
		if _, _, err := p.Acquire(context.Background(), srv.Addr); err == nil {
			t.Fatal("acquire succeeded")
		}
	}
	if _, _, err := b.Acquire(context.Background(), "127.0.0.1:1"); err == nil {
		t.Fatal("acquire succeeded")
	}
	got := testutil.Series(t, reg, "provider", "metrics-b")
	want := map[string]float64{
		"proxy_operator_kvm_pool_connections":                  1,
		"proxy_operator_kvm_pool_abandoned_probes":             0,
		"proxy_operator_kvm_pool_unresponsive_hosts":           0,
		"proxy_operator_kvm_pool_dials_total{libvirt_socket}":  1,
		"proxy_operator_kvm_pool_dials_total{tcp}":             1,
		"proxy_operator_kvm_pool_dials_total{ok}":              0,
		"proxy_operator_kvm_pool_dials_total{key_material}":    0,
		"proxy_operator_kvm_pool_dials_total{ssh_handshake}":   0,
		"proxy_operator_kvm_pool_dials_total{host_key}":        0,
		"proxy_operator_kvm_pool_dials_total{ssh_auth}":        0,
		"proxy_operator_kvm_pool_dials_total{libvirt_connect}": 0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series of metrics-b: %v, want %v", got, want)
	}

	// A reload rebuilds metrics-b: the new pool registers again while the old one is open.
	b2 := New(opts("metrics-b"))
	if _, _, err := b2.Acquire(context.Background(), "127.0.0.1:1"); err == nil {
		t.Fatal("acquire succeeded")
	}
	b.Close()
	got = testutil.Series(t, reg, "provider", "metrics-b")
	if got["proxy_operator_kvm_pool_dials_total{tcp}"] != 2 || got["proxy_operator_kvm_pool_connections"] != 0 {
		t.Errorf("after the rebuild: %v, want 2 tcp failures counted and no connection", got)
	}
	b2.Close()
	if got := testutil.Series(t, reg, "provider", "metrics-b"); len(got) != 0 {
		t.Errorf("series of a provider without pools: %v", got)
	}
	if got := testutil.Series(t, reg, "provider", "metrics-a"); got["proxy_operator_kvm_pool_connections"] != 1 {
		t.Errorf("metrics-a: %v", got)
	}
	a.Close()
}

// TestNewWarns: switching host key verification off and an unusable key are logged at New,
// naming the pool; a pool with neither logs nothing.
func TestNewWarns(t *testing.T) {
	dir := t.TempDir()
	keyPath, _ := clientKey(t, dir, "")
	for _, tc := range []struct {
		opts Options
		want []string
	}{
		{Options{Name: "kvm-lab", PrivateKeyFile: keyPath, KnownHostsFile: "/kh"}, nil},
		{Options{Name: "kvm-lab", PrivateKeyFile: keyPath, InsecureSkipHostKeyVerification: true},
			[]string{"level=WARN", "host key verification is off", "hostpool=kvm-lab"}},
		{Options{Name: "kvm-lab", PrivateKeyFile: filepath.Join(dir, "absent"), KnownHostsFile: "/kh"},
			[]string{"level=WARN", "private key unusable", "hostpool=kvm-lab", "absent"}},
	} {
		var buf strings.Builder
		tc.opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		New(tc.opts).Close()
		got := buf.String()
		if tc.want == nil && got != "" {
			t.Errorf("%+v: logged %q", tc.opts, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("log %q lacks %q", got, w)
			}
		}
	}
}
