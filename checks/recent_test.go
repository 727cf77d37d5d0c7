package checks

import (
	"context"
	"testing"
	"time"
)

// TestRecentChecks: a target's Recent holds its last RecentLength checks as the checks read
// them, whatever the thresholds published (failureThreshold 3 here), rounds that did not start
// it as not contacted, oldest first; a published snapshot's strip never changes afterwards.
func TestRecentChecks(t *testing.T) {
	f := newFake("prov", typeKVM, "hv1")
	r, _ := newTestRunner(t, time.Second)
	r.SetProviders([]Provider{{Checker: f, Thresholds: Thresholds{Failure: 3, Success: 1}}})
	ctx := context.Background()
	r.round(ctx)
	f.set("hv1", reasonTCPUnreachable, "refused")
	r.round(ctx)
	f.setResult(notStarted("hv1"))
	r.round(ctx)
	early := r.Current()
	rec := mustTarget(t, early, "prov", "hv1").Recent
	if len(rec) != 3 || !rec[0].Up || rec[0].Reason != ReasonReady || rec[1].Up || rec[1].Reason != reasonTCPUnreachable || rec[1].NotContacted || !rec[2].NotContacted {
		t.Fatalf("after Ready, TCPUnreachable, not started: %+v", rec)
	}
	if ts := mustTarget(t, early, "prov", "hv1"); !ts.Up {
		t.Fatalf("one failure under failureThreshold 3: %s, want the verdict still up (the strip shows the failure)", ts.Reason)
	}
	if !rec[0].At.Before(rec[1].At) || rec[1].At.After(rec[2].At) {
		t.Errorf("strip times not in order: %+v", rec)
	}
	f.set("hv1", ReasonReady, "")
	for range RecentLength + 5 {
		r.round(ctx)
	}
	all := mustTarget(t, r.Current(), "prov", "hv1").Recent
	if len(all) != RecentLength {
		t.Errorf("%d checks kept, want RecentLength (%d)", len(all), RecentLength)
	}
	for _, c := range all {
		if !c.Up || c.NotContacted {
			t.Errorf("the last %d checks were Ready, the strip holds %+v", RecentLength, c)
		}
	}
	if again := mustTarget(t, early, "prov", "hv1").Recent; len(again) != 3 || again[1].Reason != reasonTCPUnreachable || !again[2].NotContacted {
		t.Errorf("an earlier snapshot's strip changed: %+v", again)
	}
}
