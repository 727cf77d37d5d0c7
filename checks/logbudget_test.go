package checks

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// TestRoundLogsBoundedTransitions: a round in which more targets change than
// MaxTransitionLinesPerRound logs that many transition lines, then one line counting the rest;
// a quiet round after it logs nothing, and the next round has its budget again.
func TestRoundLogsBoundedTransitions(t *testing.T) {
	n := MaxTransitionLinesPerRound + 500
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("t%05d", i)
	}
	a := newFake("a", typeKubernetes, targets[:n/2]...)
	b := newFake("b", typeKubernetes, targets[n/2:]...)
	r, rec := newTestRunner(t, time.Second, a, b)
	ctx := context.Background()

	r.round(ctx)
	got := rec.take()
	if len(got) != MaxTransitionLinesPerRound+1 {
		t.Fatalf("first round of %d targets: %d lines, want %d and one that counts the rest", n, len(got), MaxTransitionLinesPerRound)
	}
	last := got[len(got)-1]
	if last.level != slog.LevelWarn || last.attrs["not_logged"] != fmt.Sprint(n-MaxTransitionLinesPerRound) ||
		last.attrs["logged"] != fmt.Sprint(MaxTransitionLinesPerRound) {
		t.Errorf("the counting line is %s, want a warning with not_logged=%d", last, n-MaxTransitionLinesPerRound)
	}
	for _, l := range got[:len(got)-1] {
		if l.msg != "target is up" {
			t.Fatalf("a transition line %s, want target is up", l)
		}
	}
	// Every target has its verdict all the same.
	if p := r.Current().Provider("b"); p == nil || len(p.Targets) != n-n/2 {
		t.Fatalf("provider b holds %v targets, want %d", p, n-n/2)
	}

	r.round(ctx)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a round without a change logged %d lines: %v", len(got), got[:min(3, len(got))])
	}

	// A few changes in the next round are all logged, with no counting line.
	for _, tg := range targets[:3] {
		a.set(tg, ReasonAPIError, "500")
	}
	r.round(ctx)
	if got := rec.take(); len(got) != 3 {
		t.Errorf("3 targets went down: %d lines, want 3: %v", len(got), got)
	}
}
