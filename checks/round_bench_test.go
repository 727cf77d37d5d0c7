package checks

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRound1000Targets is one round of the runner over 1,000 steady targets (a fake
// checker answering at once), after enough rounds that every target's memory is full (its
// strip of recent checks, RecentLength): what a round costs the runner itself, per round.
func BenchmarkRound1000Targets(b *testing.B) {
	f := newFake("kvm", typeKVM, benchTargets(1000)...)
	r := NewRunner(Options{Interval: time.Hour, Timeout: time.Second}, []Checker{f})
	ctx := context.Background()
	for range 2 * RecentLength {
		r.round(ctx)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.round(ctx)
	}
}
