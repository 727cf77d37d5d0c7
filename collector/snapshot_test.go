package collector

import (
	"fmt"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// bigSnapshot builds a snapshot of n targets shaped like a large fleet: KVM providers of up to
// 1,000 hosts each (every tenth host down, the others with their storage pool), which is the
// exporter's most expensive case per target (eight series each).
func bigSnapshot(n int) *checks.Snapshot {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	s := &checks.Snapshot{Round: 42, RoundStarted: now, RoundDuration: 1500 * time.Millisecond, AbandonedTotal: 3}
	for p := 0; n > 0; p++ {
		ps := checks.ProviderState{Name: fmt.Sprintf("kvm-%02d", p), Type: "kvm"}
		for h := 0; h < 1000 && n > 0; h, n = h+1, n-1 {
			ts := checks.TargetState{Since: now.Add(-time.Hour), TargetResult: checks.TargetResult{
				Target:    fmt.Sprintf("hv-%02d-%04d.example.internal", p, h),
				Up:        true,
				Reason:    checks.ReasonReady,
				Duration:  time.Duration(h+1) * time.Millisecond,
				CheckedAt: now.Add(time.Duration(h) * time.Microsecond),
			}}
			if h%10 == 9 {
				ts.Up, ts.Reason, ts.Message = false, kvm.ReasonTCPUnreachable, "dial tcp: connection refused"
			} else {
				ts.Samples = kvm.PoolSamples("default", 1<<40, uint64(h)<<30, 1<<40-uint64(h)<<30)
			}
			ps.Targets = append(ps.Targets, ts)
		}
		s.Providers = append(s.Providers, ps)
	}
	return s
}
