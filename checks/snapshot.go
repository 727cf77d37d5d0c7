package checks

import "time"

// Snapshot is the state of every provider after a round of checks. A published Snapshot is
// immutable: the runner builds a new one for every change and swaps it in atomically, so readers
// (a scrape, the ProviderHealth writer, the status page) never lock and never see a half-done
// round. Readers must not modify it either.
type Snapshot struct {
	// Round counts the rounds completed so far (0 before the first).
	Round uint64
	// RoundStarted is when the last completed round started (zero before the first).
	RoundStarted time.Time
	// RoundDuration is how long the last completed round took.
	RoundDuration time.Duration
	// AbandonedTotal counts checkers abandoned at a round's deadline, cumulatively.
	AbandonedTotal uint64
	// Providers lists every configured provider, in the providers file's order.
	Providers []ProviderState
}

// ProviderState is one provider in a Snapshot.
type ProviderState struct {
	Name string
	Type ProviderType
	// Targets lists the targets checked at least once, in the order of the checker's Targets().
	// A provider that has not been checked yet (just started or just added by a reload) has none.
	Targets []TargetState
}

// TargetState is the last verdict on one target and since when it holds.
type TargetState struct {
	TargetResult
	// Since is when Up last flipped (the Kubernetes meaning of lastTransitionTime): the
	// CheckedAt of the check that observed the flip, initially the first check's. A change of
	// reason while the target stays down does not move it. The status page, the logs and the
	// ProviderHealth objects all read this one time.
	Since time.Time
}

// Ready counts the provider's targets that are up.
func (p *ProviderState) Ready() int {
	n := 0
	for i := range p.Targets {
		if p.Targets[i].Up {
			n++
		}
	}
	return n
}
