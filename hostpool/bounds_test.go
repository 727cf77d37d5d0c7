package hostpool

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// silentListener accepts TCP connections and never says a word, as a host whose sshd hangs.
func silentListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// TestStageBoundMarksTheHostUnresponsive: a handshake that gets no answer ends at the stage's
// own bound, long before the caller's deadline; it is that stage's failure (counted by the
// metric), and the host reads HostUnresponsive, so that a caller with many hosts takes it last.
// It is not backed off: the next Acquire dials again (a host that came back must be seen at
// once) and fails the same way.
func TestStageBoundMarksTheHostUnresponsive(t *testing.T) {
	dir := t.TempDir()
	keyPath, _ := clientKey(t, dir, "")
	addr, accepted := silentListener(t)
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile: writeKnownHosts(t, dir, addr, newSigner(t, "ed25519").PublicKey()),
		SSHTimeout:     200 * time.Millisecond, KeepaliveInterval: time.Hour})
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i <= 2; i++ {
		start := time.Now()
		_, _, err := p.Acquire(ctx, addr)
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("dial %d ended after %s: the stage bound did not end it", i, took)
		}
		de := stageOf(t, err)
		if de.Stage != StageSSHHandshake || !de.BoundExpired() || de.Aborted || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial %d: got %v (aborted %v), want the ssh handshake's own bound expired", i, err, de.Aborted)
		}
		if n := accepted.Load(); n != int64(i) {
			t.Errorf("after dial %d: %d TCP connections accepted, want %d: every Acquire dials", i, n, i)
		}
		if n := p.Stats().Dials["ssh_handshake"]; n != uint64(i) {
			t.Errorf("after dial %d: ssh_handshake dials counted: %d, want %d", i, n, i)
		}
		if st := p.State(addr); st != HostUnresponsive {
			t.Errorf("state after dial %d: %v, want HostUnresponsive", i, st)
		}
		if n := p.Stats().Unresponsive; n != 1 {
			t.Errorf("after dial %d: %d unresponsive hosts counted, want 1", i, n)
		}
	}
	p.Forget(addr)
	if n := p.Stats().Unresponsive; n != 0 {
		t.Errorf("after Forget: %d unresponsive hosts counted, want 0", n)
	}
}

// TestRoundDeadlineIsNotTheHostsFault: a dial cut by the caller's deadline before the stage's
// own bound is Aborted: not counted as the stage's failure, and the host is not marked
// unresponsive.
func TestRoundDeadlineIsNotTheHostsFault(t *testing.T) {
	dir := t.TempDir()
	keyPath, _ := clientKey(t, dir, "")
	addr, accepted := silentListener(t)
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile: writeKnownHosts(t, dir, addr, newSigner(t, "ed25519").PublicKey()),
		SSHTimeout:     time.Minute, KeepaliveInterval: time.Hour})
	defer p.Close()
	for range 2 {
		// Long enough for the TCP connect on a loaded machine: the deadline cuts the handshake.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _, err := p.Acquire(ctx, addr)
		cancel()
		if de := stageOf(t, err); !de.Aborted || de.BoundExpired() || de.Stage != StageSSHHandshake {
			t.Fatalf("got %v, want a dial cut short during the ssh handshake", err)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if st := p.State(addr); st != HostIdle {
		t.Errorf("state after dials cut by the caller: %v, want HostIdle (the host is not to blame)", st)
	}
	for result, n := range p.Stats().Dials {
		if n != 0 {
			t.Errorf("dials metric counted %d for %s, want nothing for dials cut short", n, result)
		}
	}
}

// TestCredentialsReadOncePerChange: known_hosts and the key are read once, not at every dial,
// and again as soon as their file changes.
func TestCredentialsReadOncePerChange(t *testing.T) {
	dir := t.TempDir()
	keyPath, pub := clientKey(t, dir, "")
	srv := startServer(t, pub)
	kh := writeKnownHosts(t, dir, srv.Addr, srv.HostKeys[0].PublicKey())
	p := New(Options{User: "root", PrivateKeyFile: keyPath, KnownHostsFile: kh, KeepaliveInterval: time.Hour})
	defer p.Close()
	// The in-process server has no libvirt: each Acquire fails at the socket stage after a
	// complete handshake. The link is dropped after each, so that every Acquire dials anew.
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.Acquire(ctx, srv.Addr)
		cancel()
		p.mu.Lock()
		h := p.hosts[srv.Addr]
		p.mu.Unlock()
		h.slot <- struct{}{}
		if h.link != nil {
			h.link.conn.Close()
			h.link = nil
		}
		<-h.slot
	}
	if h := p.Stats().Handshakes; h != 3 {
		t.Fatalf("%d handshakes, want 3", h)
	}
	p.creds.mu.Lock()
	keyLoads, khLoads := p.creds.keyLoads, p.creds.khLoads
	p.creds.mu.Unlock()
	if keyLoads != 1 || khLoads != 1 {
		t.Errorf("after 3 handshakes: key read %d times, known_hosts %d times; want once each", keyLoads, khLoads)
	}

	// A changed known_hosts (same content, new file) and a rotated key are read again.
	data, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kh+".new", append(data, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kh+".new", kh); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	p.Acquire(ctx, srv.Addr)
	cancel()
	p.creds.mu.Lock()
	khLoads = p.creds.khLoads
	p.creds.mu.Unlock()
	if khLoads != 2 {
		t.Errorf("known_hosts read %d times after it changed, want 2", khLoads)
	}
}

// dataThenError is a conn whose first read returns data together with an error.
type dataThenError struct {
	net.Conn
	once sync.Once
}

func (c *dataThenError) Read(b []byte) (int, error) {
	n := 0
	c.once.Do(func() { n = copy(b, packet(28)) })
	return n, errors.New("connection reset")
}

// TestReadErrorWithDataClosesDone: a read that returns data with an error delivers the data,
// then the error at the next read, and the connection's Done closes with that error.
func TestReadErrorWithDataClosesDone(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := newWatchedConn(&dataThenError{Conn: a})
	c.handshakeDone()
	buf := make([]byte, 64)
	if n, err := c.Read(buf); n != 28 || err != nil {
		t.Fatalf("first read: %d, %v; want the data without the error", n, err)
	}
	if _, err := c.Read(buf); err == nil {
		t.Fatal("second read: no error, want the held one")
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Done never closed after the read error was returned")
	}
}

// TestProbeRacesClose, on the scale stand-in (in-process SSH + libvirt RPC servers): probes
// that reach their RPCs keep starting while the pool closes. Each either runs and is waited for
// by Close, or gets ErrClosed: once Close has returned, no probe's function is still running
// (Close's wait for probes never misses one counted late), and the race detector checks the
// count against that wait.
func TestProbeRacesClose(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 8})
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath, KnownHostsFile: f.KnownHostsPath,
		Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour, DisconnectTimeout: 5 * time.Second})
	var running, calls atomic.Int64
	probe := func(l *libvirt.Libvirt) error {
		running.Add(1)
		defer running.Add(-1)
		calls.Add(1)
		_, err := l.ConnectGetLibVersion()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Warm links, so that the probes below reach their RPCs at once.
	for _, h := range f.Hosts {
		if err := p.Probe(ctx, h.Addr, probe); err != nil {
			t.Fatalf("warm-up probe of %s: %v", h.Addr, err)
		}
	}
	var wg sync.WaitGroup
	for _, h := range f.Hosts {
		wg.Go(func() {
			// Probe the host again and again until the pool says it is closed.
			for ctx.Err() == nil {
				if err := p.Probe(ctx, h.Addr, probe); errors.Is(err, ErrClosed) {
					return
				}
			}
		})
	}
	warm := calls.Load()
	testutil.Eventually(t, 10*time.Second, "the probes to run", func() bool { return calls.Load() >= warm+64 })
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if n := running.Load(); n != 0 {
		t.Errorf("%d probe functions still running after Close returned, want 0", n)
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the probes never got ErrClosed after Close")
	}
	if n := running.Load(); n != 0 {
		t.Errorf("%d probe functions running after every prober saw ErrClosed, want 0", n)
	}
}

// TestProbeAcquiredThenClosed, on the scale stand-in: a probe that acquired its connection
// just before Close started, and counts itself only after Close has returned, gets ErrClosed
// and never runs its function on the closed pool (a count Close's wait could not see).
func TestProbeAcquiredThenClosed(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 1})
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath, KnownHostsFile: f.KnownHostsPath,
		Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour})
	testHookAcquired = func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	t.Cleanup(func() { testHookAcquired = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ran := false
	err := p.Probe(ctx, f.Hosts[0].Addr, func(*libvirt.Libvirt) error { ran = true; return nil })
	if !errors.Is(err, ErrClosed) || ran {
		t.Errorf("probe acquired before Close and counted after it: %v (function ran: %v), want ErrClosed without running", err, ran)
	}
}

// TestProbeBusyTellsRunningFromAbandoned, on the scale stand-in (an in-process SSH + libvirt RPC
// server): while another caller's probe of the host is merely running, a probe fails at once
// with ErrProbeRunning; once that probe was abandoned at its deadline and has not returned, with
// ErrProbeBusy (the one that suggests a hung libvirtd).
func TestProbeBusyTellsRunningFromAbandoned(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 1})
	h := f.Hosts[0]
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath, KnownHostsFile: f.KnownHostsPath,
		Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	hold := make(chan struct{})
	started := make(chan struct{})
	firstCtx, abandon := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		first <- p.Probe(firstCtx, h.Addr, func(l *libvirt.Libvirt) error {
			close(started)
			<-hold
			_, err := l.ConnectGetLibVersion()
			return err
		})
	}()
	<-started
	if err := p.Probe(ctx, h.Addr, func(*libvirt.Libvirt) error { return nil }); !errors.Is(err, ErrProbeRunning) || errors.Is(err, ErrProbeBusy) {
		t.Errorf("while another probe runs: %v, want ErrProbeRunning", err)
	}
	abandon()
	if err := <-first; !errors.Is(err, ErrProbeAbandoned) {
		t.Fatalf("first probe: %v, want abandoned", err)
	}
	if err := p.Probe(ctx, h.Addr, func(*libvirt.Libvirt) error { return nil }); !errors.Is(err, ErrProbeBusy) {
		t.Errorf("while an abandoned probe has not returned: %v, want ErrProbeBusy", err)
	}
	close(hold)
	testutil.Eventually(t, 10*time.Second, "the abandoned probe to return", func() bool { return p.Stats().AbandonedProbes == 0 })
	if err := p.Probe(ctx, h.Addr, func(l *libvirt.Libvirt) error { _, err := l.ConnectGetHostname(); return err }); err != nil {
		t.Errorf("after the abandoned probe returned: %v", err)
	}
}

// TestPassphraseRotation, on the scale stand-in: the key and its passphrase file are read again
// when either changes, at the next dial. A passphrase file that no longer matches the key makes
// the next dial a key material failure; the key re-encrypted to match makes it log in again.
func TestPassphraseRotation(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 1})
	h := f.Hosts[0]
	raw, err := os.ReadFile(f.ClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.ParseRawPrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyPath, passPath := filepath.Join(dir, "id"), filepath.Join(dir, "passphrase")
	writeKey := func(pass string) {
		t.Helper()
		block, err := ssh.MarshalPrivateKeyWithPassphrase(key, "rotated", []byte(pass))
		if err != nil {
			t.Fatal(err)
		}
		// Written beside and renamed over, as a Secret update swaps its files.
		if err := os.WriteFile(keyPath+".tmp", pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(keyPath+".tmp", keyPath); err != nil {
			t.Fatal(err)
		}
	}
	writePass := func(pass string) {
		t.Helper()
		if err := os.WriteFile(passPath+".tmp", []byte(pass+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(passPath+".tmp", passPath); err != nil {
			t.Fatal(err)
		}
	}
	writeKey("first")
	writePass("first")
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: keyPath, PassphraseFile: passPath,
		KnownHostsFile: f.KnownHostsPath, Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour})
	defer p.Close()
	acquire := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, release, err := p.Acquire(ctx, h.Addr)
		if err == nil {
			release()
		}
		return err
	}
	cut := func() {
		h.CloseConnections()
		testutil.Eventually(t, 10*time.Second, "the link to close", func() bool { return p.Stats().Links == 0 })
	}
	if err := acquire(); err != nil {
		t.Fatalf("first dial: %v", err)
	}

	writePass("second") // the key is still encrypted with "first"
	cut()
	err = acquire()
	if de := stageOf(t, err); de.Stage != StageKeyMaterial {
		t.Fatalf("with a passphrase that no longer matches: %v, want a key material failure", err)
	}
	writeKey("second")
	if err := acquire(); err != nil {
		t.Fatalf("with key and passphrase rotated together: %v", err)
	}
	if n := h.Authentications(); n != 2 {
		t.Errorf("%d logins, want 2 (before and after the rotation)", n)
	}
}

// TestAuthenticationHasItsOwnBound, on the scale stand-in: the SSH handshake and the
// authentication each get SSHTimeout. A host slow at both, each within the bound but together
// beyond it, is dialled (it used to read SSHAuthFailed, blamed for the handshake's time); a host
// whose authentication alone outlasts the bound fails at the authentication stage, its own
// bound expired.
func TestAuthenticationHasItsOwnBound(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 2})
	slowBoth, slowAuth := f.Hosts[0], f.Hosts[1]
	const bound = 2 * time.Second
	slowBoth.SetSSHDelay(1400 * time.Millisecond)
	slowBoth.SetAuthDelay(1400 * time.Millisecond)
	slowAuth.SetAuthDelay(bound + time.Second)
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath, KnownHostsFile: f.KnownHostsPath,
		Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour, SSHTimeout: bound})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, release, err := p.Acquire(ctx, slowBoth.Addr)
	if err != nil {
		t.Fatalf("host slow at the handshake and at authentication, each within %v: %v, want a connection", bound, err)
	}
	release()
	if n := slowBoth.Authentications(); n != 1 {
		t.Errorf("%d logins on the slow host, want 1", n)
	}

	_, _, err = p.Acquire(ctx, slowAuth.Addr)
	if de := stageOf(t, err); de.Stage != StageSSHAuth || !de.BoundExpired() {
		t.Errorf("host whose authentication outlasts its bound: %v (aborted %v), want the ssh_auth stage's bound expired", err, de.Aborted)
	}
}

// TestHostKeyProbeOncePerHost, on the scale stand-in: the host key callback is shown the probe
// key (to learn which key types known_hosts holds for the host) once per host, not at every
// dial; each dial still verifies the key the host presents.
func TestHostKeyProbeOncePerHost(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 1})
	h := f.Hosts[0]
	kh, err := knownhosts.New(f.KnownHostsPath)
	if err != nil {
		t.Fatal(err)
	}
	var probes, verified atomic.Int64
	cb := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if bytes.Equal(key.Marshal(), probeKey().Marshal()) {
			probes.Add(1)
		} else {
			verified.Add(1)
		}
		return kh(hostname, remote, key)
	}
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath, HostKeyCallback: cb,
		Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour})
	defer p.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, release, err := p.Acquire(ctx, h.Addr)
		cancel()
		if err != nil {
			t.Fatalf("dial %d: %v", i+1, err)
		}
		release()
		h.CloseConnections()
		testutil.Eventually(t, 10*time.Second, "the link to close", func() bool { return p.Stats().Links == 0 })
	}
	if n := h.Authentications(); n != 3 {
		t.Fatalf("%d logins, want 3 dials", n)
	}
	if probes.Load() != 1 || verified.Load() != 3 {
		t.Errorf("over 3 dials: the callback saw the probe key %d times and the host's key %d times; want 1 and 3",
			probes.Load(), verified.Load())
	}
}

// TestForgetClosesOnlyThatHost, on the scale stand-in: Forget closes the forgotten host's link
// and drops what the pool cached for it; the other hosts keep their links (no new login), and
// the forgotten host is dialled anew when it is used again.
func TestForgetClosesOnlyThatHost(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 2})
	gone, kept := f.Hosts[0], f.Hosts[1]
	p := New(Options{User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath, KnownHostsFile: f.KnownHostsPath,
		Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour})
	defer p.Close()
	acquire := func(addr string) uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, release, err := p.Acquire(ctx, addr)
		if err != nil {
			t.Fatalf("acquire %s: %v", addr, err)
		}
		release()
		return c.LinkID()
	}
	acquire(gone.Addr)
	keptLink := acquire(kept.Addr)

	p.Forget(gone.Addr)
	testutil.Eventually(t, 10*time.Second, "the forgotten host's link to close", func() bool { return p.Stats().Links == 1 })
	p.creds.mu.Lock()
	_, cached := p.creds.algos[gone.Addr]
	p.creds.mu.Unlock()
	if cached {
		t.Error("the forgotten host's host key algorithms are still cached")
	}
	if id := acquire(kept.Addr); id != keptLink || kept.Authentications() != 1 {
		t.Errorf("the other host: link %d (was %d), %d logins; want its link kept, 1 login", id, keptLink, kept.Authentications())
	}
	acquire(gone.Addr)
	if n := gone.Authentications(); n != 2 {
		t.Errorf("the forgotten host used again: %d logins, want 2 (dialled anew)", n)
	}
}
