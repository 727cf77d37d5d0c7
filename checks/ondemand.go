package checks

// On demand: checking one target now, outside the rounds (the exporter's /probe), through a
// checker's TargetProber (declared with the other optional abilities in checks.go), and the
// trace of its stages.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// DefaultProbeLimit is the on-demand probes of one provider that may run at once when its
// checker does not say (ProbeLimiter): the API providers, whose one target is one API call,
// take a few at once (two Prometheus replicas probing the same target, and a person's debug
// probe).
const DefaultProbeLimit = 4

// ProbeLimitOf is c's ProbeLimit, or DefaultProbeLimit.
func ProbeLimitOf(c Checker) int {
	if l, ok := c.(ProbeLimiter); ok && l.ProbeLimit() > 0 {
		return l.ProbeLimit()
	}
	return DefaultProbeLimit
}

var (
	// ErrUnknownTarget is ProbeTarget's error for a target the checker does not list.
	ErrUnknownTarget = errors.New("unknown target")
	// ErrBusy is ProbeTarget's error when another check of the target (a round's, or another
	// user of the same connection) held it until the probe's deadline.
	ErrBusy = errors.New("the target was busy with another check until the deadline")
)

// Trace records the stages of one on-demand check, each with its start, duration and result, so
// that on-call sees where a check hangs. It is safe for concurrent use: a call abandoned at the
// deadline may end its stage after the trace was read. A nil *Trace records nothing and costs
// nothing: the rounds pass nil. Results are error texts and short descriptions, sanitized as
// messages are (Sanitize: no secret, no control character, at most MaxMessageLen bytes).
type Trace struct {
	start time.Time

	mu     sync.Mutex
	stages []*traceStage
}

type traceStage struct {
	name   string
	start  time.Time
	end    time.Time // zero while running
	result string
}

// NewTrace returns a trace whose offsets count from now.
func NewTrace() *Trace { return &Trace{start: time.Now()} }

// noEnd is the end function of a nil trace.
func noEnd(string) {}

// Begin starts a stage; the returned function ends it with its result ("ok", or what went
// wrong). Ending a stage twice keeps the first result. On a nil trace it does nothing.
func (t *Trace) Begin(name string) (end func(result string)) {
	if t == nil {
		return noEnd
	}
	s := &traceStage{name: name, start: time.Now()}
	t.mu.Lock()
	t.stages = append(t.stages, s)
	t.mu.Unlock()
	return func(result string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if s.end.IsZero() {
			s.end, s.result = time.Now(), Sanitize(result)
		}
	}
}

// Stage is one recorded stage of a trace.
type Stage struct {
	Name string
	// Offset is when the stage started, counted from the start of the trace.
	Offset time.Duration
	// Duration is how long it took; for a stage still running, how long it has run so far.
	Duration time.Duration
	// Running is true when the stage had not ended when the trace was read (a call abandoned
	// at the deadline, still waiting for its reply).
	Running bool
	Result  string
}

// Stages returns the stages recorded so far, in the order they started.
func (t *Trace) Stages() []Stage {
	if t == nil {
		return nil
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Stage, len(t.stages))
	for i, s := range t.stages {
		st := Stage{Name: s.name, Offset: s.start.Sub(t.start), Result: s.result}
		if s.end.IsZero() {
			st.Running, st.Duration = true, now.Sub(s.start)
		} else {
			st.Duration = s.end.Sub(s.start)
		}
		out[i] = st
	}
	return out
}

// String renders the stages one a line: offset, duration, name, result.
func (t *Trace) String() string {
	var b strings.Builder
	for _, s := range t.Stages() {
		result := s.Result
		if s.Running {
			result = fmt.Sprintf("NO RESULT: still running after %s (abandoned at the deadline)", s.Duration.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "+%-9s %9s  %-26s %s\n", s.Offset.Round(time.Microsecond*100), s.Duration.Round(time.Microsecond*100), s.Name, result)
	}
	return b.String()
}

// ProbeSingle is ProbeTarget for a checker with exactly one target (kubernetes, gcp): it runs
// the checker's own Check with ctx's deadline, as one stage named what.
func ProbeSingle(ctx context.Context, c Checker, target string, trace *Trace, what string) (TargetResult, error) {
	if ts := c.Targets(); len(ts) != 1 || ts[0] != target {
		return TargetResult{}, ErrUnknownTarget
	}
	end := trace.Begin(what)
	rs := c.Check(ctx)
	if len(rs) != 1 {
		end("no verdict")
		return TargetResult{}, fmt.Errorf("check returned %d verdicts, want 1", len(rs))
	}
	r := rs[0]
	r.Up = r.Reason == ReasonReady
	r.Message = Sanitize(r.Message)
	if r.Up {
		end("ok: " + r.Message)
	} else {
		end(string(r.Reason) + ": " + r.Message)
	}
	return r, nil
}
