package hostpool

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// The tests in this file run against real hosts (sshd + libvirtd in network namespaces).

func fleetPool(t *testing.T, f *kvmhost.Fleet, name string) *Pool {
	t.Helper()
	p := New(Options{
		Name:              name,
		User:              f.User,
		PrivateKeyFile:    f.ClientKeyPath,
		KnownHostsFile:    f.KnownHostsPath,
		Socket:            f.Hosts[0].Socket,
		KeepaliveInterval: 200 * time.Millisecond,
		// A keepalive's answer may be slow on a loaded machine: the link must not be dropped.
		KeepaliveTimeout:  5 * time.Second,
		DisconnectTimeout: time.Second,
	})
	t.Cleanup(func() { p.Close() })
	return p
}

// hostCheck is the sequence of RPCs the KVM check makes.
func hostCheck(pool string) func(*libvirt.Libvirt) error {
	return func(l *libvirt.Libvirt) error {
		if _, err := l.ConnectGetLibVersion(); err != nil {
			return err
		}
		if _, err := l.ConnectGetHostname(); err != nil {
			return err
		}
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		_, _, _, _, err = l.StoragePoolGetInfo(p)
		return err
	}
}

func probe(p *Pool, addr string, timeout time.Duration, fn func(*libvirt.Libvirt) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Probe(ctx, addr, fn)
}

// gatedReader yields size bytes of data: the first chunk at once, the rest once gate closes.
type gatedReader struct {
	data    []byte
	off     int
	started chan struct{}
	gate    chan struct{}
}

func (r *gatedReader) Read(b []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if r.off > 0 {
		<-r.gate
	}
	n := copy(b[:min(len(b), 1<<20)], r.data[r.off:])
	r.off += n
	if r.off == n {
		close(r.started)
	}
	return n, nil
}

// TestSharedLinkSurvivesAbandonedProbe: a volume upload runs on the pooled connection; libvirtd
// hangs mid-upload; a probe on the same connection times out and is abandoned. The connection is
// not closed: once libvirtd runs again the upload completes intact, the abandoned probe returns,
// and the host is probed on the same SSH link.
func TestSharedLinkSurvivesAbandonedProbe(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := fleetPool(t, f, "t-shared-link")

	c, release, err := p.Acquire(context.Background(), h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	lv := c.Libvirt()
	sp, err := lv.StoragePoolLookupByName(h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	const size = 6 << 20
	vol, err := lv.StorageVolCreateXML(sp, fmt.Sprintf(
		"<volume><name>upload.img</name><capacity unit='bytes'>%d</capacity><target><format type='raw'/></target></volume>", size), 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	r := &gatedReader{data: data, started: make(chan struct{}), gate: make(chan struct{})}
	uploaded := make(chan error, 1)
	go func() { uploaded <- lv.StorageVolUpload(vol, r, 0, size, 0) }()
	select {
	case <-r.started:
	case err := <-uploaded:
		t.Fatalf("upload ended before it streamed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("upload did not start")
	}

	h.PauseLibvirtd()
	resumed := false
	defer func() {
		if !resumed {
			h.ResumeLibvirtd()
		}
	}()
	close(r.gate) // the rest of the data queues behind the frozen daemon

	err = probe(p, h.Addr, time.Second, hostCheck(h.Pool))
	if !errors.Is(err, ErrProbeAbandoned) || !errors.Is(err, context.DeadlineExceeded) || !IsTimeout(err) {
		t.Fatalf("probe on a frozen libvirtd: %v, want abandoned at the deadline", err)
	}
	if st := p.Stats(); st.AbandonedProbes != 1 {
		t.Errorf("stats %+v, want one abandoned probe", st)
	}
	select {
	case <-c.Done():
		t.Fatal("the shared connection was closed when the probe timed out")
	case err := <-uploaded:
		t.Fatalf("upload finished while libvirtd was frozen: %v", err)
	default:
	}
	if err := probe(p, h.Addr, time.Second, hostCheck(h.Pool)); !errors.Is(err, ErrProbeBusy) {
		t.Errorf("second probe while the first is outstanding: %v, want ErrProbeBusy", err)
	}

	h.ResumeLibvirtd()
	resumed = true
	select {
	case err := <-uploaded:
		if err != nil {
			t.Fatalf("upload after the abandoned probe: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("upload did not complete after libvirtd resumed")
	}
	got, err := os.ReadFile(filepath.Join(h.Dir, "pool", "upload.img"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("uploaded volume differs from the data sent (%d bytes, want %d)", len(got), len(data))
	}
	testutil.Eventually(t, 30*time.Second, "the abandoned probe to return", func() bool { return p.Stats().AbandonedProbes == 0 })
	if err := probe(p, h.Addr, 5*time.Second, hostCheck(h.Pool)); err != nil {
		t.Fatalf("probe after resume: %v", err)
	}
	c2, release2, err := p.Acquire(context.Background(), h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	release2()
	if c2 != c || c2.LinkID() != c.LinkID() {
		t.Error("the host was redialled: want the same connection throughout")
	}
	if st := p.Stats(); st.Handshakes != 1 || st.Dials["ok"] != 1 {
		t.Errorf("stats %+v, want one handshake and one dial", st)
	}
	if n := h.TCPConnections(); n != 1 {
		t.Errorf("host sees %d TCP connections, want 1", n)
	}
}

// TestCloseReleasesHosts: Close ends every connection, as the hosts see it, and every
// goroutine, even with one host's libvirtd frozen under an abandoned probe.
func TestCloseReleasesHosts(t *testing.T) {
	f := kvmhost.Start(t, 2)
	before := runtime.NumGoroutine()
	p := fleetPool(t, f, "t-close")
	for _, h := range f.Hosts {
		if err := probe(p, h.Addr, 5*time.Second, hostCheck(h.Pool)); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
	}
	// Acquiring again uses the pooled connection: no second TCP connection, no second dial.
	for _, h := range f.Hosts {
		_, release, err := p.Acquire(context.Background(), h.Addr)
		if err != nil {
			t.Fatal(err)
		}
		release()
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%s: %d TCP connections, want 1", h.Name, n)
		}
	}
	if st := p.Stats(); st.Dials["ok"] != 2 || st.Links != 2 || st.InUse != 0 {
		t.Errorf("stats %+v, want 2 dials, 2 links, none in use", st)
	}
	frozen := f.Hosts[1]
	frozen.PauseLibvirtd()
	defer frozen.ResumeLibvirtd()
	if err := probe(p, frozen.Addr, 500*time.Millisecond, hostCheck(frozen.Pool)); !IsTimeout(err) {
		t.Fatalf("probe on a frozen libvirtd: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, h := range f.Hosts {
		testutil.Eventually(t, 10*time.Second, h.Name+" to see no connection", func() bool { return h.TCPConnections() == 0 })
	}
	if st := p.Stats(); st.Links != 0 || st.AbandonedProbes != 0 {
		t.Errorf("after close: %+v", st)
	}
	settleGoroutines(t, before)
}

// TestAcquireWaitEndsWithContextOnARealHost: the host drops every packet, so the dial of a first
// caller hangs in the TCP connect while it holds the host's slot. A second caller waits for the
// slot only until its own context ends, well before the first gives up; once the host answers
// again the next acquire connects.
func TestAcquireWaitEndsWithContextOnARealHost(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := fleetPool(t, f, "acquire-real")
	h.MakeUnreachable()

	holderCtx, cancelHolder := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelHolder()
	holderDone := make(chan error, 1)
	go func() {
		_, release, err := p.Acquire(holderCtx, h.Addr)
		if err == nil {
			release()
		}
		holderDone <- err
	}()
	// Give the holder time to take the slot: its dial to a host that drops packets does not
	// end by itself, so it holds the slot until its context ends.
	time.Sleep(time.Second)

	dials := func() (n uint64) {
		for _, c := range p.Stats().Dials {
			n += c
		}
		return n
	}
	before := dials()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err := p.Acquire(ctx, h.Addr)
	if !IsTimeout(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the waiting acquire: %v, want its own context's deadline", err)
	}
	var de *DialError
	if errors.As(err, &de) || dials() != before {
		t.Fatalf("the waiting acquire dialled (%v) instead of waiting for the slot", err)
	}
	select {
	case err := <-holderDone:
		t.Fatalf("the holder's dial ended (%v) before its context: the host was not unreachable", err)
	default:
	}

	h.MakeReachable()
	cancelHolder()
	if err := <-holderDone; err == nil || !IsTimeout(err) {
		t.Fatalf("the holder: %v, want a timeout-class error from its cancelled dial", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	_, release, err := p.Acquire(ctx2, h.Addr)
	if err != nil {
		t.Fatalf("acquire once the host answers again: %v", err)
	}
	release()
	if n := h.TCPConnections(); n != 1 {
		t.Errorf("%d TCP connections, want 1", n)
	}
}

// TestConnectionEndsWithoutCalls: a pooled connection on which no call was made after the
// libvirt handshake ends from the host's side (libvirtd stopped, the SSH link killed). The end
// is reported on Done and go-libvirt's Disconnected, without a data race between go-libvirt's
// connect and its disconnect watcher (run with -race), and the next acquire connects again.
func TestConnectionEndsWithoutCalls(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	for _, tc := range []struct {
		name       string
		end, after func(*kvmhost.Host)
	}{
		{"libvirtd stopped", (*kvmhost.Host).StopLibvirtd, (*kvmhost.Host).StartLibvirtd},
		{"ssh link killed", (*kvmhost.Host).KillSSHConnections, func(*kvmhost.Host) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fleetPool(t, f, "t-end-without-calls")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, release, err := p.Acquire(ctx, h.Addr)
			if err != nil {
				t.Fatal(err)
			}
			release()
			disconnected := c.Libvirt().Disconnected()
			tc.end(h)
			defer tc.after(h)
			for what, ch := range map[string]<-chan struct{}{"Done": c.Done(), "Disconnected": disconnected} {
				select {
				case <-ch:
				case <-time.After(15 * time.Second):
					t.Fatalf("%s not closed after the connection ended", what)
				}
			}
			tc.after(h)
			c2, release2, err := p.Acquire(ctx, h.Addr)
			if err != nil {
				t.Fatalf("acquire after the connection ended: %v", err)
			}
			defer release2()
			if c2 == c {
				t.Error("acquire returned the ended connection")
			}
			if _, err := c2.Libvirt().ConnectGetLibVersion(); err != nil {
				t.Errorf("call on the new connection: %v", err)
			}
		})
	}
}

// TestAbandonedCountNeverNegative: a probe is abandoned at its deadline and its calls return
// right after, before the prober counts it (a test hook holds the prober there). The
// abandoned-probes count, as Stats and the gauge read it, never goes below zero and settles at
// zero.
func TestAbandonedCountNeverNegative(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := fleetPool(t, f, "t-abandoned-count")
	if err := probe(p, h.Addr, 10*time.Second, hostCheck(h.Pool)); err != nil {
		t.Fatal(err)
	}
	abandonedNow := make(chan struct{})
	low := int64(0)
	testHookAbandoned = func() {
		close(abandonedNow)
		// The detached calls return now; give their cleanup every chance to run first.
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) {
			low = min(low, int64(p.Stats().AbandonedProbes), p.stats.abandoned.Load())
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookAbandoned = nil })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := p.Probe(ctx, h.Addr, func(*libvirt.Libvirt) error {
		<-abandonedNow // returns once the probe was abandoned, before it is counted
		return nil
	})
	if !errors.Is(err, ErrProbeAbandoned) {
		t.Fatalf("probe: %v, want abandoned", err)
	}
	if low < 0 {
		t.Errorf("the abandoned-probes count read %d", low)
	}
	testutil.Eventually(t, 10*time.Second, "no abandoned probe", func() bool {
		return p.Stats().AbandonedProbes == 0 && p.stats.abandoned.Load() == 0
	})
	if err := probe(p, h.Addr, 10*time.Second, hostCheck(h.Pool)); err != nil {
		t.Errorf("probe once the abandoned one returned: %v", err)
	}
}

// TestSingleKeyTypeKnownHosts: a real host (sshd with ed25519, ECDSA and RSA host keys) is dialled
// and probed with a known_hosts that holds only one of its key types, for each type: the handshake
// negotiates that type (RSA as rsa-sha2-*, since sshd refuses SHA-1 ssh-rsa signatures) and it
// verifies. A known_hosts line of another host's key of the same type still fails as a mismatch.
func TestSingleKeyTypeKnownHosts(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	if len(h.HostKeys) < 3 {
		t.Fatalf("host keys %d, want ed25519, ECDSA and RSA", len(h.HostKeys))
	}
	pool := func(t *testing.T, kh string) *Pool {
		p := New(Options{Name: "t-single-key-type", User: f.User, PrivateKeyFile: f.ClientKeyPath,
			KnownHostsFile: kh, Socket: h.Socket, KeepaliveInterval: time.Hour, DisconnectTimeout: time.Second})
		t.Cleanup(func() { p.Close() })
		return p
	}
	for _, k := range h.HostKeys {
		t.Run(k.Type(), func(t *testing.T) {
			p := pool(t, writeKnownHosts(t, t.TempDir(), h.Addr, k))
			if err := probe(p, h.Addr, 10*time.Second, hostCheck(h.Pool)); err != nil {
				t.Fatalf("known_hosts with only the %s key: %v", k.Type(), err)
			}
		})
	}
	t.Run("another key of the same type", func(t *testing.T) {
		other := newSigner(t, "ed25519").PublicKey()
		p := pool(t, writeKnownHosts(t, t.TempDir(), h.Addr, other))
		err := probe(p, h.Addr, 10*time.Second, hostCheck(h.Pool))
		if de := stageOf(t, err); !de.HostKeyMismatch() {
			t.Errorf("got %v, want a host key mismatch", err)
		}
	})
}

// TestForgetIdle: ForgetIdle closes a host's link only when nobody uses it: not while a caller
// holds the connection or a probe of the host runs, and it reports whether it did. A probe
// after it dials a new link.
func TestForgetIdle(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := fleetPool(t, f, "t-forget-idle")
	if p.ForgetIdle(h.Addr) {
		t.Error("ForgetIdle of a host the pool never dialled reported true")
	}
	if err := probe(p, h.Addr, 5*time.Second, hostCheck(h.Pool)); err != nil {
		t.Fatal(err)
	}
	_, release, err := p.Acquire(context.Background(), h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if p.ForgetIdle(h.Addr) {
		t.Error("ForgetIdle closed a connection a caller holds")
	}
	release()

	entered, unblock := make(chan struct{}), make(chan struct{})
	probed := make(chan error, 1)
	go func() { probed <- probe(p, h.Addr, 10*time.Second, blocking(entered, unblock)) }()
	<-entered
	if p.ForgetIdle(h.Addr) {
		t.Error("ForgetIdle closed the link of a running probe")
	}
	close(unblock)
	if err := <-probed; err != nil {
		t.Errorf("the probe beside ForgetIdle: %v, want it to finish on its link", err)
	}
	if n := h.TCPConnections(); n != 1 {
		t.Errorf("%d TCP connections while the link was in use, want 1", n)
	}

	if !p.ForgetIdle(h.Addr) {
		t.Fatal("ForgetIdle of an idle link reported false")
	}
	testutil.Eventually(t, 10*time.Second, "the host to see its connection closed", func() bool { return h.TCPConnections() == 0 })
	if st := p.Stats(); st.Links != 0 {
		t.Errorf("links %d after ForgetIdle, want 0", st.Links)
	}
	if err := probe(p, h.Addr, 5*time.Second, hostCheck(h.Pool)); err != nil {
		t.Fatalf("a probe after ForgetIdle: %v, want it to dial again", err)
	}
	if st := p.Stats(); st.Dials["ok"] != 2 {
		t.Errorf("%d dials, want 2 (the second after ForgetIdle)", st.Dials["ok"])
	}
	p.Close()
	if p.ForgetIdle(h.Addr) {
		t.Error("ForgetIdle after Close reported true")
	}
}
