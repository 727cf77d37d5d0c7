package checks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// notStarted is the result a checker reports for a target whose check the round did not start.
func notStarted(target string) TargetResult {
	return TargetResult{Target: target, Reason: ReasonTimeout, CheckedAt: time.Now(), NotContacted: true, NotStarted: true,
		Message: "not started: the round's deadline came while waiting for one of the provider's concurrency slots"}
}

func (f *fakeChecker) setResult(tr TargetResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verdicts[tr.Target] = tr
}

// TestNotStartedKeepsTheReason: HostKeyMismatch alternating with rounds that did not start the
// check keeps the reason HostKeyMismatch in every snapshot (so an alert on it with a for: clause
// can fire), with the same Since, the same history and the last contact's check time; the
// rounds that did not start it are not checks (counters, consecutive failures).
func TestNotStartedKeepsTheReason(t *testing.T) {
	f := newFake("kvm", typeKVM, "hv1")
	r, _ := newTestRunner(t, time.Second)
	r.SetProviders([]Provider{{Checker: f, Thresholds: Thresholds{Failure: 1, Success: 1}}})
	ctx := context.Background()
	var since, checkedAt time.Time
	for n := 1; n <= 6; n++ {
		if n%2 == 1 {
			f.set("hv1", reasonHostKeyMismatch, fmt.Sprintf("host key mismatch %d", n))
		} else {
			f.setResult(notStarted("hv1"))
		}
		r.round(ctx)
		ts := mustTarget(t, r.Current(), "kvm", "hv1")
		checks := uint64((n + 1) / 2)
		if ts.Up || ts.Reason != reasonHostKeyMismatch || ts.CheckReason != reasonHostKeyMismatch || ts.Checks != checks || ts.FailedChecks != checks ||
			ts.ConsecutiveFailures != int(checks) || len(ts.History) != 1 {
			t.Errorf("round %d: %s (check %s), %d checks, %d failed, %d in a row, %d transitions; want HostKeyMismatch, %d checks, all failed, 1 transition",
				n, ts.Reason, ts.CheckReason, ts.Checks, ts.FailedChecks, ts.ConsecutiveFailures, len(ts.History), checks)
		}
		if n%2 == 0 && !strings.HasPrefix(ts.Message, fmt.Sprintf("host key mismatch %d", n-1)) {
			t.Errorf("round %d (not started): message %q, want the last check's", n, ts.Message)
		}
		if n == 1 {
			since = ts.Since
		} else if !ts.Since.Equal(since) {
			t.Errorf("round %d: Since moved from %v to %v", n, since, ts.Since)
		}
		if n%2 == 1 {
			checkedAt = ts.CheckedAt
		} else if !ts.CheckedAt.Equal(checkedAt) {
			t.Errorf("round %d (not started): checked at %v, want the last contact's %v", n, ts.CheckedAt, checkedAt)
		}
	}
}

// TestNotStartedDoesNotTurnATargetDown: with failureThreshold 3, three rounds in a row that did
// not start a Ready target's check leave it up and Ready, with no failure counted; a round that
// did not start it does not break a run of failures either. Rounds that found an earlier call
// still outstanding (NotContacted alone: a continuing Timeout) are failed checks, and three turn
// the target down.
func TestNotStartedDoesNotTurnATargetDown(t *testing.T) {
	f := newFake("kvm", typeKVM, "hv1")
	r, _ := newTestRunner(t, time.Second)
	r.SetProviders([]Provider{{Checker: f, Thresholds: Thresholds{Failure: 3, Success: 1}}})
	ctx := context.Background()
	r.round(ctx)
	for n := 1; n <= 3; n++ {
		f.setResult(notStarted("hv1"))
		r.round(ctx)
		if ts := mustTarget(t, r.Current(), "kvm", "hv1"); !ts.Up || ts.Reason != ReasonReady || ts.ConsecutiveFailures != 0 || ts.Checks != 1 || ts.FailedChecks != 0 || ts.FailuresPending() {
			t.Errorf("not started %d times: up %v %s, %d failures, %d checks (%d failed), want up Ready with 1 check", n, ts.Up, ts.Reason, ts.ConsecutiveFailures, ts.Checks, ts.FailedChecks)
		}
	}
	// Two failures, a round that did not start the check, a third failure: down.
	for _, tr := range []TargetResult{
		{Target: "hv1", Reason: reasonTCPUnreachable}, {Target: "hv1", Reason: reasonTCPUnreachable},
		notStarted("hv1"), {Target: "hv1", Reason: reasonTCPUnreachable},
	} {
		f.setResult(tr)
		r.round(ctx)
	}
	if ts := mustTarget(t, r.Current(), "kvm", "hv1"); ts.Up || ts.Reason != reasonTCPUnreachable || ts.ConsecutiveFailures != 3 || ts.Checks != 4 || ts.FailedChecks != 3 {
		t.Errorf("three failures around a round not started: up %v %s, %d in a row, %d checks (%d failed); want down with 3, 4 checks, 3 failed",
			ts.Up, ts.Reason, ts.ConsecutiveFailures, ts.Checks, ts.FailedChecks)
	}

	g := newFake("kvm", typeKVM, "hv1")
	r.SetProviders([]Provider{{Checker: g, Thresholds: Thresholds{Failure: 3, Success: 1}}})
	r.round(ctx)
	for n := 1; n <= 3; n++ {
		g.setResult(TargetResult{Target: "hv1", Reason: ReasonTimeout, NotContacted: true, CheckedAt: time.Now(),
			Message: "the previous check of this host was abandoned at its deadline and has still not returned"})
		r.round(ctx)
		ts := mustTarget(t, r.Current(), "kvm", "hv1")
		if ts.ConsecutiveFailures != n || ts.Up != (n < 3) || n == 3 && ts.Reason != ReasonTimeout {
			t.Errorf("outstanding call %d: up %v %s, %d failures in a row; want a failed check each round, down at the third", n, ts.Up, ts.Reason, ts.ConsecutiveFailures)
		}
	}
}

// TestNeverStartedIsUnchecked: a target whose check no round has started has no verdict: it is
// listed in Unchecked (since when it was listed, and the last round's note), not in Targets, so
// it reads neither up nor down; a reload that keeps its provider keeps it listed since the start;
// its first check gives it its verdict; a target a reload adds is unchecked from the reload.
func TestNeverStartedIsUnchecked(t *testing.T) {
	f := newFake("kvm", typeKVM, "hv1", "hv2")
	before := time.Now()
	r, _ := newTestRunner(t, time.Second, f)
	ctx := context.Background()
	f.setResult(notStarted("hv2"))
	for range 3 {
		r.round(ctx)
	}
	p := r.Current().Provider("kvm")
	if len(p.Targets) != 1 || p.Targets[0].Target != "hv1" || p.Ready() != 1 {
		t.Fatalf("targets with a verdict: %v, want hv1 only", targetNames(p))
	}
	if len(p.Unchecked) != 1 || p.Unchecked[0].Target != "hv2" || p.Unchecked[0].Listed.Before(before) || p.Unchecked[0].Listed.After(p.Targets[0].CheckedAt) ||
		!strings.HasPrefix(p.Unchecked[0].Message, "not started: ") || p.Unchecked[0].Checks != 0 || !p.Unchecked[0].CheckedAt.IsZero() {
		t.Fatalf("unchecked: %+v, want hv2 listed at the start, never checked, with the round's note", p.Unchecked)
	}
	listed := p.Unchecked[0].Listed

	// A reload keeping the provider (a new checker, one more target).
	g := newFake("kvm", typeKVM, "hv1", "hv2", "hv3")
	g.setResult(notStarted("hv2"))
	g.setResult(notStarted("hv3"))
	g.set("hv1", reasonPoolInactive, "")
	reload := time.Now()
	r.SetCheckers([]Checker{g})
	p = r.Current().Provider("kvm")
	if len(p.Unchecked) != 2 || !p.Unchecked[0].Listed.Equal(listed) || p.Unchecked[1].Target != "hv3" || p.Unchecked[1].Listed.Before(reload) ||
		p.Unchecked[1].Message != "not checked yet: no round has started its check" {
		t.Fatalf("after the reload: %+v, want hv2 listed since the start and hv3 since the reload", p.Unchecked)
	}
	if len(p.Targets) != 1 || !p.Targets[0].Up {
		t.Fatalf("after the reload: hv1 %+v, want its verdict kept", p.Targets)
	}
	r.round(ctx)
	g.set("hv2", ReasonReady, "")
	r.round(ctx)
	p = r.Current().Provider("kvm")
	if got := targetNames(p); strings.Join(got, ",") != "hv1,hv2" || len(p.Unchecked) != 1 || p.Unchecked[0].Target != "hv3" {
		t.Errorf("after hv2's first check: verdicts on %v, unchecked %+v; want hv1,hv2 and hv3", got, p.Unchecked)
	}
	if ts := p.Target("hv2"); ts == nil || !ts.Up || ts.Checks != 1 || len(ts.History) != 1 || !ts.History[0].First {
		t.Errorf("hv2's first verdict: %+v", ts)
	}
}

// TestHistoryKeepsTheDownTransition: a target that goes down and then changes reason every
// check keeps, in its full history, the transition that turned it down, with the newest changes
// of reason after it.
func TestHistoryKeepsTheDownTransition(t *testing.T) {
	f := newFake("kvm", typeKVM, "hv1")
	r, _ := newTestRunner(t, time.Second, f)
	ctx := context.Background()
	r.round(ctx)
	reasons := []Reason{reasonTCPUnreachable, reasonSSHHandshakeFailed}
	for i := range 3 * HistoryLength {
		f.set("hv1", reasons[i%2], fmt.Sprintf("check %d", i))
		r.round(ctx)
	}
	h := mustTarget(t, r.Current(), "kvm", "hv1").History
	if len(h) != HistoryLength {
		t.Fatalf("history of %d transitions, want %d", len(h), HistoryLength)
	}
	if !h[0].FromUp || h[0].Up || h[0].Message != "check 0" {
		t.Errorf("history[0] = %+v, want the transition that turned the target down (check 0)", h[0])
	}
	if last := h[len(h)-1]; last.Message != fmt.Sprintf("check %d", 3*HistoryLength-1) {
		t.Errorf("newest transition %+v, want the last check's", last)
	}
	for j := 1; j < len(h); j++ {
		if h[j].At.Before(h[j-1].At) || h[j].FromUp {
			t.Errorf("history[%d] = %+v out of order, or a second down transition", j, h[j])
		}
	}
	// Back up: the down transition stays until newer transitions push it out in turn.
	f.set("hv1", ReasonReady, "back")
	r.round(ctx)
	h = mustTarget(t, r.Current(), "kvm", "hv1").History
	if !h[0].FromUp || h[0].Up || !h[len(h)-1].Up {
		t.Errorf("after recovery: history %+v, want the down transition first and the recovery last", h)
	}
}
