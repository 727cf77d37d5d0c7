package checks

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkRound1000Targets is one round of the runner over 1,000 steady targets (a fake
// checker answering at once), after enough rounds that every target's memory is full (its
// strip of recent checks, RecentLength): what a round costs the runner itself, per round.
func BenchmarkRound1000Targets(b *testing.B) {
	const n = 1000
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("hv-%04d", i)
	}
	f := newFake("kvm", TypeKVM, targets...)
	r := NewRunner(Options{Interval: time.Hour, Timeout: time.Second}, []Checker{f})
	ctx := context.Background()
	for range 2 * 30 {
		r.round(ctx)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.round(ctx)
	}
}
