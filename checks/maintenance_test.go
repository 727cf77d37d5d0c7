package checks

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestOperatorMaintenance: the maintenance label (a provider's, or a target's over it) puts a
// target in Maintenance at the next round, whatever its check reads and whatever the thresholds
// (failureThreshold 3, successThreshold 2 here), keeping what the check found in the message;
// those rounds count as no failed check. A target's "false" wins over its provider's "true".
// When the label goes (a reload) or its end time passes, the check's own verdict is published at
// once, its run counted from that check. A round that did not start the target publishes the
// maintenance too; one that did not start it when its maintenance ended leaves it without a
// verdict until its next check.
func TestOperatorMaintenance(t *testing.T) {
	f := newFake("prov", typeKVM, "hv1", "hv2", "hv3")
	r, rec := newTestRunner(t, time.Second)
	th := Thresholds{Failure: 3, Success: 2}
	set := func(l Labels) { r.SetProviders([]Provider{{Checker: f, Thresholds: th, Labels: l}}) }
	set(Labels{})
	ctx := context.Background()
	r.round(ctx)
	r.round(ctx) // successThreshold 2: every target Ready
	for _, n := range []string{"hv1", "hv2", "hv3"} {
		if ts := mustTarget(t, r.Current(), "prov", n); !ts.Up {
			t.Fatalf("%s: %+v, want Ready before any maintenance", n, ts)
		}
	}
	rec.take()

	// The provider in maintenance, hv3 exempt; hv1's host is being rebooted (its checks fail).
	set(Labels{Provider: map[string]string{"maintenance": "true"}, Targets: map[string]map[string]string{"hv3": {"maintenance": "false"}}})
	f.set("hv1", reasonTCPUnreachable, "connection refused")
	r.round(ctx)
	s := r.Current()
	hv1 := mustTarget(t, s, "prov", "hv1")
	if hv1.Up || hv1.Reason != ReasonMaintenance || hv1.ConsecutiveFailures != 0 || hv1.FailedChecks != 0 {
		t.Errorf("hv1 at the first round in maintenance: up %v %s, %d failures in a row, %d failed checks; want Maintenance at once, no failure counted",
			hv1.Up, hv1.Reason, hv1.ConsecutiveFailures, hv1.FailedChecks)
	}
	if want := "in maintenance (label maintenance=true): counted neither up nor down; the last check: TCPUnreachable: connection refused"; hv1.Message != want {
		t.Errorf("hv1's message %q, want %q", hv1.Message, want)
	}
	if hv2 := mustTarget(t, s, "prov", "hv2"); hv2.Reason != ReasonMaintenance || !strings.Contains(hv2.Message, "the last check: Ready") {
		t.Errorf("hv2: %s %q, want Maintenance with its Ready check in the message", hv2.Reason, hv2.Message)
	}
	if hv3 := mustTarget(t, s, "prov", "hv3"); !hv3.Up || hv3.Reason != ReasonReady {
		t.Errorf("hv3 (maintenance=false over its provider's true): %s, want Ready", hv3.Reason)
	}
	var logged []string
	for _, l := range rec.take() {
		logged = append(logged, l.msg+" "+l.attrs["target"])
	}
	if got := strings.Join(logged, "; "); got != "target is in maintenance hv1; target is in maintenance hv2" {
		t.Errorf("logged %q, want one info record per target entering maintenance", got)
	}

	// A round that did not start hv2 still publishes its maintenance.
	f.setResult(notStarted("hv2"))
	r.round(ctx)
	if hv2 := mustTarget(t, r.Current(), "prov", "hv2"); hv2.Reason != ReasonMaintenance {
		t.Errorf("hv2 not started in maintenance: %s, want Maintenance", hv2.Reason)
	}
	f.set("hv2", ReasonReady, "")

	// The label gone (a reload): hv1's own verdict at once, though failureThreshold is 3;
	// hv2's Ready at once, though successThreshold is 2.
	set(Labels{})
	r.round(ctx)
	s = r.Current()
	if hv1 := mustTarget(t, s, "prov", "hv1"); hv1.Up || hv1.Reason != reasonTCPUnreachable || hv1.ConsecutiveFailures != 1 || hv1.Message != "connection refused" {
		t.Errorf("hv1 after the maintenance: %s %q, %d failures in a row; want TCPUnreachable at once, counted from 1", hv1.Reason, hv1.Message, hv1.ConsecutiveFailures)
	}
	if hv2 := mustTarget(t, s, "prov", "hv2"); !hv2.Up || hv2.ConsecutiveSuccesses != 1 {
		t.Errorf("hv2 after the maintenance: %s, %d successes; want Ready at once", hv2.Reason, hv2.ConsecutiveSuccesses)
	}

	// The maintenance ends in a round that does not start hv2: no check has said what it is
	// since, so it has no verdict (unchecked, not Maintenance); its next check, failing, is
	// published at once though failureThreshold is 3, and its history goes on.
	set(Labels{Targets: map[string]map[string]string{"hv2": {"maintenance": "true"}}})
	r.round(ctx)
	if hv2 := mustTarget(t, r.Current(), "prov", "hv2"); hv2.Reason != ReasonMaintenance {
		t.Fatalf("hv2 in maintenance again: %s", hv2.Reason)
	}
	before := len(mustTarget(t, r.Current(), "prov", "hv2").History)
	set(Labels{})
	f.setResult(notStarted("hv2"))
	r.round(ctx)
	s = r.Current()
	if ts := s.Provider("prov").Target("hv2"); ts != nil {
		t.Errorf("hv2, out of maintenance in a round that did not start it: published %s %q, want no verdict", ts.Reason, ts.Message)
	}
	var u *UncheckedTarget
	for i, c := range s.Provider("prov").Unchecked {
		if c.Target == "hv2" {
			u = &s.Provider("prov").Unchecked[i]
		}
	}
	if u == nil || !strings.HasPrefix(u.Message, "out of maintenance, not checked since: not started") {
		t.Errorf("hv2, out of maintenance, not checked since: unchecked %+v, want it listed as such", u)
	}
	f.set("hv2", reasonTCPUnreachable, "connection refused")
	r.round(ctx)
	hv2 := mustTarget(t, r.Current(), "prov", "hv2")
	if hv2.Up || hv2.Reason != reasonTCPUnreachable || hv2.ConsecutiveFailures != 1 {
		t.Errorf("hv2's first check after its maintenance: %s, %d failures; want TCPUnreachable at once, counted from 1", hv2.Reason, hv2.ConsecutiveFailures)
	}
	if n := len(hv2.History); n != before+1 || hv2.History[n-1].FromReason != ReasonMaintenance {
		t.Errorf("hv2's history after its maintenance: %+v, want the %d transitions before and one from Maintenance", hv2.History, before)
	}
	f.set("hv2", ReasonReady, "")
	r.round(ctx)
	r.round(ctx)

	// An end time: in maintenance until it passes, then the check's verdict at the next round.
	f.set("hv1", ReasonReady, "")
	until := time.Now().Add(300 * time.Millisecond)
	set(Labels{Targets: map[string]map[string]string{"hv1": {"maintenance": until.UTC().Format(time.RFC3339Nano)}}})
	r.round(ctx)
	hv1 = mustTarget(t, r.Current(), "prov", "hv1")
	if hv1.Reason != ReasonMaintenance || !strings.Contains(hv1.Message, "label maintenance until ") {
		t.Errorf("hv1 before its end time: %s %q, want Maintenance naming the end time", hv1.Reason, hv1.Message)
	}
	time.Sleep(time.Until(until))
	r.round(ctx)
	if hv1 := mustTarget(t, r.Current(), "prov", "hv1"); !hv1.Up {
		t.Errorf("hv1 after its end time: %s, want Ready", hv1.Reason)
	}
}
