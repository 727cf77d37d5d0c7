package hostpool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// recorder is a Tracer that keeps the stages it was given, in order, with their results.
type recorder struct {
	mu     sync.Mutex
	stages []string
}

func (r *recorder) Begin(stage string) func(string) {
	r.mu.Lock()
	i := len(r.stages)
	r.stages = append(r.stages, stage+": (running)")
	r.mu.Unlock()
	return func(result string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stages[i] = stage + ": " + result
	}
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.stages, "\n")
}

// blocking returns a probe function that says when it runs and returns once release is closed.
func blocking(entered chan<- struct{}, release <-chan struct{}) func(*libvirt.Libvirt) error {
	return func(l *libvirt.Libvirt) error {
		close(entered)
		<-release
		_, err := l.ConnectGetLibVersion()
		return err
	}
}

// TestOnDemandProbe checks, on a real host, how an on-demand probe (the exporter's /probe)
// shares the host with the rounds' probes: it waits for a running probe only until its own
// deadline and then reports ErrHostBusy; a round's probe that finds an on-demand one running
// waits for it instead of reporting ErrProbeRunning; two round probes still refuse each other at
// once; and all of it on the host's one SSH link.
func TestOnDemandProbe(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := fleetPool(t, f, "ondemand")
	if err := probe(p, h.Addr, 10*time.Second, hostCheck(h.Pool)); err != nil {
		t.Fatalf("first probe: %v", err)
	}
	onDemand := func(timeout time.Duration, tr Tracer, fn func(*libvirt.Libvirt) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return p.ProbeWith(ctx, h.Addr, ProbeOptions{OnDemand: true, Trace: tr}, fn)
	}

	t.Run("on-demand waits for a round's probe until its deadline, then is busy", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		roundDone := make(chan error, 1)
		go func() { roundDone <- probe(p, h.Addr, 30*time.Second, blocking(entered, release)) }()
		<-entered
		tr := &recorder{}
		err := onDemand(300*time.Millisecond, tr, hostCheck(h.Pool))
		if !errors.Is(err, ErrHostBusy) || !errors.Is(err, context.DeadlineExceeded) || !IsTimeout(err) {
			t.Errorf("on-demand probe while a round's runs: %v, want ErrHostBusy joined with the deadline", err)
		}
		if !strings.Contains(tr.String(), "wait for the host's running check: waiting for the running check of") {
			t.Errorf("the trace does not show the wait:\n%s", tr)
		}
		// With a longer deadline it gets its turn once the round's probe returns.
		got := make(chan error, 1)
		tr = &recorder{}
		go func() { got <- onDemand(30*time.Second, tr, hostCheck(h.Pool)) }()
		close(release)
		if err := <-roundDone; err != nil {
			t.Errorf("the round's probe: %v", err)
		}
		if err := <-got; err != nil {
			t.Errorf("on-demand probe after the round's returned: %v\ntrace:\n%s", err, tr)
		}
		if s := tr.String(); !strings.Contains(s, "pooled connection: ok: reusing the live link") {
			t.Errorf("the on-demand probe did not report reusing the pooled connection:\n%s", s)
		}
	})

	t.Run("a round's probe waits for an on-demand one", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		odDone := make(chan error, 1)
		go func() { odDone <- onDemand(30*time.Second, nil, blocking(entered, release)) }()
		<-entered
		roundDone := make(chan error, 1)
		go func() { roundDone <- probe(p, h.Addr, 30*time.Second, hostCheck(h.Pool)) }()
		select {
		case err := <-roundDone:
			t.Fatalf("the round's probe returned while the on-demand probe ran: %v; want it to wait", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
		if err := <-odDone; err != nil {
			t.Errorf("on-demand probe: %v", err)
		}
		if err := <-roundDone; err != nil {
			t.Errorf("the round's probe after the on-demand one: %v, want success", err)
		}
	})

	t.Run("rounds' probes still refuse each other at once", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() { first <- probe(p, h.Addr, 30*time.Second, blocking(entered, release)) }()
		<-entered
		if err := probe(p, h.Addr, 30*time.Second, hostCheck(h.Pool)); !errors.Is(err, ErrProbeRunning) {
			t.Errorf("a second round probe: %v, want ErrProbeRunning at once", err)
		}
		close(release)
		if err := <-first; err != nil {
			t.Error(err)
		}
	})

	t.Run("an abandoned on-demand probe: on-demand busy at once, the round waits for it", func(t *testing.T) {
		h.PauseLibvirtd()
		resumed := false
		defer func() {
			if !resumed {
				h.ResumeLibvirtd()
			}
		}()
		if err := onDemand(300*time.Millisecond, nil, hostCheck(h.Pool)); !errors.Is(err, ErrProbeAbandoned) {
			t.Fatalf("on-demand probe of a hung libvirtd: %v, want ErrProbeAbandoned", err)
		}
		if err := onDemand(30*time.Second, nil, hostCheck(h.Pool)); !errors.Is(err, ErrProbeBusy) {
			t.Errorf("on-demand probe while the last is abandoned: %v, want ErrProbeBusy at once", err)
		}
		// A round's probe waits for the abandoned on-demand one (up to its own deadline) rather
		// than report ErrProbeBusy for a probe that is not its own...
		if err := probe(p, h.Addr, 300*time.Millisecond, hostCheck(h.Pool)); !errors.Is(err, ErrProbeBusy) {
			t.Errorf("round probe at its deadline behind an abandoned on-demand probe: %v, want ErrProbeBusy", err)
		}
		// ...and runs once the hung call returns.
		roundDone := make(chan error, 1)
		go func() { roundDone <- probe(p, h.Addr, 30*time.Second, hostCheck(h.Pool)) }()
		h.ResumeLibvirtd()
		resumed = true
		if err := <-roundDone; err != nil {
			t.Errorf("round probe once libvirtd resumed: %v, want success", err)
		}
	})

	if s := p.Stats(); s.Handshakes != 1 || s.Links != 1 {
		t.Errorf("handshakes %d, links %d; want every probe on the one link", s.Handshakes, s.Links)
	}
	if n := h.TCPConnections(); n != 1 {
		t.Errorf("the host has %d SSH connections, want 1", n)
	}
}

// TestDialTrace checks that a dial reports each of its stages, in order, to the trace.
func TestDialTrace(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := fleetPool(t, f, "dialtrace")
	tr := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.ProbeWith(ctx, h.Addr, ProbeOptions{OnDemand: true, Trace: tr}, hostCheck(h.Pool)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(tr.String(), "\n") {
		name, result, _ := strings.Cut(line, ": ")
		if !strings.HasPrefix(result, "ok") {
			t.Errorf("stage %q: %q, want ok", name, result)
		}
		names = append(names, name)
	}
	want := []string{"key material", "tcp connect", "ssh handshake", "host key verification", "ssh authentication",
		"opening the libvirt socket", "libvirt connect"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("stages %v, want %v", names, want)
	}
	if s := tr.String(); strings.Contains(s, "PRIVATE KEY") {
		t.Errorf("the trace holds key material:\n%s", s)
	}
}
