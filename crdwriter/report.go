package crdwriter

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Problem kinds of ObjectProblem.
const (
	// ProblemFailing: writes of the object fail (a 403 from an admission policy, a 413, a 500,
	// a conflict that persists); retried with a backoff of its own.
	ProblemFailing = "failing"
	// ProblemRejected: the API server rejects the status as invalid (422); tried again when the
	// status changes or after the heartbeat interval.
	ProblemRejected = "rejected"
	// ProblemNameClash: the object of the provider's name is not this deployment's; never
	// written (docs/crd.md).
	ProblemNameClash = "name clash"
)

// ObjectProblem is a provider whose ProviderHealth object the writer cannot write now, for a
// reason of that object; the other providers' objects are written as usual.
type ObjectProblem struct {
	Provider string
	// Problem is ProblemFailing, ProblemRejected or ProblemNameClash.
	Problem string
	// Err is the API server's last answer (empty for a name clash).
	Err string
	// Since is when the problem started (a name clash: when it was last seen).
	Since time.Time
	// Attempts counts the failed writes of a failing object; RetryAt is its next attempt.
	Attempts int
	RetryAt  time.Time
}

// Report is what the status page shows of the writer.
type Report struct {
	// Writing is true while this process writes: it holds the Lease, or runs without leader
	// election.
	Writing bool
	// SyncedRound is the newest round whose every writable object is written (the
	// synced_round metric); 0 before the first.
	SyncedRound uint64
	// Problems are the objects it cannot write now, by provider name.
	Problems []ObjectProblem
}

// report is the Writer's published Report, written by the term's sync loop.
type report struct {
	mu sync.Mutex
	r  Report
}

// Report returns what the writer is doing now; safe to call from any goroutine.
func (w *Writer) Report() Report {
	w.report.mu.Lock()
	defer w.report.mu.Unlock()
	r := w.report.r
	r.Problems = slices.Clone(r.Problems)
	return r
}

// publish makes the term's state the writer's Report. Called by the sync loop, which owns
// failing, rejected and foreign.
func (s *session) publish(synced uint64) {
	r := Report{Writing: true, SyncedRound: synced}
	for name, f := range s.failing {
		r.Problems = append(r.Problems, ObjectProblem{Provider: name, Problem: ProblemFailing, Err: f.err, Since: f.since, Attempts: f.failures, RetryAt: f.retryAt})
	}
	for name, rj := range s.rejected {
		r.Problems = append(r.Problems, ObjectProblem{Provider: name, Problem: ProblemRejected, Err: rj.err, Since: rj.since})
	}
	for name, seen := range s.foreign {
		r.Problems = append(r.Problems, ObjectProblem{Provider: name, Problem: ProblemNameClash, Since: seen})
	}
	slices.SortFunc(r.Problems, func(a, b ObjectProblem) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Problem, b.Problem))
	})
	s.w.report.set(r)
}

func (p *report) set(r Report) {
	p.mu.Lock()
	p.r = r
	p.mu.Unlock()
}
