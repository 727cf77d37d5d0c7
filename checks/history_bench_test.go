package checks

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// BenchmarkHistoryHeap1000Targets measures the memory the transition history holds at its worst:
// 1,000 targets that each flipped more than HistoryLength times, every down transition with a
// 200-byte message, against the same runner after one round (one transition each). history-KiB
// is what the full histories add, after GC.
func BenchmarkHistoryHeap1000Targets(b *testing.B) {
	targets := benchTargets(1000)
	msg := strings.Repeat("m", 200)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for b.Loop() {
		f := newFake("kvm", typeKVM, targets...)
		r := NewRunner(Options{Interval: time.Hour, Timeout: time.Second}, []Checker{f})
		r.round(context.Background())
		before := heap()
		for round := 1; round <= HistoryLength+2; round++ {
			for _, t := range targets {
				if round%2 == 1 {
					f.set(t, reasonPoolInactive, fmt.Sprintf("%s %d", msg, round))
				} else {
					f.set(t, ReasonReady, "")
				}
			}
			r.round(context.Background())
		}
		after := heap()
		if got := len(r.Current().Providers[0].Targets[0].History); got != HistoryLength {
			b.Fatalf("history of %d, want %d", got, HistoryLength)
		}
		b.ReportMetric(float64(after-before)/1024, "history-KiB")
		runtime.KeepAlive(r)
	}
}

// benchTargets names n targets hv-0000, hv-0001, ...
func benchTargets(n int) []string {
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("hv-%04d", i)
	}
	return targets
}
