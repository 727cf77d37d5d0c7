package kvm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestHungHostsDoNotStarveHealthyOnesRealHosts: with concurrency C and more than C hosts whose
// libvirtd hangs after they were healthy (SIGSTOP: their pooled links stay up, their calls never
// return), every healthy host reads Ready in every round, and every hung host reads Timeout.
// Each hung host holds a slot only for its first call's own bound (rpcTimeout), never for the
// round; in later rounds its abandoned call is still out, so it answers at once, uncontacted.
// Real hosts: 3 healthy, 3 hung, concurrency 2, the hung ones first in the list.
func TestHungHostsDoNotStarveHealthyOnesRealHosts(t *testing.T) {
	f := kvmhost.Start(t, 6)
	hung, healthy := f.Hosts[:3], f.Hosts[3:]
	p := provider("kvm-hung", f, f.Hosts)
	p.Block.(*Config).Concurrency = 2
	c := newChecker(t, p)
	// Three hung hosts over two slots hold them for two calls' bounds (2 × testRPCTimeout)
	// before the healthy hosts' turn: the round leaves them room on a loaded machine.
	const timeout = 6 * testRPCTimeout
	check := func() map[string]checks.TargetResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out := map[string]checks.TargetResult{}
		for _, r := range c.Check(ctx) {
			out[r.Target] = r
		}
		return out
	}
	for _, h := range f.Hosts {
		expectReady(t, h, check()[h.Name])
	}
	for _, h := range hung {
		h.PauseLibvirtd()
		t.Cleanup(h.ResumeLibvirtd)
	}
	for n := 1; n <= 3; n++ {
		rs := check()
		for _, h := range healthy {
			if r := rs[h.Name]; r.Reason != checks.ReasonReady {
				t.Errorf("round %d: healthy %s reads %s (%q), want Ready", n, h.Name, r.Reason, r.Message)
			}
		}
		for _, h := range hung {
			r := rs[h.Name]
			if r.Reason != checks.ReasonTimeout {
				t.Errorf("round %d: hung %s reads %s (%q), want Timeout", n, h.Name, r.Reason, r.Message)
				continue
			}
			switch {
			case n == 1 && (!strings.Contains(r.Message, "within rpcTimeout") || r.NotContacted || r.Duration >= timeout/2):
				t.Errorf("round 1: hung %s: %q after %s (not contacted %v), want its first call cut by rpcTimeout, long before the round's end",
					h.Name, r.Message, r.Duration, r.NotContacted)
			case n > 1 && (!strings.Contains(r.Message, "has still not returned") || !r.NotContacted):
				t.Errorf("round %d: hung %s: %q (not contacted %v), want an uncontacted Timeout behind its abandoned call", n, h.Name, r.Message, r.NotContacted)
			}
		}
	}
}

// TestRecoveredHostReadsReadyAtTheNextRound drives the round runner against a real host whose
// sshd goes silent (SIGSTOP: the kernel accepts TCP, nothing answers) for several rounds, then
// comes back on the same port: the first round that starts after the repair reads Ready, and
// while the host was silent every advance of its check timestamp matches a connection the host
// saw (its kernel's count of SYNs to port 22).
func TestRecoveredHostReadsReadyAtTheNextRound(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	c := newChecker(t, provider("kvm-recover", f, f.Hosts))
	// A round outlasts the SSH stage's bound, so that a silent host's dial ends at it.
	const interval = 2*stageTimeout + time.Second
	r := checks.NewRunner(checks.Options{Interval: interval, Timeout: interval}, []checks.Checker{c})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	updates := r.Subscribe(ctx)
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	// next waits for the next published round and returns the host's verdict in it.
	lastRound := uint64(0)
	next := func() (checks.TargetState, *checks.Snapshot) {
		t.Helper()
		for {
			select {
			case <-updates:
			case <-time.After(4 * interval):
				t.Fatal("no round published for four intervals")
			}
			s := r.Current()
			if s.Round == lastRound {
				continue
			}
			lastRound = s.Round
			for _, p := range s.Providers {
				for _, ts := range p.Targets {
					if ts.Target == h.Name {
						return ts, s
					}
				}
			}
		}
	}
	if ts, _ := next(); ts.Reason != checks.ReasonReady {
		t.Fatalf("first round: %s (%q), want Ready", ts.Reason, ts.Message)
	}

	h.CountSSHConnections()
	h.PauseSSHD()
	h.KillSSHConnections()
	prev, _ := next() // the round the fault may have met half way
	seen := h.SSHConnectionsSeen()
	const silentRounds = 5
	for n := 1; n <= silentRounds; n++ {
		ts, _ := next()
		now := h.SSHConnectionsSeen()
		if ts.Reason != ReasonSSHHandshakeFailed {
			t.Errorf("silent round %d: %s (%q), want SSHHandshakeFailed", n, ts.Reason, ts.Message)
		}
		if ts.CheckedAt.After(prev.CheckedAt) && now <= seen {
			t.Errorf("silent round %d: the check time moved from %s to %s, but the host saw no new connection (%d before, %d now)",
				n, prev.CheckedAt.Format(time.StampMilli), ts.CheckedAt.Format(time.StampMilli), seen, now)
		}
		if !ts.CheckedAt.After(prev.CheckedAt) {
			t.Errorf("silent round %d: the check time stayed at %s although the host was dialled", n, ts.CheckedAt.Format(time.StampMilli))
		}
		prev, seen = ts, now
	}

	h.ResumeSSHD()
	repaired := time.Now()
	for {
		ts, s := next()
		if !s.RoundStarted.After(repaired) {
			continue // started before the repair
		}
		if ts.Reason != checks.ReasonReady {
			t.Errorf("the first round after the repair reads %s (%q), want Ready", ts.Reason, ts.Message)
		}
		break
	}
}

// TestSilentlyDeadLinkIsNoticedAtTheNextRound: a host that starts dropping every packet leaves
// its pooled link up but dead, and nothing tells the exporter until a keepalive goes unanswered.
// The first round's call runs out its bound (Timeout); the abandoned probe makes the pool test
// the link at once, not at the next scheduled keepalive (an hour away here), so the next round
// finds the link closed and dials: TCPUnreachable, the stage that really fails, instead of a
// Timeout behind a call that never returns.
func TestSilentlyDeadLinkIsNoticedAtTheNextRound(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	c, err := newTuned(provider("kvm-dead-link", f, f.Hosts), nil, tuning{
		KeepaliveInterval: time.Hour, KeepaliveTimeout: time.Second, DisconnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	expectReady(t, h, round(t, c)[h.Name])
	h.MakeUnreachable()
	t.Cleanup(h.MakeReachable)
	expect(t, round(t, c)[h.Name], checks.ReasonTimeout, "within rpcTimeout")
	testutil.Eventually(t, 10*time.Second, "the pool to close the dead link", func() bool {
		return viewPool(t, "kvm-dead-link", f.Hosts).Links == 0
	})
	expect(t, round(t, c)[h.Name], ReasonTCPUnreachable, "no answer within")
}
