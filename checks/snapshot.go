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
	// Thresholds are the provider's failureThreshold and successThreshold, as configured now.
	Thresholds Thresholds
	// Labels are the provider's and its targets' labels, as configured now (Labels.Of); shared
	// between snapshots, never modified.
	Labels Labels
	// Targets lists the targets that have a verdict, in the order of the checker's Targets().
	// A target has one once its checks have met a threshold (see Thresholds): with the default
	// thresholds, from its first check that contacted it. A provider none of whose targets has a
	// verdict yet (just started, or just added by a reload) has none.
	Targets []TargetState
	// Unchecked lists the provider's other targets, in the same order: those without a verdict
	// yet. A target is listed either here or in Targets, never both. Such a target is neither up
	// nor down: it has no target_up series, no sample in the availability rules, and the
	// ProviderHealth object and the status page show it as not checked yet.
	Unchecked []UncheckedTarget
}

// UncheckedTarget is a target without a verdict yet: no round has started its check since it
// was listed (the provider's concurrency slots or the round's deadline ran out before its
// turn), or its first checks have not met a threshold yet.
type UncheckedTarget struct {
	Target string
	// Listed is when the runner first listed the target: when the runner was given its provider
	// (the start, or the reload that added it), or the round whose checker first listed it.
	Listed time.Time
	// Message says why there is no verdict: the note of the last round that did not start the
	// target ("not started: ..."), or the first checks' count and the last check's reason.
	Message string
	// CheckedAt is when the last check that contacted the target completed: zero while none
	// has.
	CheckedAt time.Time
	// CheckReason is the last such check's reason ("" while none has).
	CheckReason Reason
	// ConsecutiveFailures and ConsecutiveSuccesses count the first checks, as TargetState's.
	ConsecutiveFailures  int
	ConsecutiveSuccesses int
	// Checks and FailedChecks count the target's checks, as TargetState's.
	Checks       uint64
	FailedChecks uint64
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
	// CheckedAt of the check that observed the flip, initially that of the check that gave the
	// target its first verdict (met a threshold; see Thresholds). A change of
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
	// Checks counts the target's checks since the runner listed it (this process's start, or
	// the reload that added it): every round that started the check of the target, and every
	// round that found an earlier call to it still outstanding (a continuing Timeout). Rounds
	// that did not start it (NotStarted) are not checks. FailedChecks counts those whose own
	// result was not Ready, whatever the thresholds published.
	Checks       uint64
	FailedChecks uint64
	// History is the target's last transitions (those the runner logs), oldest first, at most
	// HistoryLength. It is kept in memory only: a restart starts a new history. Snapshots share
	// it: never modify it.
	History []Transition
	// Recent is the target's last RecentLength checks, oldest first, as the checks themselves
	// read them (before the thresholds), with the rounds that did not contact it: the status
	// page's strip. In memory only, like History; snapshots share it: never modify it.
	Recent []RecentCheck
}

// RecentLength is how many checks the runner keeps per target in TargetState.Recent.
const RecentLength = 30

// RecentCheck is one round's result for a target: when, and what its check read (Up, Reason),
// or that the round did not contact it (NotContacted: not started, or an earlier call still
// outstanding; Reason is then the round's).
type RecentCheck struct {
	At           time.Time
	Up           bool
	Reason       Reason
	NotContacted bool
}

// appendRecent returns h's last RecentLength-1 checks and c. h is shared with published
// snapshots, whose views are never changed: c goes past the end of every view of the backing
// array while it has room (views are only ever read), and a full array is copied into a new one
// with room for RecentLength more, so a target costs one allocation every RecentLength rounds.
func appendRecent(h []RecentCheck, c RecentCheck) []RecentCheck {
	if len(h) < cap(h) {
		h = append(h, c)
		return h[max(0, len(h)-RecentLength):]
	}
	out := make([]RecentCheck, 0, 2*RecentLength)
	out = append(out, h[max(0, len(h)-(RecentLength-1)):]...)
	return append(out, c)
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
// changing reason while down, or coming back up. When the history is full, the oldest
// transitions go first, except the last one that turned the target down (or its first verdict
// when that was down): reasons that change while a target stays down never push out when it
// went down.
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
