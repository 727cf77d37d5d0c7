package kvm

import (
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kvmhost"
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
	expect(t, round(t, c)[h.Name], checks.ReasonPoolNotFound, h.Pool)
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
