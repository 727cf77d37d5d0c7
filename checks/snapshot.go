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

// TargetState is the published verdict on one target, since when it holds, and what the last
// check itself said.
//
// The embedded TargetResult is the verdict after the provider's thresholds (see Thresholds):
// while fewer than failureThreshold checks in a row have failed, an up target stays up (Up, Reason
// Ready), and while fewer than successThreshold checks in a row have succeeded, a down target
// stays down with the reason of its last failed check. Its Message then says that a change is
// pending and quotes the last check. Duration, CheckedAt, NotContacted and Pool are always the
// last check's.
type TargetState struct {
	TargetResult
	// Since is when Up last flipped (the Kubernetes meaning of lastTransitionTime): the
	// CheckedAt of the check that observed the flip, initially the first check's. A change of
	// reason while the target stays down does not move it. The status page, the logs and the
	// ProviderHealth objects all read this one time.
	Since time.Time
	// CheckReason and CheckMessage are what the last check itself reported, before the
	// thresholds. They differ from Reason and Message only while a change is pending.
	CheckReason  Reason
	CheckMessage string
	// ConsecutiveFailures counts the failed checks in a row up to the last one (0 when it
	// succeeded), ConsecutiveSuccesses the successful ones (0 when it failed).
	ConsecutiveFailures  int
	ConsecutiveSuccesses int
	// Thresholds are the provider's, as of the last check.
	Thresholds Thresholds
	// History is the target's last transitions (those the runner logs), oldest first, at most
	// HistoryLength. It is kept in memory only: a restart starts a new history. Snapshots share
	// it: never modify it.
	History []Transition
}

// FailuresPending reports whether the target reads up although its last checks failed (fewer
// of them than its failureThreshold).
func (t *TargetState) FailuresPending() bool { return t.Up && t.ConsecutiveFailures > 0 }

// RecoveryPending reports whether the target reads down although its last checks succeeded
// (fewer of them than its successThreshold).
func (t *TargetState) RecoveryPending() bool { return !t.Up && t.ConsecutiveSuccesses > 0 }

// HistoryLength is how many transitions the runner keeps per target.
const HistoryLength = 10

// maxHistoryMessage bounds the message kept with a transition, so that the history's memory is
// bounded whatever a checker reports.
const maxHistoryMessage = 256

// Transition is one change of a target's published verdict: its first verdict, going down,
// changing reason while down, or coming back up.
type Transition struct {
	// At is when it happened: the new verdict's Since (for a change of reason while down, the
	// time of the check that observed it).
	At time.Time
	// First marks the target's first verdict; From is then empty.
	First bool
	// FromUp and FromReason are the verdict before.
	FromUp     bool
	FromReason Reason
	// Up, Reason and Message are the verdict after (Message cut to a few hundred bytes).
	Up      bool
	Reason  Reason
	Message string
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
