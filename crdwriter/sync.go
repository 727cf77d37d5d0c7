package crdwriter

import (
	"context"
	"errors"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// syncLoop writes what memory says whenever it changes, a heartbeat is due or a provider left the
// snapshot; while the API server fails it retries with backoff.
func (s *session) syncLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	var synced uint64
	var retryAt, nextGC time.Time
	if s.w.checksOff != nil {
		// Checks off: every object of ours is garbage, and an old replica may still make some.
		nextGC = time.Now().Add(s.w.opts.HeartbeatInterval)
	}
	gcNeeded := false
	for {
		wake := s.nextHeartbeat()
		if !nextGC.IsZero() && nextGC.Before(wake) {
			wake = nextGC
		}
		if !retryAt.IsZero() {
			wake = retryAt
		}
		timer.Reset(max(time.Until(wake), 0))
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		case <-timer.C:
		}
		s.w.passes.Add(1)
		if !retryAt.IsZero() && time.Now().Before(retryAt) {
			continue // a change while the API server fails waits for the next attempt
		}
		if !nextGC.IsZero() && !time.Now().Before(nextGC) {
			gcNeeded = true
			nextGC = time.Now().Add(s.w.opts.HeartbeatInterval)
		}
		s.mu.Lock()
		round := s.round
		if s.gcWanted {
			gcNeeded, s.gcWanted = true, false
		}
		s.mu.Unlock()
		err := s.syncOnce(ctx, gcNeeded)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			synced = round
		}
		s.publish(synced)
		switch {
		case err == nil:
			if failures > 0 {
				s.w.logger.Info("writing ProviderHealth objects works again")
			}
			failures, gcNeeded, retryAt = 0, false, time.Time{}
			s.w.metrics.syncedRound.Set(float64(round))
			continue
		case errors.Is(err, errNotLeader):
			// The lease's renewal is overdue: try again once client-go has had a chance to
			// renew it (or the term ends).
			retryAt = time.Now().Add(s.w.opts.RetryPeriod)
			continue
		case failures == 0 && !errors.Is(err, errCRDMissing):
			s.w.logger.Warn("writing ProviderHealth objects failed; retrying with backoff", "err", err)
		default:
			s.w.logger.Debug("writing ProviderHealth objects failed again", "err", err)
		}
		retryAt = time.Now().Add(s.w.backoff(failures))
		failures++
	}
}

// nextHeartbeat returns when the next write may be due without a new snapshot: a heartbeat, a
// re-check of a name clash or of a refused object, a held-back reason change, or the retry of an
// object whose writes fail. Each of these times is one the write it stands for is no longer held
// back at, so that the sync loop never wakes for a write it would not make (a busy loop).
func (s *session) nextHeartbeat() time.Time {
	next := time.Now().Add(s.w.opts.HeartbeatInterval)
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, obj := range s.live {
		if m := s.mem[name]; m == nil || m.lastChecked.IsZero() {
			continue // no heartbeat for it (see syncProvider)
		}
		if _, ok := s.rejected[name]; ok || !s.noStatus.IsZero() {
			continue // held back until the rejection's (or the missing subresource's) re-check, below
		}
		if _, ok := s.failing[name]; ok {
			continue // retried with its own backoff, below
		}
		if hb := obj.Status.LastHeartbeatTime; hb != nil {
			if at := hb.Add(s.w.opts.HeartbeatInterval); at.Before(next) {
				next = at
			}
		}
	}
	for _, seen := range s.foreign {
		if at := seen.Add(s.w.opts.HeartbeatInterval); at.Before(next) {
			next = at
		}
	}
	for _, r := range s.rejected {
		if at := r.at.Add(s.w.opts.HeartbeatInterval); at.Before(next) {
			next = at
		}
	}
	if !s.noStatus.IsZero() {
		if at := s.noStatus.Add(s.w.opts.HeartbeatInterval); at.Before(next) {
			next = at
		}
	}
	for _, at := range s.reasonHeld {
		if at.Before(next) {
			next = at
		}
	}
	for _, f := range s.failing {
		if f.retryAt.Before(next) {
			next = f.retryAt
		}
	}
	return next
}

// syncOnce collects garbage when asked, then brings every provider's object up to date. It
// stops at the first failure that is not about one object (the API server is unreachable); a
// failure about one object backs off that object only (objectFailed), and the others are
// written as usual.
func (s *session) syncOnce(ctx context.Context, gc bool) error {
	if gc {
		if err := s.collectGarbage(ctx, false); err != nil {
			return err
		}
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.mem))
	for name := range s.mem {
		names = append(names, name)
	}
	s.mu.Unlock()
	slices.Sort(names)
	now := time.Now()
	for _, name := range names {
		if f, ok := s.failing[name]; ok && now.Before(f.retryAt) {
			continue // its own backoff; its newest status is written at the retry
		}
		err := s.syncProvider(ctx, name)
		switch {
		case err == nil:
			s.objectWritten(name)
		case perObject(err):
			s.objectFailed(name, err)
		default:
			return err
		}
	}
	return nil
}

// objectFailure is a provider whose object the API server keeps refusing to write for a reason
// of that object (perObject): retried with a backoff of its own.
type objectFailure struct {
	failures int
	retryAt  time.Time
	// since is when the first failure of the episode came; err is the newest.
	since time.Time
	err   string
}

// objectFailed backs the provider's object off: logged when its episode starts, counted in the
// failing objects metric while it lasts.
func (s *session) objectFailed(name string, err error) {
	f := s.failing[name]
	if f == nil {
		f = &objectFailure{since: time.Now()}
		s.failing[name] = f
		s.w.metrics.failing.Set(float64(len(s.failing)))
	}
	wait := s.w.backoff(f.failures)
	f.retryAt = time.Now().Add(wait)
	f.failures++
	f.err = checks.Clip(err.Error(), maxInlineMessage)
	if f.failures == 1 {
		s.w.logger.Warn("writing this provider's ProviderHealth object failed; retrying it with backoff, the other providers are written as usual",
			"provider", name, "err", err, "retry_in", wait.Round(time.Millisecond))
	} else {
		s.w.logger.Debug("writing this provider's ProviderHealth object failed again", "provider", name, "err", err, "attempt", f.failures)
	}
}

// objectWritten ends the provider's failure episode, if any.
func (s *session) objectWritten(name string) {
	if _, ok := s.failing[name]; ok {
		delete(s.failing, name)
		s.w.metrics.failing.Set(float64(len(s.failing)))
		s.w.logger.Info("writing this provider's ProviderHealth object works again", "provider", name)
	}
}

// backoff is the wait before retry attempt n (from 0): exponential from 1s, capped, jittered.
func (w *Writer) backoff(n int) time.Duration {
	d := time.Duration(float64(time.Second) * math.Pow(2, float64(min(n, 16))))
	d = min(d, w.opts.MaxRetryBackoff)
	return d - time.Duration(mathrand.Int64N(int64(d)/5+1))
}
