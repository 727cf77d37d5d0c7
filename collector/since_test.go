package collector

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// reasonChecker is a checker whose one target reads the reason the test sets (up when Ready).
type reasonChecker struct{ reason atomic.Value }

func (c *reasonChecker) Name() string              { return "kvm-lab" }
func (c *reasonChecker) Type() checks.ProviderType { return kvm.Type }
func (c *reasonChecker) Targets() []string         { return []string{"hv1"} }
func (c *reasonChecker) Check(context.Context) []checks.TargetResult {
	r := c.reason.Load().(checks.Reason)
	return []checks.TargetResult{{Target: "hv1", Up: r == checks.ReasonReady, Reason: r, Message: "set by the test"}}
}

// TestLastTransitionFollowsTheRunner feeds the gatherer from the real check runner: the
// last-transition gauge is the snapshot's Since, it stays put when the reason changes while the
// target is down, and it moves when the target comes back up.
func TestLastTransitionFollowsTheRunner(t *testing.T) {
	c := &reasonChecker{}
	c.reason.Store(kvm.ReasonTCPUnreachable)
	r := checks.NewRunner(checks.Options{Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond}, []checks.Checker{c})
	ctx, cancel := context.WithCancel(context.Background())
	published := r.Subscribe(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// The gatherer serves the runner's snapshots; served remembers which one it last served.
	var served atomic.Pointer[checks.Snapshot]
	g := NewGatherer(func() *checks.Snapshot { s := r.Current(); served.Store(s); return s })
	// scrape gathers once and returns hv1's state in the snapshot served and the gauges read.
	scrape := func() (st checks.TargetState, transition, up float64, reason string) {
		t.Helper()
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		cur := hv1(served.Load())
		if cur == nil {
			t.Fatal("hv1 is not in the snapshot served")
		}
		transition, up = math.NaN(), math.NaN()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case lastTransition.name:
					transition = m.GetGauge().GetValue()
				case targetUp.name:
					up = m.GetGauge().GetValue()
				case targetReason.name:
					for _, lp := range m.GetLabel() {
						if lp.GetName() == "reason" {
							reason = lp.GetValue()
						}
					}
				}
			}
		}
		return *cur, transition, up, reason
	}
	// until waits for rounds until cond holds of the snapshot served.
	until := func(what string, cond func(st checks.TargetState) bool) (checks.TargetState, float64, float64, string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			if hv1(r.Current()) != nil {
				if st, transition, up, reason := scrape(); cond(st) {
					return st, transition, up, reason
				}
			}
			select {
			case <-published:
			case <-timeout:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	// equal: the gauge holds the time (float64 seconds keep about 0.2 µs at today's epoch).
	equal := func(v float64, tm time.Time) bool {
		return math.Abs(v-float64(tm.UnixNano())/1e9) < 1e-6
	}

	down, transition, up, reason := until("hv1 down with TCPUnreachable", func(st checks.TargetState) bool {
		return st.Reason == kvm.ReasonTCPUnreachable
	})
	if up != 0 || reason != "TCPUnreachable" || !equal(transition, down.Since) {
		t.Errorf("down: up %v reason %q last transition %v; want 0, TCPUnreachable and the snapshot's Since %s", up, reason, transition, down.Since)
	}
	since := down.Since

	// Still down, another reason: not a transition.
	c.reason.Store(kvm.ReasonSSHHandshakeFailed)
	other, transition, up, reason := until("hv1 down with SSHHandshakeFailed", func(st checks.TargetState) bool {
		return st.Reason == kvm.ReasonSSHHandshakeFailed
	})
	if !other.CheckedAt.After(since) {
		t.Fatalf("the check with the new reason (%s) is not after the target went down (%s)", other.CheckedAt, since)
	}
	if up != 0 || reason != "SSHHandshakeFailed" || !equal(transition, since) || !equal(transition, other.Since) {
		t.Errorf("new reason while down: up %v reason %q last transition %v; want 0, SSHHandshakeFailed and the unchanged %s", up, reason, transition, since)
	}
	if equal(transition, other.CheckedAt) {
		t.Errorf("the last transition followed the reason's change, checked at %s", other.CheckedAt)
	}

	// Back up: a transition.
	c.reason.Store(checks.ReasonReady)
	back, transition, up, reason := until("hv1 up", func(st checks.TargetState) bool { return st.Up })
	if up != 1 || reason != "Ready" || !equal(transition, back.Since) || !back.Since.After(other.CheckedAt) {
		t.Errorf("back up: up %v reason %q last transition %v; want 1, Ready and the snapshot's new Since %s (after %s)", up, reason, transition, back.Since, other.CheckedAt)
	}

	// Rounds go on, the target stays up: the gauge stays where it is.
	round := back
	for range 3 {
		round, transition, _, _ = until("another round", func(st checks.TargetState) bool { return st.CheckedAt.After(round.CheckedAt) })
		if !equal(transition, back.Since) {
			t.Errorf("steady up after %s: last transition %v, want %s", round.CheckedAt, transition, back.Since)
		}
	}
}

// hv1 returns the state of kvm-lab's target hv1 in s, or nil when s does not hold it.
func hv1(s *checks.Snapshot) *checks.TargetState {
	for i := range s.Providers {
		if p := &s.Providers[i]; p.Name == "kvm-lab" {
			for j := range p.Targets {
				if p.Targets[j].Target == "hv1" {
					return &p.Targets[j]
				}
			}
		}
	}
	return nil
}
