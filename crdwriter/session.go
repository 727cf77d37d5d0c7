package crdwriter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// maxPendingEvents bounds the Events kept per provider until its object is written: the most
// Events one write of a provider records (the oldest beyond it are dropped and counted).
const maxPendingEvents = 64

// session is one term of writing (the whole of Run without leader election): what the writer
// knows of the objects and the providers, rebuilt from the live objects at each term's start.
type session struct {
	w        *Writer
	recorder record.EventRecorder
	// lease is the term's view of the Lease (nil without leader election); endTerm stops the
	// term's work.
	lease   *leaseView
	endTerm func()
	overdue atomic.Bool // the last renewal is overdue (logged once per episode)

	mu      sync.Mutex // guards mem, pending, round and gcWanted
	mem     map[string]*providerMem
	pending map[string][]targetEvent
	seq     uint64 // numbers pending Events
	round   uint64
	// gcWanted is set when a provider left the snapshot (a reload removed it): its object is
	// garbage now.
	gcWanted bool
	dirty    chan struct{}

	// Owned by the syncing goroutine.
	live map[string]*v1alpha1.ProviderHealth
	// foreign holds the configured providers whose object name is held by an object this
	// instance does not own (a name clash): when it was last seen.
	foreign map[string]time.Time
	// rejected holds the providers whose object the API server refuses (rejections.go).
	rejected map[string]rejection
	// noStatus is when a status write last found no status subresource (zero: it has one).
	noStatus time.Time
	// pruning: the API server was seen dropping status fields this writer sets (reported once).
	pruning bool
	// reread holds the providers whose object changed since the writer last read it (seen in a
	// metadata-only list): read before the next write.
	reread map[string]bool
	// reasonHeld holds the providers whose reason-only change waits for the minimum reason
	// interval: when it may be written.
	reasonHeld map[string]time.Time
	// wrote holds the providers whose object this term has written; otherWriters the other
	// writer IDs seen on them since (write.go: otherWriter).
	wrote        map[string]bool
	otherWriters map[string]bool
	// budgets are the targets' Event budgets (events.go).
	budgets eventBudgets
	// failing holds the providers whose object writes fail for a reason of that object
	// (sync.go: objectFailed), each with its own backoff.
	failing map[string]*objectFailure
}

// lead writes until ctx is done or, with lease set (leader election), until the elector has
// observed another holder of the Lease: from then on it makes no write.
func (w *Writer) lead(ctx context.Context, lease *leaseView) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	s := &session{
		w: w, lease: lease,
		endTerm: func() {
			once.Do(func() {
				w.logger.Warn("another replica holds the lease now; stopped writing ProviderHealth objects",
					"lease", w.opts.LeaseNamespace+"/"+w.opts.LeaseName, "identity", w.opts.Identity)
				cancel()
			})
		},
		mem:        make(map[string]*providerMem),
		pending:    make(map[string][]targetEvent),
		dirty:      make(chan struct{}, 1),
		live:       make(map[string]*v1alpha1.ProviderHealth),
		foreign:    make(map[string]time.Time),
		rejected:   make(map[string]rejection),
		reread:     make(map[string]bool),
		reasonHeld: make(map[string]time.Time),
		failing:    make(map[string]*objectFailure),
		budgets:    make(eventBudgets),

		wrote:        make(map[string]bool),
		otherWriters: make(map[string]bool),
	}
	if lease != nil {
		w.fence.set(s.mayWrite)
		w.fence.bound(lease.fenceAt)
		// Deferred in reverse: the gate closes before the bound goes.
		defer w.fence.bound(nil)
		defer w.fence.set(func() bool { return false })
	}
	recorder, stop := w.newRecorder(ctx, s.allowWrites())
	defer stop()
	s.recorder = recorder
	defer w.metrics.nameClashes.Set(0)
	defer w.metrics.rejected.Set(0)
	defer w.metrics.failing.Set(0)
	w.report.set(Report{Writing: true})
	defer w.report.set(Report{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait: the term's goroutines end with ctx
	if lease != nil {
		wg.Go(func() { s.followLease(ctx) })
	}
	if !s.seed(ctx) {
		return
	}
	wg.Go(func() { s.watch(ctx) })
	s.syncLoop(ctx)
}

// seed lists the objects, deletes this instance's garbage and remembers the rest (their
// transition times above all), retrying until it succeeds or ctx ends.
func (s *session) seed(ctx context.Context) bool {
	for attempt := 0; ; attempt++ {
		// With checks off every object is garbage: its metadata is all there is to read.
		err := s.collectGarbage(ctx, s.w.checksOff == nil)
		if err == nil {
			s.mu.Lock()
			for name, obj := range s.live {
				s.mem[name] = memFromStatus(&obj.Status)
			}
			s.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !errors.Is(err, errCRDMissing) && !errors.Is(err, errNotLeader) {
			s.w.logger.Warn("reading ProviderHealth objects failed; retrying", "err", err, "attempt", attempt+1)
		}
		wait := s.w.backoff(attempt)
		if errors.Is(err, errNotLeader) {
			wait = s.w.opts.RetryPeriod
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// watch folds every new snapshot into memory, and re-evaluates staleness when it is due, without
// ever waiting for the API server.
func (s *session) watch(ctx context.Context) {
	notify := s.w.opts.Source.Subscribe(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.observe()
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0) + 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-notify:
			if !ok {
				return
			}
		case <-timer.C:
		}
	}
}

// observe folds the newest snapshot into memory, pokes the syncer, and returns when a provider
// will turn stale (zero: never).
func (s *session) observe() time.Time {
	snap := s.w.opts.Source.Current()
	now := time.Now()
	staleAfter := s.w.opts.StaleAfter
	var next time.Time
	s.mu.Lock()
	s.round = snap.Round
	for i := range snap.Providers {
		ps := &snap.Providers[i]
		m := s.mem[ps.Name]
		if m == nil {
			m = &providerMem{}
			s.mem[ps.Name] = m
		}
		events := m.observe(ps, snap.Round, now, staleAfter)
		for i := range events {
			s.seq++
			events[i].seq = s.seq
		}
		if len(events) > 0 {
			q := append(s.pending[ps.Name], events...)
			if drop := len(q) - maxPendingEvents; drop > 0 {
				q = q[drop:]
				s.w.metrics.eventsDropped.WithLabelValues(dropProviderCap).Add(float64(drop))
			}
			s.pending[ps.Name] = q
		}
		if staleAfter > 0 && !m.lastChecked.IsZero() {
			if at := m.lastChecked.Add(staleAfter); at.After(now) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	names := configured(snap)
	for name := range s.mem {
		if !names[name] {
			delete(s.mem, name)
			delete(s.pending, name)
			s.gcWanted = true
		}
	}
	s.mu.Unlock()
	select {
	case s.dirty <- struct{}{}:
	default:
	}
	return next
}

// followLease ends the term once the elector has observed another holder of the Lease, not only
// at the next write, so that the leader metric and the next campaign do not wait for client-go's
// renew deadline.
func (s *session) followLease(ctx context.Context) {
	t := time.NewTicker(max(s.w.opts.RetryPeriod/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !s.lease.isLeader() {
				s.endTerm()
				return
			}
		}
	}
}
