package exporter

import (
	"context"
	"fmt"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// DefaultProbeMinInterval is --web.probe-min-interval's default: how long the answer of an
// on-demand check serves the probes of its target that follow it.
const DefaultProbeMinInterval = time.Second

// probeKey names what one on-demand check answers: one target of one checker. A reload's new
// checker of a provider is another key, so an answer never outlives the configuration that
// produced it, and a probe of one target never gets another target's verdict (a kvm provider's
// hosts are checked apart; an API provider has one target, so its key is the provider).
type probeKey struct {
	c      checks.Checker
	target string
}

// probeFlight is one on-demand check of a target, shared by every probe of the target that
// arrives while it runs (and, once it answered, for --web.probe-min-interval after its end).
//
// x/sync/singleflight shares a call the same way but can neither drop a call whose callers
// all left while it still waits for a place (it has contacted nothing) nor tell a caller
// whether the check had started when the caller's deadline came, which decides between a
// Timeout verdict and a 503; so the few lines of sharing live here.
type probeFlight struct {
	// done is closed once res, err and finished are set.
	done     chan struct{}
	res      checks.TargetResult
	err      error
	finished time.Time
	// trace records the check's stages for every caller (a nil trace would cost as much as
	// a debug caller joining late and finding none).
	trace *checks.Trace
	// started is when the flight began (its wait for a place included).
	started time.Time
	// cancel drops the flight while it waits for a place and no caller is left.
	cancel context.CancelFunc

	// Guarded by probeHandler.mu.
	callers int
	// checkStart is when the check itself began, after the wait for a place; zero while
	// waiting.
	checkStart time.Time
	// queued: every place was taken when the flight came, and it waited for one.
	queued bool
}

// probeAnswer is what one probe answers: the shared check's result and trace, and how this
// probe came by it (for the debug trace).
type probeAnswer struct {
	res   checks.TargetResult
	err   error
	trace *checks.Trace
	how   string
}

// probeCap is the longest a probe (and so the shared check) may take: the round timeout, or
// the derived default when checks are off, and its name for messages.
func (e *Exporter) probeCap() (time.Duration, string) {
	if e.timeout > 0 {
		return e.timeout, "--provider-check-timeout"
	}
	return MaxDerivedTimeout, "the default round timeout (checks are off)"
}

// probe answers one probe of target within ctx: the answer of the target's last check when it
// finished less than --web.probe-min-interval ago, else the check in flight, joined, else a new
// check. The check runs on its own, under the longest deadline a probe may have (probeCap), so
// that a caller's short deadline never cuts it short for the others; a caller whose deadline
// comes first answers without it (see abandon).
func (h *probeHandler) probe(ctx context.Context, c checks.Checker, p checks.TargetProber, target string) probeAnswer {
	key := probeKey{c, target}
	start := time.Now()
	h.mu.Lock()
	if f := h.answers[key]; f != nil {
		if age := start.Sub(f.finished); age < h.e.ProbeMinInterval {
			h.mu.Unlock()
			return probeAnswer{res: f.res, trace: f.trace, how: fmt.Sprintf(
				"the answer of a check that ended %s before this probe (one check per --web.probe-min-interval %s)",
				age.Round(time.Millisecond), h.e.ProbeMinInterval)}
		}
		delete(h.answers, key)
	}
	how := "a check of its own"
	f := h.flights[key]
	if f == nil {
		f = h.fly(key, p)
	} else {
		how = fmt.Sprintf("the check in flight, started %s before this probe, shared with the probes of the target meanwhile",
			start.Sub(f.started).Round(time.Millisecond))
	}
	f.callers++
	h.mu.Unlock()

	select {
	case <-f.done:
		return probeAnswer{res: f.res, err: f.err, trace: f.trace, how: how}
	case <-ctx.Done():
	}
	return h.abandon(key, f, start, how)
}

// abandon answers a probe whose deadline came before the shared check's answer, and drops the
// check when it still waits for a place and nobody else waits for it. The probe answers
//   - the check's answer, when it came meanwhile;
//   - a 503 error when the check had not started (every place was taken until the deadline),
//     or waited for a place and started after this probe did (the time queued is not the
//     target's to lose);
//   - else a Timeout verdict: the check has run this probe's whole deadline without an answer,
//     which is the target's.
func (h *probeHandler) abandon(key probeKey, f *probeFlight, start time.Time, how string) probeAnswer {
	h.mu.Lock()
	checkStart, queued := f.checkStart, f.queued
	if f.callers--; f.callers == 0 && checkStart.IsZero() {
		f.cancel()
		if h.flights[key] == f {
			delete(h.flights, key)
		}
	}
	h.mu.Unlock()
	select {
	case <-f.done:
		return probeAnswer{res: f.res, err: f.err, trace: f.trace, how: how}
	default:
	}
	a := probeAnswer{trace: f.trace, how: how}
	limit := h.placesOf(key.c)
	switch {
	case checkStart.IsZero():
		a.err = &errProbeWait{fmt.Sprintf("%d probes of provider %q were still running at the deadline (at most %d at once)",
			limit, key.c.Name(), limit)}
	case queued && checkStart.After(start):
		a.err = &errProbeWait{fmt.Sprintf("the check ran out the probe's deadline after waiting %s for a place among the probes of provider %q in flight (at most %d at once): the verdict would not be the target's",
			checkStart.Sub(start).Round(time.Millisecond), key.c.Name(), limit)}
	default:
		a.res = checks.TargetResult{Target: key.target, Reason: checks.ReasonTimeout, Message: fmt.Sprintf(
			"no answer within the probe's deadline: the check, started %s before it ended, is still running (its stages: debug=true)",
			time.Since(checkStart).Round(time.Millisecond))}
	}
	return a
}

// fly starts the shared check of key; h.mu is held. Its answer is kept for
// --web.probe-min-interval when it is a verdict (an error made no verdict to share).
func (h *probeHandler) fly(key probeKey, p checks.TargetProber) *probeFlight {
	capAt, _ := h.e.probeCap()
	ctx, cancel := context.WithTimeout(context.Background(), capAt)
	f := &probeFlight{done: make(chan struct{}), trace: checks.NewTrace(), started: time.Now(), cancel: cancel}
	h.flights[key] = f
	go func() {
		defer cancel()
		res, err := h.run(ctx, f, key.c, p, key.target)
		if err == nil && !checks.ValidReason(key.c.Type(), res.Reason) {
			res.Message = fmt.Sprintf("check reported reason %q, which is not in the %s catalogue (a bug in the checker): %s", res.Reason, key.c.Type(), res.Message)
			res.Reason = checks.ReasonTimeout
		}
		res.Up = res.Reason == checks.ReasonReady
		now := time.Now()
		h.mu.Lock()
		f.res, f.err, f.finished = res, err, now
		if h.flights[key] == f {
			delete(h.flights, key)
		}
		if minInterval := h.e.ProbeMinInterval; err == nil && minInterval > 0 {
			// Forget the answers past their interval, so the map holds at most the targets
			// probed within the last interval.
			for k, old := range h.answers {
				if now.Sub(old.finished) >= minInterval {
					delete(h.answers, k)
				}
			}
			h.answers[key] = f
		}
		h.mu.Unlock()
		close(f.done)
	}()
	return f
}
