package checks

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// Options configures a Runner.
type Options struct {
	// Interval between the starts of two rounds; > 0.
	Interval time.Duration
	// Timeout is the one deadline of each round: > 0 and <= Interval.
	Timeout time.Duration
	// Logger receives the transition logs; nil discards them.
	Logger *slog.Logger
	// BeforeRound, when set, is called before each round starts, outside the runner's locks:
	// it may call SetProviders, whose set the round then checks (the exporter reads the host
	// files that changed).
	BeforeRound func()
}

// Runner checks every provider once per interval and publishes the verdicts as a Snapshot.
//
// Each round runs every checker concurrently under one context whose deadline is the round's
// timeout. A checker must return promptly once that context is done; the runner waits a short
// grace period after the deadline (see graceAfter) so that a checker which does return in time
// keeps its own verdicts, e.g. the targets it did manage to check. A checker that has not returned
// by then is abandoned: its targets read Timeout, its late result is discarded, and it is not
// called again until that late call has returned (so a checker that ignores its context never
// piles up goroutines).
type Runner struct {
	interval time.Duration
	timeout  time.Duration
	before   func()
	grace    time.Duration
	logger   *slog.Logger
	running  atomic.Bool

	// mu guards everything below up to current, and serialises publishing so that snapshots
	// are stored in the order they were built.
	mu             sync.Mutex
	slots          []*slot
	memory         map[string]*providerMemory
	rounds         uint64
	roundStarted   time.Time
	roundDuration  time.Duration
	abandonedTotal uint64
	// owns is the ownership of a sharded replica (SetOwnership); nil owns every target.
	owns Ownership
	// carry gives the state of a target taken over from another replica (SetCarrier).
	carry Carrier

	current atomic.Pointer[Snapshot]

	subsMu sync.Mutex
	subs   map[chan struct{}]struct{}

	firstRound     chan struct{}
	firstRoundOnce sync.Once

	// soon asks Run for a round as soon as the current one ends (RunSoon).
	soon chan struct{}
}

// slot is one configured checker.
type slot struct {
	c    Checker
	name string
	typ  ProviderType
	// th are the provider's thresholds and labels their labels; guarded by Runner.mu.
	th     Thresholds
	labels Labels
	// targets is the checker's Targets() as of the last round (or of SetCheckers); guarded by
	// Runner.mu.
	targets []string
	// removed is set (under Runner.mu) when a reload dropped or replaced this checker, so that
	// the result of a round already running for it is discarded.
	removed bool
	// busy is true while a Check call is running, including one abandoned at a deadline.
	busy atomic.Bool
}

// providerMemory is what the runner remembers of a provider between rounds.
type providerMemory struct {
	typ     ProviderType
	targets map[string]*targetMemory
	// bugs holds the checker misbehaviours seen in the last round, so each is logged once when
	// it starts rather than every round.
	bugs map[string]bool
}

// NewRunner returns a Runner for checkers, with the DefaultThresholds (SetProviders sets
// others). It publishes at once a snapshot listing every provider without targets (round 0).
// Provider names must be unique; a duplicate is logged and ignored.
func NewRunner(opts Options, checkers []Checker) *Runner {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{
		interval:   opts.Interval,
		timeout:    opts.Timeout,
		grace:      graceAfter(opts.Timeout),
		logger:     logger,
		memory:     make(map[string]*providerMemory),
		subs:       make(map[chan struct{}]struct{}),
		firstRound: make(chan struct{}),
		soon:       make(chan struct{}, 1),
		before:     opts.BeforeRound,
	}
	r.SetCheckers(checkers)
	return r
}

// graceAfter is how long after the deadline the runner still accepts a checker's result: long
// enough for a checker that watches its context to notice and return (goroutine scheduling on
// a busy machine takes milliseconds), short enough that a round ends well within a second of its
// deadline.
func graceAfter(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 50*time.Millisecond), 500*time.Millisecond)
}

// Run runs the first round at once, then one every Interval, and one more as soon as possible
// after each RunSoon, until ctx is done; rounds never overlap (a round that outlives the
// interval delays the next tick, it is not run twice). Returns when ctx is done. A round cut
// short by ctx is discarded, not published. Run may be called only once.
func (r *Runner) Run(ctx context.Context) {
	if r.interval <= 0 || r.timeout <= 0 || r.timeout > r.interval {
		panic(fmt.Sprintf("checks: invalid runner options: interval %s, timeout %s (want 0 < timeout <= interval)", r.interval, r.timeout))
	}
	if !r.running.CompareAndSwap(false, true) {
		panic("checks: Runner.Run called twice")
	}
	ticker := time.NewTicker(r.interval)
	defer ticker.Stop()
	for {
		r.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-r.soon:
		}
	}
}

// RunSoon asks for a round now, or as soon as the running one ends, outside the schedule; the
// ticks go on as before. Calls while one is pending make one round. A sharded replica calls it
// when it gains targets, so that it reports them at once rather than an interval later.
func (r *Runner) RunSoon() {
	select {
	case r.soon <- struct{}{}:
	default:
	}
}

// SetCheckers is SetProviders with the DefaultThresholds for every checker.
func (r *Runner) SetCheckers(cs []Checker) {
	ps := make([]Provider, len(cs))
	for i, c := range cs {
		ps[i] = Provider{Checker: c, Thresholds: DefaultThresholds}
	}
	r.SetProviders(ps)
}

// SetProviders replaces the set for the next round (reload). Providers that keep their name keep
// their targets' state (since-times, last results, consecutive counts, history) unless their
// type changed; removed providers disappear from the snapshot at once (a new snapshot is
// published immediately, with new providers listed without targets). A round already running
// finishes with the old set, but only the results of checkers that are still configured are
// kept. New thresholds apply from the next check on, to the counts already made.
func (r *Runner) SetProviders(ps []Provider) {
	r.mu.Lock()
	defer r.mu.Unlock()

	old := make(map[string]*slot, len(r.slots))
	for _, s := range r.slots {
		old[s.name] = s
	}
	slots := make([]*slot, 0, len(ps))
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		c, th := p.Checker, p.Thresholds.normalized()
		name := c.Name()
		if seen[name] {
			r.logger.Error("duplicate provider name, ignoring the second checker", "provider", name)
			continue
		}
		seen[name] = true
		if o := old[name]; o != nil && sameChecker(o.c, c) {
			// The same checker instance: keep its slot so that a call still running (abandoned)
			// keeps counting as busy.
			delete(old, name)
			o.targets, _ = owned(r.owns, o, c.Targets())
			o.th, o.labels = th, p.Labels
			slots = append(slots, o)
			continue
		}
		s := &slot{c: c, name: name, typ: c.Type(), th: th, labels: p.Labels}
		s.targets, _ = owned(r.owns, s, c.Targets())
		slots = append(slots, s)
	}
	for _, o := range old {
		o.removed = true
	}

	byName := make(map[string]*slot, len(slots))
	for _, s := range slots {
		byName[s.name] = s
	}
	for name, pm := range r.memory {
		s := byName[name]
		if s == nil || s.typ != pm.typ {
			delete(r.memory, name)
			continue
		}
		pm.prune(s.targets)
	}
	now := time.Now()
	for _, s := range slots {
		r.memoryOf(s).list(s.name, s.targets, now, nil)
	}
	r.slots = slots
	r.publishLocked()
}

// memoryOf returns what the runner remembers of s's provider, remembering it from now on.
// r.mu must be held.
func (r *Runner) memoryOf(s *slot) *providerMemory {
	pm := r.memory[s.name]
	if pm == nil {
		pm = &providerMemory{typ: s.typ, targets: make(map[string]*targetMemory)}
		r.memory[s.name] = pm
	}
	return pm
}

// sameChecker reports whether a and b are the same checker, without panicking on checkers whose
// dynamic type is not comparable.
func sameChecker(a, b Checker) (same bool) {
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	// A comparable struct type may still hold an interface field whose value is not.
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Current returns the newest snapshot; never nil (a snapshot without targets before the first
// round). The snapshot must not be modified.
func (r *Runner) Current() *Snapshot { return r.current.Load() }

// Subscribe returns a channel that receives a value after each new snapshot. It is coalescing
// (capacity 1) and never blocks the runner: a slow subscriber sees only the newest snapshot via
// Current(). The channel is closed when ctx ends.
func (r *Runner) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	r.subsMu.Lock()
	r.subs[ch] = struct{}{}
	r.subsMu.Unlock()
	context.AfterFunc(ctx, func() {
		r.subsMu.Lock()
		defer r.subsMu.Unlock()
		delete(r.subs, ch)
		close(ch)
	})
	return ch
}

// FirstRound is closed when the first round has finished (and its snapshot is published).
func (r *Runner) FirstRound() <-chan struct{} { return r.firstRound }

// outcome is how one checker's part of a round ended.
type outcome struct {
	kind    outcomeKind
	results []TargetResult
	at      time.Time // when Check returned
	panic   string
}

type outcomeKind int

const (
	outcomeAbandoned outcomeKind = iota // not returned by the deadline (plus grace)
	outcomeReturned
	outcomeBusy     // not started: an abandoned call of the same checker is still running
	outcomePanicked // Check panicked
)

// round runs one round and publishes its snapshot, unless ctx ended during it.
func (r *Runner) round(ctx context.Context) {
	if r.before != nil {
		r.before()
	}
	// A rotated credential is redacted from this round's messages on.
	RefreshSecrets()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	deadline, _ := rctx.Deadline()

	p := r.plan()
	outcomes, ok := p.check(ctx, rctx, start, deadline.Add(r.grace))
	if !ok {
		// Shutting down: the round is incomplete and is not published.
		return
	}
	r.record(ctx, p, outcomes, start, deadline, time.Now())
}

// roundPlan is what a round checks.
type roundPlan struct {
	slots []*slot
	owns  Ownership
	// all is every checker's targets; targets those this replica owns; call whether the
	// checker is called at all.
	all, targets [][]string
	call         []bool
}

// plan reads the checkers and their targets. Targets are read before the checks start: they
// are what the Timeout verdicts of an abandoned checker stand for. A sharded replica checks
// those it owns (owned).
func (r *Runner) plan() *roundPlan {
	r.mu.Lock()
	p := &roundPlan{slots: slices.Clone(r.slots), owns: r.owns}
	r.mu.Unlock()
	p.targets = make([][]string, len(p.slots))
	p.all = make([][]string, len(p.slots))
	p.call = make([]bool, len(p.slots))
	for i, s := range p.slots {
		p.all[i] = s.c.Targets()
		p.targets[i], p.call[i] = owned(p.owns, s, p.all[i])
	}
	return p
}

// check calls every checker of the plan on its own goroutine, within rctx, and collects their
// outcomes until cutoff (the round's deadline plus grace): a checker not returned by then is
// abandoned. ok is false when ctx ended first.
func (p *roundPlan) check(ctx, rctx context.Context, start, cutoff time.Time) (outcomes []outcome, ok bool) {
	type done struct {
		i int
		o outcome
	}
	// Buffered for every checker, so that a late checker's goroutine can always deliver its
	// result (which nobody reads) and exit.
	ch := make(chan done, len(p.slots))
	outcomes = make([]outcome, len(p.slots))
	pending := 0
	for i, s := range p.slots {
		if !p.call[i] {
			// Another replica owns the provider, or every target of it: nothing to check.
			outcomes[i] = outcome{kind: outcomeReturned, at: start}
			continue
		}
		if !s.busy.CompareAndSwap(false, true) {
			outcomes[i] = outcome{kind: outcomeBusy}
			continue
		}
		pending++
		go func() {
			o := callChecker(rctx, s, p.all[i], p.targets[i])
			// Not busy any more before the result is delivered: a round that starts right
			// after this one must find the checker free.
			s.busy.Store(false)
			ch <- done{i, o}
		}()
	}

	timer := time.NewTimer(time.Until(cutoff))
	defer timer.Stop()
	for pending > 0 {
		select {
		case d := <-ch:
			outcomes[d.i] = d.o
			pending--
		case <-timer.C:
			return outcomes, true
		case <-ctx.Done():
			return nil, false
		}
	}
	return outcomes, true
}

// callChecker calls s's checker on targets (of all) and returns its outcome, a panic caught.
func callChecker(ctx context.Context, s *slot, all, targets []string) outcome {
	o := outcome{kind: outcomeReturned}
	func() {
		defer func() {
			if p := recover(); p != nil {
				o = outcome{kind: outcomePanicked, panic: fmt.Sprintf("%v\n%s", p, debug.Stack())}
			}
		}()
		// Sanitized here, on the checker's goroutine: no lock is held, and the
		// checkers' messages are sanitized in parallel.
		o.results = sanitized(checkOwned(ctx, s.c, all, targets))
	}()
	o.at = time.Now()
	return o
}

// record turns the round's outcomes into verdicts, applies the thresholds and publishes the
// snapshot, unless ctx ended meanwhile.
func (r *Runner) record(ctx context.Context, p *roundPlan, outcomes []outcome, start, deadline, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	budget := newLineBudget(r.logger.Handler(), MaxTransitionLinesPerRound)
	transitions := slog.New(budget)
	defer budget.logDropped(r.logger)
	for i, s := range p.slots {
		if s.removed {
			// Dropped or replaced by a reload while the round ran.
			continue
		}
		targets := p.targets[i]
		if outcomes[i].kind == outcomeReturned {
			// A checker that discovers its targets (vsphere's hosts) lists, once its check
			// returned, what that check found: a new target has its verdict in this round.
			targets, _ = owned(p.owns, s, s.c.Targets())
		}
		s.targets = targets
		if outcomes[i].kind == outcomeAbandoned {
			r.abandonedTotal++
		}
		pm := r.memoryOf(s)
		pm.prune(targets)
		pm.list(s.name, targets, start, r.carry)
		bugs := make(map[string]bool)
		verdicts := r.verdicts(s, targets, outcomes[i], start, deadline, pm.targets, pm.bugs, bugs)
		pm.bugs = bugs
		pm.apply(transitions, s.name, s.th, verdicts, operatorMaintenance(verdicts, s.labels, start))
	}
	r.rounds++
	r.roundStarted = start
	r.roundDuration = end.Sub(start)
	r.publishLocked()
	r.firstRoundOnce.Do(func() { close(r.firstRound) })
}

// verdicts turns one checker's outcome into exactly one valid verdict per expected target, in
// the order of targets, before the thresholds (apply). Checker misbehaviour is logged once when
// it starts (prevBugs holds what the last round saw; bugs collects this round's).
func (r *Runner) verdicts(s *slot, targets []string, o outcome, start, deadline time.Time, prev map[string]*targetMemory, prevBugs, bugs map[string]bool) []TargetResult {
	bug := func(key string, level slog.Level, msg string, args ...any) {
		bugs[key] = true
		if !prevBugs[key] {
			r.logger.Log(context.Background(), level, msg, append([]any{"provider", s.name}, args...)...)
		}
	}
	all := func(tr TargetResult) []TargetResult {
		out := make([]TargetResult, len(targets))
		for i, t := range targets {
			out[i] = tr
			out[i].Target = t
		}
		return out
	}

	switch o.kind {
	case outcomeAbandoned:
		bug("abandoned", slog.LevelWarn, "checker did not return by the round deadline and was abandoned", "timeout", r.timeout)
		return all(TargetResult{
			Reason:    ReasonTimeout,
			Message:   fmt.Sprintf("check did not finish within %s", r.timeout),
			Duration:  r.timeout,
			CheckedAt: deadline,
		})
	case outcomeBusy:
		// Same key as abandoned: it is the same misbehaviour, still going on.
		bug("abandoned", slog.LevelWarn, "checker did not return by the round deadline and was abandoned", "timeout", r.timeout)
		// No check ran this round: the time of the last one stands (see contacted), so that
		// the age of the verdict (time() - the check timestamp) grows while the checker stays
		// stuck.
		return contacted(all(TargetResult{
			Reason:       ReasonTimeout,
			Message:      fmt.Sprintf("check not started: the previous check, abandoned after %s, has still not returned", r.timeout),
			Duration:     r.timeout,
			CheckedAt:    start,
			NotContacted: true,
		}), prev)
	case outcomePanicked:
		bug("panic", slog.LevelError, "checker panicked (a bug in the checker)", "panic", o.panic)
		return all(TargetResult{
			Reason:    ReasonTimeout,
			Message:   "check failed: the checker panicked (a bug in the checker; see the exporter's log)",
			Duration:  o.at.Sub(start),
			CheckedAt: o.at,
		})
	}

	byTarget := make(map[string]int, len(o.results))
	for j, res := range o.results {
		if !slices.Contains(targets, res.Target) {
			bug("unknown\x00"+res.Target, slog.LevelError, "checker returned a verdict for a target it does not list, discarding it (a bug in the checker)", "target", res.Target)
			continue
		}
		if _, dup := byTarget[res.Target]; dup {
			bug("duplicate\x00"+res.Target, slog.LevelError, "checker returned two verdicts for one target, keeping the first (a bug in the checker)", "target", res.Target)
			continue
		}
		byTarget[res.Target] = j
	}

	out := make([]TargetResult, len(targets))
	for i, t := range targets {
		j, ok := byTarget[t]
		if !ok {
			bug("missing\x00"+t, slog.LevelError, "checker returned no verdict for a target (a bug in the checker)", "target", t)
			out[i] = TargetResult{
				Target:    t,
				Reason:    ReasonTimeout,
				Message:   "check returned no verdict for this target (a bug in the checker)",
				Duration:  o.at.Sub(start),
				CheckedAt: o.at,
			}
			continue
		}
		v := o.results[j]
		if v.CheckedAt.IsZero() {
			v.CheckedAt = o.at
		}
		if len(v.Samples) > 0 {
			// A private copy: the snapshot must not share memory the checker may reuse.
			v.Samples = s.ownSamples(t, v.Samples, bug)
		}
		if !ValidReason(s.typ, v.Reason) {
			bug("reason\x00"+t+"\x00"+string(v.Reason), slog.LevelError, "checker reported a reason outside its type's catalogue (a bug in the checker)", "target", t, "reason", string(v.Reason), "type", string(s.typ))
			v.Message = fmt.Sprintf("check reported reason %q, which is not in the %s catalogue (a bug in the checker): %s", v.Reason, s.typ, v.Message)
			v.Reason = ReasonTimeout
		}
		// The reason is the verdict; Up only restates it.
		v.Up = v.Reason == ReasonReady
		if v.NotStarted {
			// Not started: nothing was learned, whatever the reason says.
			v.NotContacted, v.Up = true, false
		}
		out[i] = v
	}
	return contacted(out, prev)
}

// operatorMaintenance turns the verdicts of targets whose labels put them in maintenance at now
// (config.InMaintenance: the operator's maintenance label) into Maintenance, whatever the check
// found, which the message keeps, and returns those targets. A round that did not start such a
// target is not a check, but the maintenance is still in force: its verdict is published.
func operatorMaintenance(verdicts []TargetResult, labels Labels, now time.Time) map[string]bool {
	if len(labels.Provider) == 0 && len(labels.Targets) == 0 {
		return nil
	}
	var held map[string]bool
	for i := range verdicts {
		v := &verdicts[i]
		var in bool
		if *v, in = OperatorMaintenance(*v, labels.Of(v.Target), now); !in {
			continue
		}
		if held == nil {
			held = map[string]bool{}
		}
		held[v.Target] = true
	}
	return held
}

// OperatorMaintenance returns v as Maintenance when labels (a target's, as Labels.Of gives
// them) put it in maintenance at now (config.InMaintenance), with what the check found kept in
// the message, and whether they do; else v as it is. The runner applies it to every round's
// verdicts, /probe to its answer.
func OperatorMaintenance(v TargetResult, labels map[string]string, now time.Time) (TargetResult, bool) {
	in, how := config.InMaintenance(labels, now)
	if !in {
		return v, false
	}
	v.Message = fmt.Sprintf("in maintenance (%s): counted neither up nor down; the last check: %s", how, describeCheck(v))
	v.Reason, v.Up, v.NotStarted = ReasonMaintenance, false, false
	return v, true
}

// contacted gives the verdicts of targets the check did not contact (NotContacted) the time of
// the last check that did, and says it in the message: the check timestamp moves only when a
// target was contacted. A target never contacted keeps the time of the round that tried.
func contacted(out []TargetResult, prev map[string]*targetMemory) []TargetResult {
	for i := range out {
		if !out[i].NotContacted {
			continue
		}
		if m := prev[out[i].Target]; m != nil && !m.state.CheckedAt.IsZero() {
			out[i].CheckedAt = m.state.CheckedAt
			out[i].Message += "; last contacted " + m.state.CheckedAt.UTC().Format(time.RFC3339)
		}
	}
	return out
}

// publishLocked builds a new snapshot from the runner's memory, stores it and notifies the
// subscribers. r.mu must be held.
func (r *Runner) publishLocked() {
	snap := &Snapshot{
		Round:          r.rounds,
		RoundStarted:   r.roundStarted,
		RoundDuration:  r.roundDuration,
		AbandonedTotal: r.abandonedTotal,
		Providers:      make([]ProviderState, len(r.slots)),
	}
	for i, s := range r.slots {
		ps := ProviderState{Name: s.name, Type: s.typ, Thresholds: s.th, Labels: s.labels}
		if pm := r.memory[s.name]; pm != nil {
			for _, t := range s.targets {
				switch m := pm.targets[t]; {
				case m == nil:
				case m.verdict && !m.carried:
					if ps.Targets == nil {
						ps.Targets = make([]TargetState, 0, len(s.targets))
					}
					ps.Targets = append(ps.Targets, m.state)
				default:
					ps.Unchecked = append(ps.Unchecked, m.unchecked(t))
				}
			}
		}
		snap.Providers[i] = ps
	}
	r.current.Store(snap)

	r.subsMu.Lock()
	defer r.subsMu.Unlock()
	for ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default: // a value is already waiting: the subscriber will read the newest snapshot
		}
	}
}

// prune forgets targets the checker no longer lists, their history included.
func (pm *providerMemory) prune(targets []string) {
	if len(pm.targets) == 0 {
		return
	}
	keep := make(map[string]bool, len(targets))
	for _, t := range targets {
		keep[t] = true
	}
	for t := range pm.targets {
		if !keep[t] {
			delete(pm.targets, t)
		}
	}
}

// ownSamples copies the samples a checker reported for target t, dropping (and reporting as a
// bug in the checker) those of a gauge its type does not declare or with the wrong number of
// label values.
func (s *slot) ownSamples(t string, in []Sample, bug func(key string, level slog.Level, msg string, args ...any)) []Sample {
	typ, _ := Lookup(s.typ)
	out := make([]Sample, 0, len(in))
	for _, sm := range in {
		if typ == nil || sm.Gauge == nil || !slices.Contains(typ.Gauges, sm.Gauge) || len(sm.LabelValues) != len(sm.Gauge.Labels) {
			name := "<nil>"
			if sm.Gauge != nil {
				name = sm.Gauge.Name
			}
			bug("sample\x00"+t+"\x00"+name, slog.LevelError, "checker reported a sample of a gauge its type does not declare, or with the wrong labels (a bug in the checker)",
				"target", t, "gauge", name, "type", string(s.typ))
			continue
		}
		sm.LabelValues = slices.Clone(sm.LabelValues)
		out = append(out, sm)
	}
	return out
}
