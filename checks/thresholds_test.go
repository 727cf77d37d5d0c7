package checks

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestThresholdsCount drives one target through the runner with failureThreshold 3 and
// successThreshold 2: a single failure and two failures in a row are held back (the target
// reads up, Ready, with the pending failures and the raw reason in its message and counts), the
// third failure in a row flips it (Since moves to that check), a success while down is held back
// (down, with the reason it went down with), and the second success in a row flips it back.
// Only the two flips are logged above debug.
func TestThresholdsCount(t *testing.T) {
	f := newFake("prov", typeKVM, "hv1")
	r, rec := newTestRunner(t, time.Second)
	r.SetProviders([]Provider{{Checker: f, Thresholds: Thresholds{Failure: 3, Success: 2}}})
	ctx := context.Background()
	// The first check has met no threshold yet (successThreshold 2): no verdict.
	f.set("hv1", ReasonReady, "msg first")
	r.round(ctx)
	if p := r.Current().Provider("prov"); p.Target("hv1") != nil || len(p.Unchecked) != 1 || p.Unchecked[0].ConsecutiveSuccesses != 1 {
		t.Fatalf("after one success under successThreshold 2: %+v, want hv1 unchecked with 1 success", p)
	}
	if l := rec.take(); len(l) != 1 || l[0].level != slog.LevelDebug {
		t.Errorf("logged %v for a target without a verdict, want one debug record", l)
	}

	type step struct {
		check     Reason // what the check reports
		up        bool   // the published verdict
		reason    Reason
		failures  int
		successes int
		pending   string // a part of the message while pending
		flip      bool   // Since moves to this check
		logged    string // the record above debug, if any
	}
	steps := []step{
		{check: ReasonReady, up: true, reason: ReasonReady, successes: 2, flip: true, logged: "target is up"},
		{check: reasonTCPUnreachable, up: true, reason: ReasonReady, failures: 1,
			pending: "failures pending: 1 of 3 consecutive failed checks (failureThreshold) turn the target down; the last check: TCPUnreachable: msg 1"},
		{check: ReasonReady, up: true, reason: ReasonReady, successes: 1},
		{check: reasonPoolInactive, up: true, reason: ReasonReady, failures: 1, pending: "failures pending: 1 of 3"},
		{check: ReasonTimeout, up: true, reason: ReasonReady, failures: 2, pending: "failures pending: 2 of 3 consecutive failed checks (failureThreshold) turn the target down; the last check: Timeout: msg 4"},
		{check: reasonPoolInactive, up: false, reason: reasonPoolInactive, failures: 3, flip: true, logged: "target went down"},
		{check: reasonPoolInactive, up: false, reason: reasonPoolInactive, failures: 4},
		{check: ReasonReady, up: false, reason: reasonPoolInactive, successes: 1,
			pending: "recovery pending: answering Ready, 1 of 2 consecutive successful checks (successThreshold) turn the target up; the last check: Ready: msg 7; down: msg 6"},
		{check: reasonPoolInactive, up: false, reason: reasonPoolInactive, failures: 1},
		{check: ReasonReady, up: false, reason: reasonPoolInactive, successes: 1, pending: "recovery pending: answering Ready, 1 of 2"},
		{check: ReasonReady, up: true, reason: ReasonReady, successes: 2, flip: true, logged: "target is back up"},
		{check: ReasonReady, up: true, reason: ReasonReady, successes: 3},
	}
	var since time.Time
	for i, s := range steps {
		msg := fmt.Sprintf("msg %d", i)
		f.set("hv1", s.check, msg)
		r.round(ctx)
		ts := mustTarget(t, r.Current(), "prov", "hv1")
		where := fmt.Sprintf("check %d (%s)", i, s.check)
		if ts.Up != s.up || ts.Reason != s.reason || ts.ConsecutiveFailures != s.failures || ts.ConsecutiveSuccesses != s.successes {
			t.Errorf("%s: up %v %s, %d failures, %d successes; want up %v %s, %d, %d", where,
				ts.Up, ts.Reason, ts.ConsecutiveFailures, ts.ConsecutiveSuccesses, s.up, s.reason, s.failures, s.successes)
		}
		if ts.CheckReason != s.check || ts.CheckMessage != msg {
			t.Errorf("%s: the check itself reads %s %q, want %s %q", where, ts.CheckReason, ts.CheckMessage, s.check, msg)
		}
		pending := ts.FailuresPending() || ts.RecoveryPending()
		switch {
		case s.pending != "" && (!pending || !strings.Contains(ts.Message, s.pending)):
			t.Errorf("%s: message %q (pending %v), want it pending with %q", where, ts.Message, pending, s.pending)
		case s.pending == "" && (pending || ts.Message != msg):
			t.Errorf("%s: message %q (pending %v), want the check's own %q", where, ts.Message, pending, msg)
		}
		if s.flip {
			if !ts.Since.Equal(ts.CheckedAt) {
				t.Errorf("%s: Since %s, want this check's time %s", where, ts.Since, ts.CheckedAt)
			}
			since = ts.Since
		} else if !ts.Since.Equal(since) {
			t.Errorf("%s: Since moved to %s without a flip (want %s)", where, ts.Since, since)
		}
		var above []string
		for _, l := range rec.take() {
			if l.level > slog.LevelDebug {
				above = append(above, l.msg)
			} else if !pending {
				t.Errorf("%s: debug record %s without a pending verdict", where, l)
			}
		}
		if got := strings.Join(above, "; "); got != s.logged {
			t.Errorf("%s: logged %q, want %q", where, got, s.logged)
		}
	}

	// The history holds the flips only: the first verdict, down, back up.
	h := mustTarget(t, r.Current(), "prov", "hv1").History
	var got []string
	for _, tr := range h {
		got = append(got, fmt.Sprintf("first=%v %v/%s -> %v/%s %q", tr.First, tr.FromUp, tr.FromReason, tr.Up, tr.Reason, tr.Message))
	}
	want := []string{
		`first=true false/ -> true/Ready "msg 0"`,
		`first=false true/Ready -> false/PoolInactive "msg 5"`,
		`first=false false/PoolInactive -> true/Ready "msg 10"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDefaultThresholdsPublishEveryCheck: with the defaults (and thresholds below 1, which the
// loader refuses, treated as 1) every failed check turns the target down and every success up.
func TestDefaultThresholdsPublishEveryCheck(t *testing.T) {
	for _, th := range []Thresholds{DefaultThresholds, {}} {
		f := newFake("prov", typeGCP, "p")
		r, _ := newTestRunner(t, time.Second)
		r.SetProviders([]Provider{{Checker: f, Thresholds: th}})
		for i, reason := range []Reason{ReasonReady, ReasonAPIError, ReasonReady, ReasonForbidden} {
			f.set("p", reason, "")
			r.round(context.Background())
			ts := mustTarget(t, r.Current(), "prov", "p")
			if ts.Reason != reason || ts.Up != (reason == ReasonReady) || ts.FailuresPending() || ts.RecoveryPending() {
				t.Errorf("thresholds %+v, check %d: published %v %s (pending %v/%v), want the check's %s", th, i, ts.Up, ts.Reason,
					ts.FailuresPending(), ts.RecoveryPending(), reason)
			}
			if !ts.Since.Equal(ts.CheckedAt) {
				t.Errorf("thresholds %+v, check %d: every check flips, Since %s != %s", th, i, ts.Since, ts.CheckedAt)
			}
		}
		if ts := mustTarget(t, r.Current(), "prov", "p"); ts.Thresholds != DefaultThresholds {
			t.Errorf("thresholds %+v in force, want %+v", ts.Thresholds, DefaultThresholds)
		}
	}
}

// TestFirstVerdictFollowsTheThresholds: a target's first checks follow the kubelet prober's
// rule, with "no verdict" as the initial value: the run is counted from the first result and the
// target stays unchecked (neither up nor down, not in Targets) until the run meets a threshold;
// its first verdict, its Since and its first transition are those of the check that met it.
func TestFirstVerdictFollowsTheThresholds(t *testing.T) {
	ctx := context.Background()
	f := newFake("prov", typeKVM, "down", "up")
	r, _ := newTestRunner(t, time.Second)
	r.SetProviders([]Provider{{Checker: f, Thresholds: Thresholds{Failure: 3, Success: 2}}})
	p := r.Current().Provider("prov")
	if len(p.Targets) != 0 || len(p.Unchecked) != 2 || p.Unchecked[0].Listed.IsZero() || p.Unchecked[0].Checks != 0 || !p.Unchecked[0].CheckedAt.IsZero() {
		t.Fatalf("before any round: %+v, want both targets unchecked, listed, never checked", p)
	}
	listed := p.Unchecked[0].Listed
	f.set("down", reasonTCPUnreachable, "refused")
	// up: Ready, a failure (the run starts again), Ready, Ready.
	upChecks := []Reason{ReasonReady, ReasonTimeout, ReasonReady, ReasonReady}
	var downSince time.Time
	for n := 1; n <= 4; n++ {
		f.set("up", upChecks[n-1], "")
		r.round(ctx)
		p := r.Current().Provider("prov")
		down, up := p.Target("down"), p.Target("up")
		if n < 3 {
			if down != nil {
				t.Fatalf("check %d: %d failures under failureThreshold 3 gave a verdict %+v", n, n, down)
			}
			u := p.Unchecked[0]
			if u.Target != "down" || u.ConsecutiveFailures != n || u.Checks != uint64(n) || u.FailedChecks != uint64(n) || u.CheckReason != reasonTCPUnreachable ||
				!u.Listed.Equal(listed) || !strings.Contains(u.Message, fmt.Sprintf("no verdict yet: %d of 3 consecutive failed checks", n)) {
				t.Errorf("check %d: unchecked %+v", n, u)
			}
		} else if down == nil || down.Up || down.Reason != reasonTCPUnreachable || n == 3 && !down.Since.Equal(down.CheckedAt) ||
			len(down.History) != 1 || !down.History[0].First || down.History[0].Up || down.ConsecutiveFailures != n {
			t.Errorf("check %d: %+v, want down since its third check, one first transition", n, down)
		} else if n == 3 {
			downSince = down.Since
		} else if !down.Since.Equal(downSince) {
			t.Errorf("check 4: down since %v, want its third check's %v", down.Since, downSince)
		}
		if n < 4 && up != nil {
			t.Errorf("check %d: %s reads %v without two successes in a row", n, up.Target, up.Up)
		}
		if n == 4 && (up == nil || !up.Up || !up.Since.Equal(up.CheckedAt) || len(up.History) != 1 || up.Checks != 4 || up.FailedChecks != 1) {
			t.Errorf("check 4: %+v, want up from the second success in a row, 4 checks, 1 failed", up)
		}
	}
}

// TestReloadKeepsCountsAndAppliesNewThresholds: a reload that changes the thresholds (a new
// checker for the same provider) keeps the counts made so far and applies the new thresholds
// from the next check on.
func TestReloadKeepsCountsAndAppliesNewThresholds(t *testing.T) {
	f := newFake("prov", typeKVM, "hv1")
	r, _ := newTestRunner(t, time.Second)
	r.SetProviders([]Provider{{Checker: f, Thresholds: Thresholds{Failure: 5, Success: 1}}})
	ctx := context.Background()
	r.round(ctx)
	f.set("hv1", ReasonTimeout, "slow")
	r.round(ctx)
	r.round(ctx)
	if ts := mustTarget(t, r.Current(), "prov", "hv1"); !ts.Up || ts.ConsecutiveFailures != 2 {
		t.Fatalf("two failures under failureThreshold 5: %+v, want up with 2 pending", ts)
	}
	g := newFake("prov", typeKVM, "hv1")
	g.set("hv1", ReasonTimeout, "slow")
	r.SetProviders([]Provider{{Checker: g, Thresholds: Thresholds{Failure: 3, Success: 1}}})
	if ts := mustTarget(t, r.Current(), "prov", "hv1"); !ts.Up || ts.ConsecutiveFailures != 2 {
		t.Errorf("right after the reload: %+v, want the same verdict and counts", ts)
	}
	r.round(ctx)
	if ts := mustTarget(t, r.Current(), "prov", "hv1"); ts.Up || ts.ConsecutiveFailures != 3 || ts.Thresholds.Failure != 3 {
		t.Errorf("third failure in a row under the new failureThreshold 3: %+v, want down", ts)
	}
}

// TestHistoryIsBoundedAndPruned: a target's history keeps its last HistoryLength transitions,
// oldest first, with bounded messages; a snapshot's history never changes after it is
// published; a target the checker stops listing, and a provider a reload removes, lose theirs.
func TestHistoryIsBoundedAndPruned(t *testing.T) {
	f := newFake("prov", typeKVM, "hv1", "hv2")
	r, _ := newTestRunner(t, time.Second, f)
	ctx := context.Background()
	long := strings.Repeat("é", 1000)
	var early *Snapshot
	for i := range 3 * HistoryLength {
		if i%2 == 1 {
			f.set("hv1", reasonPoolInactive, fmt.Sprintf("down %d %s", i, long))
		} else {
			f.set("hv1", ReasonReady, fmt.Sprintf("up %d", i))
		}
		r.round(ctx)
		if i == 3 {
			early = r.Current()
		}
	}
	h := mustTarget(t, r.Current(), "prov", "hv1").History
	if len(h) != HistoryLength {
		t.Fatalf("history of %d transitions, want %d", len(h), HistoryLength)
	}
	for j, tr := range h {
		i := 3*HistoryLength - HistoryLength + j
		if tr.First || tr.Up != (i%2 == 0) || tr.FromUp == tr.Up || !strings.HasPrefix(tr.Message, fmt.Sprintf("%s %d", map[bool]string{true: "up", false: "down"}[tr.Up], i)) {
			t.Errorf("history[%d] = %+v, want the transition of check %d", j, tr, i)
		}
		if len(tr.Message) > maxHistoryMessage || !strings.HasPrefix(tr.Message, "up") && !strings.HasSuffix(tr.Message, "é...") {
			t.Errorf("history[%d] message of %d bytes, want at most %d cut at a character: %q", j, len(tr.Message), maxHistoryMessage, tr.Message[max(0, len(tr.Message)-8):])
		}
		if j > 0 && tr.At.Before(h[j-1].At) {
			t.Errorf("history[%d] at %s is before history[%d] at %s", j, tr.At, j-1, h[j-1].At)
		}
	}
	if eh := mustTarget(t, early, "prov", "hv1").History; len(eh) != 4 || !eh[0].First || !strings.HasPrefix(eh[3].Message, "down 3") {
		t.Errorf("the history of an earlier snapshot changed: %+v", eh)
	}
	if h2 := mustTarget(t, r.Current(), "prov", "hv2").History; len(h2) != 1 || !h2[0].First {
		t.Errorf("a steady target's history: %+v, want its first verdict only", h2)
	}

	// hv1 leaves the checker's list and comes back: a new history.
	f.mu.Lock()
	f.targets = []string{"hv2"}
	f.mu.Unlock()
	r.round(ctx)
	f.mu.Lock()
	f.targets = []string{"hv1", "hv2"}
	f.mu.Unlock()
	r.round(ctx)
	if h := mustTarget(t, r.Current(), "prov", "hv1").History; len(h) != 1 || !h[0].First {
		t.Errorf("a target listed again: history %+v, want a new one", h)
	}

	// The provider is removed by a reload and added again: a new history.
	r.SetCheckers(nil)
	r.SetCheckers([]Checker{f})
	r.round(ctx)
	if h := mustTarget(t, r.Current(), "prov", "hv2").History; len(h) != 1 || !h[0].First {
		t.Errorf("a provider added again: history %+v, want a new one", h)
	}
}
