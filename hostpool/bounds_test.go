package hostpool

import (
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

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kvmstandin"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
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

// TestStageBoundAndBackoff: a handshake that gets no answer ends at the stage's own bound, long
// before the caller's deadline; it is that stage's failure (counted by the metric), and the host
// is then backed off: the next Acquire answers at once with the same failure, without a new TCP
// connection, until the backoff has passed.
func TestStageBoundAndBackoff(t *testing.T) {
	dir := t.TempDir()
	keyPath, _ := clientKey(t, dir, "")
	addr, accepted := silentListener(t)
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile: writeKnownHosts(t, dir, addr, newSigner(t, "ed25519").PublicKey()),
		SSHTimeout:     200 * time.Millisecond, RedialBackoff: time.Hour, KeepaliveInterval: time.Hour})
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, _, err := p.Acquire(ctx, addr)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the dial ended after %s: the stage bound did not end it", took)
	}
	de := stageOf(t, err)
	if de.Stage != StageSSHHandshake || !de.BoundExpired() || de.Aborted || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v (aborted %v), want the ssh handshake's own bound expired", err, de.Aborted)
	}
	if n := p.Stats().Dials["ssh_handshake"]; n != 1 {
		t.Errorf("ssh_handshake dials counted: %d, want 1", n)
	}
	if st := p.State(addr); st != HostBackingOff {
		t.Errorf("state after the failure: %v, want HostBackingOff", st)
	}

	_, _, err = p.Acquire(ctx, addr)
	var be *BackoffError
	if !errors.As(err, &be) || be.Last.Stage != StageSSHHandshake || time.Until(be.RetryAt) < 30*time.Minute {
		t.Fatalf("second acquire: %v, want a BackoffError carrying the handshake failure, retried in about an hour", err)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d TCP connections accepted, want 1: a backed-off host is not dialled", n)
	}
	if n := p.Stats().Dials["ssh_handshake"]; n != 1 {
		t.Errorf("ssh_handshake dials counted: %d, want still 1 (no dial was made)", n)
	}
}

// TestRoundDeadlineIsNotTheHostsFault: a dial cut by the caller's deadline before the stage's
// own bound is Aborted: not counted as the stage's failure, and the host is not backed off.
func TestRoundDeadlineIsNotTheHostsFault(t *testing.T) {
	dir := t.TempDir()
	keyPath, _ := clientKey(t, dir, "")
	addr, accepted := silentListener(t)
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile: writeKnownHosts(t, dir, addr, newSigner(t, "ed25519").PublicKey()),
		SSHTimeout:     time.Minute, RedialBackoff: time.Hour, KeepaliveInterval: time.Hour})
	defer p.Close()
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		_, _, err := p.Acquire(ctx, addr)
		cancel()
		if de := stageOf(t, err); !de.Aborted || de.BoundExpired() || de.Stage != StageSSHHandshake {
			t.Fatalf("got %v, want a dial cut short during the ssh handshake", err)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2: a dial cut by the caller does not back the host off", n)
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
			h.link.client.Close()
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

// TestProbeRacesClose: probes started while the pool closes either run or get ErrClosed; the
// race detector checks the probe count against Close's wait.
func TestProbeRacesClose(t *testing.T) {
	dir := t.TempDir()
	keyPath, pub := clientKey(t, dir, "")
	srv := startServer(t, pub)
	p := New(Options{User: "root", PrivateKeyFile: keyPath,
		KnownHostsFile: writeKnownHosts(t, dir, srv.Addr, srv.HostKeys[0].PublicKey()), KeepaliveInterval: time.Hour})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			p.Probe(ctx, srv.Addr, nil)
		})
	}
	p.Close()
	wg.Wait()
	if err := p.Probe(context.Background(), srv.Addr, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("probe after Close: %v, want ErrClosed", err)
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
