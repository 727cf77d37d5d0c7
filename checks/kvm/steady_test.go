package kvm

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// TestSteadyCheckIsOneCall: on real hosts, counted by each host's libvirtd, a host's first
// check on a new connection makes its calls (connect, library version, hostname, pool lookup,
// pool info) and every later check on it exactly one, StoragePoolGetInfo, while the verdict
// still says which libvirt on which host answered. A pool undefined and defined again (a new
// UUID: the kept handle is stale) is looked up again and reads Ready; a pool undefined reads
// PoolNotFound; a restarted libvirtd is a new connection whose facts are read again.
func TestSteadyCheckIsOneCall(t *testing.T) {
	f := kvmhost.Start(t, 2)
	c := newChecker(t, provider("steady", f, f.Hosts))
	for _, h := range f.Hosts {
		expectReady(t, h, round(t, c)[h.Name]) // the first check, and virsh for pool-info
	}
	ready := func(rs map[string]checks.TargetResult) {
		t.Helper()
		for _, h := range f.Hosts {
			r := rs[h.Name]
			if r.Reason != checks.ReasonReady || !strings.Contains(r.Message, "on "+h.Hostname) || !strings.Contains(r.Message, "libvirt 9.") {
				t.Errorf("%s: %s %q, want Ready naming libvirt and %s", h.Name, r.Reason, r.Message, h.Hostname)
			}
		}
	}
	calls := func() []int {
		var n []int
		for _, h := range f.Hosts {
			n = append(n, h.RPCs())
		}
		return n
	}
	before := calls()
	const rounds = 3
	for range rounds {
		ready(round(t, c))
	}
	after := calls()
	for i, h := range f.Hosts {
		if got := after[i] - before[i]; got != rounds {
			t.Errorf("%s: %d libvirt calls in %d steady checks, want %d (one each)", h.Name, got, rounds, rounds)
		}
	}

	h := f.Hosts[0]
	h.UndefinePool()
	h.DefinePool()
	n := h.RPCs()
	ready(round(t, c))
	// The kept handle's UUID is gone: the info call fails, the lookup and a second info call
	// follow.
	if got := h.RPCs() - n; got != 3 {
		t.Errorf("the check after the pool was defined again made %d calls, want 3 (info, lookup, info)", got)
	}
	n = h.RPCs()
	ready(round(t, c))
	if got := h.RPCs() - n; got != 1 {
		t.Errorf("after the pool was defined again: %d calls in the next steady check, want 1", got)
	}

	h.UndefinePool()
	expect(t, round(t, c)[h.Name], ReasonPoolNotFound, h.Pool)
	h.DefinePool()
	ready(round(t, c))

	h.StopLibvirtd()
	h.StartLibvirtd()
	ready(round(t, c))
	n = h.RPCs()
	ready(round(t, c))
	if got := h.RPCs() - n; got != 1 {
		t.Errorf("after libvirtd restarted: %d calls in the next steady check, want 1", got)
	}
}

// TestPooledHostGoroutines: on real hosts, a pooled host with a live link costs the exporter at
// most six goroutines (x/crypto's transport, key exchange and multiplexer, the pool's serve,
// go-libvirt's reader and disconnect watcher), plus one keepalive loop for the whole pool, and
// they are gone after Close.
func TestPooledHostGoroutines(t *testing.T) {
	const n = 3
	f := kvmhost.Start(t, n)
	g0 := runtime.NumGoroutine()
	c, err := newTuned(provider("goroutines", f, f.Hosts), nil, tuning{KeepaliveInterval: time.Hour, DisconnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, h := range f.Hosts {
			if r := round(t, c)[h.Name]; r.Reason != checks.ReasonReady {
				t.Fatalf("%s: %s %q", h.Name, r.Reason, r.Message)
			}
		}
	}
	// A dial's or a channel open's helper goroutine may still be on its way out: give them a
	// moment (the count only falls from here).
	settle := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine()-g0 > 6*n+1 && time.Now().Before(settle) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine() - g0; g > 6*n+1 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines for %d pooled hosts, want at most %d (six a host, one keepalive loop):\n%s", g, n, 6*n+1, buf[:runtime.Stack(buf, true)])
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g := runtime.NumGoroutine() - g0; g > 0 {
		t.Errorf("%d goroutines left after Close", g)
	}
}
