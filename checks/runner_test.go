package checks

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a slog.Handler that keeps every record, so tests can assert on what was logged.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recorder) WithAttrs([]slog.Attr) slog.Handler {
	panic("the runner logs attributes per record")
}
func (h *recorder) WithGroup(string) slog.Handler { panic("the runner logs no groups") }

// logLine is a record reduced to what the tests compare.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l logLine) String() string {
	keys := make([]string, 0, len(l.attrs))
	for k := range l.attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", l.level, l.msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, l.attrs[k])
	}
	return b.String()
}

// take returns the records logged since the last call.
func (h *recorder) take() []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]logLine, 0, len(h.records))
	for _, r := range h.records {
		l := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
		r.Attrs(func(a slog.Attr) bool {
			l.attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, l)
	}
	h.records = nil
	return out
}

// fakeChecker reports what the test scripts: verdicts maps target to reason and message.
type fakeChecker struct {
	name    string
	typ     ProviderType
	targets []string

	mu       sync.Mutex
	verdicts map[string]TargetResult
	calls    int
	// results, when set, replaces the normal answer entirely (to test checker bugs).
	results func() []TargetResult
}

func newFake(name string, typ ProviderType, targets ...string) *fakeChecker {
	f := &fakeChecker{name: name, typ: typ, targets: targets, verdicts: map[string]TargetResult{}}
	for _, t := range targets {
		f.verdicts[t] = TargetResult{Target: t, Up: true, Reason: ReasonReady}
	}
	return f
}

func (f *fakeChecker) Name() string       { return f.name }
func (f *fakeChecker) Type() ProviderType { return f.typ }
func (f *fakeChecker) Targets() []string  { return f.targets }
func (f *fakeChecker) Check(context.Context) []TargetResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.results != nil {
		return f.results()
	}
	out := make([]TargetResult, 0, len(f.targets))
	for _, t := range f.targets {
		v := f.verdicts[t]
		v.Duration = time.Millisecond
		out = append(out, v)
	}
	return out
}

func (f *fakeChecker) set(target string, reason Reason, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verdicts[target] = TargetResult{Target: target, Up: reason == ReasonReady, Reason: reason, Message: msg}
}

func (f *fakeChecker) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// stuckChecker ignores its context: its first Check blocks until release is closed, then returns
// a Ready verdict with the message "late"; later calls answer "fresh" at once.
type stuckChecker struct {
	name     string
	targets  []string
	started  chan struct{} // closed when the first call has started
	release  chan struct{}
	returned chan struct{} // closed when the first call has returned
	calls    atomic.Int32
}

func newStuck(name string, targets ...string) *stuckChecker {
	return &stuckChecker{name: name, targets: targets, started: make(chan struct{}),
		release: make(chan struct{}), returned: make(chan struct{})}
}

func (s *stuckChecker) Name() string       { return s.name }
func (s *stuckChecker) Type() ProviderType { return typeKVM }
func (s *stuckChecker) Targets() []string  { return s.targets }
func (s *stuckChecker) Check(context.Context) []TargetResult {
	msg := "fresh"
	if s.calls.Add(1) == 1 {
		close(s.started)
		<-s.release
		defer close(s.returned)
		msg = "late"
	}
	out := make([]TargetResult, 0, len(s.targets))
	for _, t := range s.targets {
		out = append(out, TargetResult{Target: t, Up: true, Reason: ReasonReady, Message: msg})
	}
	return out
}

func newTestRunner(t *testing.T, timeout time.Duration, cs ...Checker) (*Runner, *recorder) {
	t.Helper()
	rec := &recorder{}
	r := NewRunner(Options{Interval: time.Hour, Timeout: timeout, Logger: slog.New(rec)}, cs)
	return r, rec
}

func mustTarget(t *testing.T, s *Snapshot, provider, target string) TargetState {
	t.Helper()
	p := s.Provider(provider)
	if p == nil {
		t.Fatalf("provider %q missing from snapshot", provider)
	}
	ts := p.Target(target)
	if ts == nil {
		t.Fatalf("target %s/%s missing from snapshot", provider, target)
	}
	return *ts
}

func TestCurrentBeforeFirstRound(t *testing.T) {
	r, _ := newTestRunner(t, 50*time.Millisecond, newFake("a", typeGCP, "p1"), newFake("b", typeKVM, "h1", "h2"))
	s := r.Current()
	if s == nil {
		t.Fatal("Current() is nil before the first round")
	}
	if s.Round != 0 || len(s.Providers) != 2 {
		t.Fatalf("snapshot before the first round: round %d, %d providers; want 0, 2", s.Round, len(s.Providers))
	}
	for _, p := range s.Providers {
		if len(p.Targets) != 0 {
			t.Errorf("provider %s has targets before any check: %v", p.Name, p.Targets)
		}
	}
	if s.Providers[0].Name != "a" || s.Providers[0].Type != typeGCP || s.Providers[1].Name != "b" {
		t.Errorf("providers not in config order: %+v", s.Providers)
	}
	select {
	case <-r.FirstRound():
		t.Fatal("FirstRound closed before any round")
	default:
	}
}

func TestRunFirstRoundAtOnceAndStopsWithContext(t *testing.T) {
	f := newFake("a", typeKubernetes, "api")
	r := NewRunner(Options{Interval: time.Hour, Timeout: time.Minute}, []Checker{f})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	// The interval is an hour: only a first round run at once can close FirstRound.
	<-r.FirstRound()
	s := r.Current()
	if s.Round != 1 {
		t.Errorf("after the first round: Round = %d, want 1", s.Round)
	}
	if got := mustTarget(t, s, "a", "api"); !got.Up || got.Reason != ReasonReady || got.CheckedAt.IsZero() {
		t.Errorf("first round verdict: %+v", got)
	}
	cancel()
	<-done
}

func TestAbandonedCheckerReadsTimeoutAndItsLateResultNeverAppears(t *testing.T) {
	const timeout = 50 * time.Millisecond
	stuck := newStuck("stuck", "h1", "h2")
	good := newFake("good", typeGCP, "proj")
	r, rec := newTestRunner(t, timeout, stuck, good)
	ctx := context.Background()

	r.round(ctx)
	s := r.Current()
	if s.AbandonedTotal != 1 {
		t.Errorf("AbandonedTotal = %d, want 1", s.AbandonedTotal)
	}
	for _, h := range []string{"h1", "h2"} {
		ts := mustTarget(t, s, "stuck", h)
		if ts.Up || ts.Reason != ReasonTimeout || ts.Message != "check did not finish within 50ms" || ts.Duration != timeout {
			t.Errorf("abandoned target %s: %+v", h, ts)
		}
		if ts.CheckedAt.Sub(s.RoundStarted) < timeout {
			t.Errorf("abandoned target %s: CheckedAt %s is before the deadline (round started %s)", h, ts.CheckedAt, s.RoundStarted)
		}
		if !ts.Since.Equal(ts.CheckedAt) {
			t.Errorf("first verdict: Since %s != CheckedAt %s", ts.Since, ts.CheckedAt)
		}
	}
	if ts := mustTarget(t, s, "good", "proj"); !ts.Up {
		t.Errorf("a prompt checker in the same round must keep its verdict: %+v", ts)
	}

	// The first call is still running: the checker is not called again, its targets stay Timeout.
	abandonedAt := mustTarget(t, s, "stuck", "h1").CheckedAt
	r.round(ctx)
	if n := stuck.calls.Load(); n != 1 {
		t.Fatalf("a checker whose abandoned call is still running was called again: %d calls", n)
	}
	s = r.Current()
	if ts := mustTarget(t, s, "stuck", "h1"); ts.Up || ts.Reason != ReasonTimeout || !strings.Contains(ts.Message, "has still not returned") {
		t.Errorf("busy checker's target: %+v", ts)
	}
	// No check completed: the check timestamp stays that of the abandoned call, so the verdict's
	// age grows while the checker is stuck, and the duration reads the timeout.
	if ts := mustTarget(t, s, "stuck", "h1"); !ts.CheckedAt.Equal(abandonedAt) || ts.Duration != timeout {
		t.Errorf("busy checker's target: CheckedAt %s (abandoned at %s), Duration %s (timeout %s)", ts.CheckedAt, abandonedAt, ts.Duration, timeout)
	}
	if s.AbandonedTotal != 1 {
		t.Errorf("a checker that was not called is not abandoned again: AbandonedTotal = %d, want 1", s.AbandonedTotal)
	}

	// Let the abandoned call return its (late) result, and wait until the runner sees it free.
	close(stuck.release)
	<-stuck.returned
	r.mu.Lock()
	sl := r.slots[0]
	r.mu.Unlock()
	for sl.busy.Load() {
		time.Sleep(time.Millisecond)
	}
	for _, p := range r.Current().Providers {
		for _, ts := range p.Targets {
			if ts.Message == "late" {
				t.Fatalf("the late result appeared: %+v", ts)
			}
		}
	}
	r.round(ctx)
	s = r.Current()
	for _, h := range []string{"h1", "h2"} {
		if ts := mustTarget(t, s, "stuck", h); !ts.Up || ts.Message != "fresh" {
			t.Errorf("after the late call returned, the next round's own result counts: %+v", ts)
		}
	}
	if s.Round != 3 {
		t.Errorf("Round = %d, want 3", s.Round)
	}

	// The abandonment is logged once when it starts, not every round.
	n := 0
	for _, l := range rec.take() {
		if strings.Contains(l.msg, "abandoned") {
			n++
			if l.level != slog.LevelWarn || l.attrs["provider"] != "stuck" {
				t.Errorf("abandonment log: %s", l)
			}
		}
	}
	if n != 1 {
		t.Errorf("abandonment logged %d times, want 1", n)
	}
}

// cooperativeChecker watches its context: it returns partial results at the deadline, as a
// checker of many hosts does when one of them hangs.
type cooperativeChecker struct{}

func (cooperativeChecker) Name() string       { return "coop" }
func (cooperativeChecker) Type() ProviderType { return typeKVM }
func (cooperativeChecker) Targets() []string  { return []string{"fast", "hung"} }
func (cooperativeChecker) Check(ctx context.Context) []TargetResult {
	<-ctx.Done()
	return []TargetResult{
		{Target: "fast", Up: true, Reason: ReasonReady},
		{Target: "hung", Reason: ReasonTimeout, Message: "libvirt did not answer"},
	}
}

func TestCheckerReturningAtDeadlineKeepsItsVerdicts(t *testing.T) {
	// A timeout of 2s gives a grace of 500ms: ample for the checker to notice, even on a busy machine.
	r, _ := newTestRunner(t, 2*time.Second, cooperativeChecker{})
	r.round(context.Background())
	s := r.Current()
	if s.AbandonedTotal != 0 {
		t.Errorf("a checker that returns when its context ends is not abandoned: AbandonedTotal = %d", s.AbandonedTotal)
	}
	if ts := mustTarget(t, s, "coop", "fast"); !ts.Up {
		t.Errorf("fast host: %+v", ts)
	}
	if ts := mustTarget(t, s, "coop", "hung"); ts.Up || ts.Message != "libvirt did not answer" {
		t.Errorf("hung host keeps the checker's own message: %+v", ts)
	}
}

// countingChecker records how many of its Check calls run at once, across all instances.
type countingChecker struct {
	name              string
	inflight, maxSeen *atomic.Int32
	hold              time.Duration
	ignoreCtx         bool
}

func (c countingChecker) Name() string       { return c.name }
func (c countingChecker) Type() ProviderType { return typeGCP }
func (c countingChecker) Targets() []string  { return []string{"t"} }
func (c countingChecker) Check(ctx context.Context) []TargetResult {
	n := c.inflight.Add(1)
	defer c.inflight.Add(-1)
	for {
		m := c.maxSeen.Load()
		if n <= m || c.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if c.ignoreCtx {
		time.Sleep(c.hold)
	} else {
		select {
		case <-ctx.Done():
		case <-time.After(c.hold):
		}
	}
	return []TargetResult{{Target: "t", Up: true, Reason: ReasonReady}}
}

func TestRoundsDoNotOverlap(t *testing.T) {
	// Both checkers outlive the interval: one returns at the deadline, one ignores its context
	// and sleeps past two intervals. Neither may ever run twice at once.
	var coopIn, coopMax, stuckIn, stuckMax atomic.Int32
	coop := countingChecker{name: "coop", inflight: &coopIn, maxSeen: &coopMax, hold: time.Hour}
	stuck := countingChecker{name: "stuck", inflight: &stuckIn, maxSeen: &stuckMax, hold: 120 * time.Millisecond, ignoreCtx: true}
	r := NewRunner(Options{Interval: 50 * time.Millisecond, Timeout: 50 * time.Millisecond}, []Checker{coop, stuck})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := r.Subscribe(ctx)
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	for r.Current().Round < 6 {
		<-updates
	}
	cancel()
	<-done
	if m := coopMax.Load(); m != 1 {
		t.Errorf("the cooperative checker ran %d times at once", m)
	}
	if m := stuckMax.Load(); m != 1 {
		t.Errorf("the checker ignoring its context ran %d times at once", m)
	}
	if a := r.Current().AbandonedTotal; a == 0 {
		t.Error("the checker ignoring its context was never abandoned")
	}
}

func TestShutdownDuringRoundPublishesNothing(t *testing.T) {
	var in, mx atomic.Int32
	c := countingChecker{name: "c", inflight: &in, maxSeen: &mx, hold: time.Hour}
	r := NewRunner(Options{Interval: time.Hour, Timeout: time.Hour}, []Checker{c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	for in.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if s := r.Current(); s.Round != 0 || len(s.Providers[0].Targets) != 0 {
		t.Errorf("a round cut short by shutdown was published: %+v", s)
	}
	select {
	case <-r.FirstRound():
		t.Error("FirstRound closed by a round cut short by shutdown")
	default:
	}
}

func TestTransitionsAreLoggedOnce(t *testing.T) {
	f := newFake("prov", typeKubernetes, "t1", "t2")
	f.set("t2", ReasonAPIError, "500 from the API")
	r, rec := newTestRunner(t, time.Second, f)
	ctx := context.Background()

	type want struct {
		level slog.Level
		msg   string
		attrs map[string]string
	}
	check := func(step string, wants ...want) {
		t.Helper()
		got := rec.take()
		if len(got) != len(wants) {
			t.Fatalf("%s: logged %d records, want %d:\n%v", step, len(got), len(wants), got)
		}
		for i, w := range wants {
			g := got[i]
			if g.level != w.level || g.msg != w.msg {
				t.Errorf("%s: record %d = %s, want %s %q", step, i, g, w.level, w.msg)
			}
			for k, v := range w.attrs {
				if g.attrs[k] != v {
					t.Errorf("%s: record %d: %s = %q, want %q (%s)", step, i, k, g.attrs[k], v, g)
				}
			}
		}
	}

	r.round(ctx)
	check("first round",
		want{slog.LevelInfo, "target is up", map[string]string{"provider": "prov", "target": "t1"}},
		want{slog.LevelWarn, "target is down", map[string]string{"provider": "prov", "target": "t2", "reason": "APIError", "message": "500 from the API"}})
	since2 := mustTarget(t, r.Current(), "prov", "t2").Since

	r.round(ctx)
	check("steady state")

	f.set("t1", ReasonUnauthorized, "401")
	f.set("t2", ReasonAPIError, "503 from the API") // same reason, other message: not a transition
	r.round(ctx)
	check("t1 goes down",
		want{slog.LevelWarn, "target went down", map[string]string{"provider": "prov", "target": "t1", "reason": "Unauthorized", "message": "401"}})
	s := r.Current()
	if ts := mustTarget(t, s, "prov", "t2"); !ts.Since.Equal(since2) || ts.Message != "503 from the API" {
		t.Errorf("same reason, new message: Since moved or message not updated: %+v (since %s)", ts, since2)
	}
	downAt := mustTarget(t, s, "prov", "t1").CheckedAt
	if ts := mustTarget(t, s, "prov", "t1"); !ts.Since.Equal(ts.CheckedAt) {
		t.Errorf("going down moves Since: %+v", ts)
	}

	f.set("t2", ReasonAPIUnreachable, "connection refused")
	r.round(ctx)
	check("t2 changes reason while down",
		want{slog.LevelWarn, "target is still down with another reason", map[string]string{"provider": "prov", "target": "t2", "reason": "APIUnreachable", "previous_reason": "APIError", "message": "connection refused"}})
	if ts := mustTarget(t, r.Current(), "prov", "t2"); !ts.Since.Equal(since2) || !ts.CheckedAt.After(since2) {
		t.Errorf("a new reason while down must not move Since (Since %s, want %s): %+v", ts.Since, since2, ts)
	}

	r.round(ctx)
	check("steady state while down")

	f.set("t1", ReasonReady, "")
	r.round(ctx)
	back := mustTarget(t, r.Current(), "prov", "t1")
	check("t1 comes back",
		want{slog.LevelInfo, "target is back up", map[string]string{"provider": "prov", "target": "t1", "previous_reason": "Unauthorized",
			"down_for": back.CheckedAt.Sub(downAt).Round(time.Millisecond).String()}})
	if !back.Since.Equal(back.CheckedAt) || !back.Up {
		t.Errorf("coming back moves Since: %+v", back)
	}

	r.round(ctx)
	check("steady state again")
}

func TestSetCheckersKeepsStateOfUnchangedProviders(t *testing.T) {
	a := newFake("a", typeKVM, "h1", "h2")
	a.set("h2", reasonTCPUnreachable, "connection refused")
	b := newFake("b", typeGCP, "proj")
	r, rec := newTestRunner(t, time.Second, a, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := r.Subscribe(ctx)
	r.round(ctx)
	<-updates
	before := r.Current()
	h2Since := mustTarget(t, before, "a", "h2").Since
	rec.take()

	// A reload: "a" is rebuilt (a new instance, one host dropped), "b" removed, "c" added.
	a2 := newFake("a", typeKVM, "h2", "h3")
	a2.set("h2", reasonTCPUnreachable, "connection refused")
	c := newFake("c", typeKubernetes, "api")
	r.SetCheckers([]Checker{c, a2})
	select {
	case <-updates:
	default:
		t.Fatal("SetCheckers did not publish a snapshot")
	}
	s := r.Current()
	if s == before {
		t.Fatal("SetCheckers did not publish a new snapshot")
	}
	if len(s.Providers) != 2 || s.Providers[0].Name != "c" || s.Providers[1].Name != "a" {
		t.Fatalf("providers after reload: %+v", s.Providers)
	}
	if len(s.Providers[0].Targets) != 0 {
		t.Errorf("a new provider is listed without targets until checked: %+v", s.Providers[0])
	}
	if got := s.Providers[1].Targets; len(got) != 1 || got[0].Target != "h2" || !got[0].Since.Equal(h2Since) {
		t.Errorf("kept provider after reload: want only h2 with its since-time, got %+v", got)
	}
	if s.Round != before.Round {
		t.Errorf("a reload is not a round: Round %d -> %d", before.Round, s.Round)
	}
	// The published snapshot before the reload is untouched.
	if before.Provider("b") == nil || len(before.Provider("a").Targets) != 2 {
		t.Errorf("the previous snapshot was modified: %+v", before.Providers)
	}

	r.round(ctx)
	s = r.Current()
	if ts := mustTarget(t, s, "a", "h2"); !ts.Since.Equal(h2Since) {
		t.Errorf("unchanged provider lost its since-time: %s, want %s", ts.Since, h2Since)
	}
	if b.callCount() != 1 {
		t.Errorf("removed provider checked again: %d calls", b.callCount())
	}
	if got := targetNames(s.Provider("a")); !slices.Equal(got, []string{"h2", "h3"}) {
		t.Errorf("targets of a: %v, want [h2 h3] (checker's order)", got)
	}
	// Only the new targets log their initial state; h2's state did not change.
	var lines []string
	for _, l := range rec.take() {
		lines = append(lines, l.attrs["provider"]+"/"+l.attrs["target"]+" "+l.msg)
	}
	if want := []string{"c/api target is up", "a/h3 target is up"}; !slices.Equal(lines, want) {
		t.Errorf("logs after reload: %q, want %q", lines, want)
	}

	// The same name with another type starts afresh.
	a3 := newFake("a", typeGCP, "h2")
	r.SetCheckers([]Checker{a3})
	if p := r.Current().Provider("a"); p.Type != typeGCP || len(p.Targets) != 0 {
		t.Errorf("a provider whose type changed keeps no state: %+v", p)
	}
}

func targetNames(p *ProviderState) []string {
	var out []string
	for _, ts := range p.Targets {
		out = append(out, ts.Target)
	}
	return out
}

func TestSubscribersNeverBlockTheRunner(t *testing.T) {
	r, _ := newTestRunner(t, time.Second, newFake("a", typeGCP, "p"))
	ctx, cancel := context.WithCancel(context.Background())
	slow := r.Subscribe(ctx) // never read until the end
	for range 5 {
		r.round(ctx) // would hang if publishing waited for the subscriber
	}
	if r.Current().Round != 5 {
		t.Fatalf("Round = %d, want 5", r.Current().Round)
	}
	if n := len(slow); n != 1 {
		t.Errorf("a slow subscriber holds %d notifications, want 1 (coalesced)", n)
	}
	cancel()
	n := 0
	for range slow { // ends only when the channel is closed
		n++
	}
	if n != 1 {
		t.Errorf("drained %d notifications after cancel, want 1", n)
	}
}

func TestFirstRoundClosesOnce(t *testing.T) {
	r, _ := newTestRunner(t, time.Second, newFake("a", typeGCP, "p"))
	r.round(context.Background())
	<-r.FirstRound()
	r.round(context.Background()) // must not close it again (would panic)
}

func TestVerdictsAreNormalised(t *testing.T) {
	f := newFake("k", typeKubernetes, "t1", "t2", "t3", "t4", "t5")
	f.results = func() []TargetResult {
		return []TargetResult{
			{Target: "t1", Up: true, Reason: "Bogus", Message: "it said so"}, // outside the catalogue
			{Target: "t2", Up: true, Reason: ""},                             // empty reason
			{Target: "t3", Up: false, Reason: ReasonReady},                   // Up disagrees with the reason
			{Target: "t4", Up: false, Reason: reasonPoolInactive},            // another type's reason
			{Target: "stranger", Up: true, Reason: ReasonReady},              // not in Targets()
			{Target: "t3", Up: false, Reason: ReasonForbidden},               // duplicate: the first counts
			// t5 missing
		}
	}
	r, rec := newTestRunner(t, time.Second, f)
	r.round(context.Background())
	s := r.Current()

	for _, tc := range []struct {
		target string
		up     bool
		reason Reason
		msg    string
	}{
		{"t1", false, ReasonTimeout, `check reported reason "Bogus", which is not in the kubernetes catalogue (a bug in the checker): it said so`},
		{"t2", false, ReasonTimeout, `check reported reason "", which is not in the kubernetes catalogue (a bug in the checker): `},
		{"t3", true, ReasonReady, ""},
		{"t4", false, ReasonTimeout, `check reported reason "PoolInactive", which is not in the kubernetes catalogue (a bug in the checker): `},
		{"t5", false, ReasonTimeout, "check returned no verdict for this target (a bug in the checker)"},
	} {
		ts := mustTarget(t, s, "k", tc.target)
		if ts.Up != tc.up || ts.Reason != tc.reason || ts.Message != tc.msg {
			t.Errorf("%s: got up=%v reason=%s message=%q; want up=%v reason=%s message=%q",
				tc.target, ts.Up, ts.Reason, ts.Message, tc.up, tc.reason, tc.msg)
		}
		if ts.CheckedAt.IsZero() || ts.CheckedAt.Before(s.RoundStarted) {
			t.Errorf("%s: CheckedAt not filled with the completion time: %s (round started %s)", tc.target, ts.CheckedAt, s.RoundStarted)
		}
	}
	if got := targetNames(s.Provider("k")); !slices.Equal(got, []string{"t1", "t2", "t3", "t4", "t5"}) {
		t.Errorf("targets %v: the stranger must be discarded", got)
	}

	errorsLogged := func() []string {
		var out []string
		for _, l := range rec.take() {
			if l.level == slog.LevelError {
				out = append(out, l.attrs["target"]+": "+l.msg)
			}
		}
		slices.Sort(out)
		return out
	}
	first := errorsLogged()
	if len(first) != 6 {
		t.Errorf("want one error per misbehaviour (t1, t2, t4 reasons, stranger, duplicate t3, missing t5), got %d:\n%s", len(first), strings.Join(first, "\n"))
	}
	r.round(context.Background())
	if again := errorsLogged(); len(again) != 0 {
		t.Errorf("the same misbehaviour is logged again in the next round:\n%s", strings.Join(again, "\n"))
	}
}

type panickingChecker struct{}

func (panickingChecker) Name() string                         { return "p" }
func (panickingChecker) Type() ProviderType                   { return typeGCP }
func (panickingChecker) Targets() []string                    { return []string{"proj"} }
func (panickingChecker) Check(context.Context) []TargetResult { panic("boom") }

func TestPanickingCheckerIsAVerdict(t *testing.T) {
	r, rec := newTestRunner(t, time.Second, panickingChecker{}, newFake("ok", typeGCP, "proj"))
	r.round(context.Background())
	s := r.Current()
	if ts := mustTarget(t, s, "p", "proj"); ts.Up || ts.Reason != ReasonTimeout || !strings.Contains(ts.Message, "panicked") {
		t.Errorf("panicking checker's target: %+v", ts)
	}
	if ts := mustTarget(t, s, "ok", "proj"); !ts.Up {
		t.Errorf("another checker in the same round: %+v", ts)
	}
	var found bool
	for _, l := range rec.take() {
		if l.level == slog.LevelError && strings.Contains(l.attrs["panic"], "boom") {
			found = true
		}
	}
	if !found {
		t.Error("the panic was not logged at error level")
	}
}

// TestSamplesAreCopiedIntoTheSnapshot: a type's samples reach the snapshot as the checker
// reported them, in a copy; a sample of a gauge the type does not declare, or with the wrong
// labels, is dropped and logged as a bug in the checker.
func TestSamplesAreCopiedIntoTheSnapshot(t *testing.T) {
	kvm, ok := Lookup(typeKVM)
	if !ok || len(kvm.Gauges) == 0 {
		t.Fatal("the kvm type is not registered with its gauges")
	}
	declared := kvm.Gauges[0]
	stranger := &Gauge{Name: "proxy_operator_stranger", Help: "not declared by kvm", Labels: []string{"pool"}}
	labels := []string{"default"}
	f := newFake("kvm", typeKVM, "h1")
	f.results = func() []TargetResult {
		return []TargetResult{{Target: "h1", Up: true, Reason: ReasonReady, Samples: []Sample{
			{Gauge: declared, Value: 100, LabelValues: labels},
			{Gauge: stranger, Value: 1, LabelValues: labels},
			{Gauge: declared, Value: 2, LabelValues: nil},
		}}}
	}
	r, rec := newTestRunner(t, time.Second, f)
	r.round(context.Background())
	labels[0] = "reused" // the checker reuses its memory
	got := mustTarget(t, r.Current(), "kvm", "h1").Samples
	if len(got) != 1 || got[0].Gauge != declared || got[0].Value != 100 || len(got[0].LabelValues) != 1 || got[0].LabelValues[0] != "default" {
		t.Errorf("published samples %+v, want only the declared one, as reported", got)
	}
	bugs := 0
	for _, l := range rec.take() {
		if l.level == slog.LevelError && strings.Contains(l.msg, "sample of a gauge") {
			bugs++
		}
	}
	if bugs != 2 {
		t.Errorf("%d bug logs for the two bad samples, want 2", bugs)
	}
}

// sliceChecker is a checker whose type is not comparable (a struct value holding a slice).
type sliceChecker struct{ targets []string }

func (s sliceChecker) Name() string       { return "slice" }
func (s sliceChecker) Type() ProviderType { return typeGCP }
func (s sliceChecker) Targets() []string  { return s.targets }
func (s sliceChecker) Check(context.Context) []TargetResult {
	return []TargetResult{{Target: s.targets[0], Up: true, Reason: ReasonReady}}
}

func TestSetCheckersWithTheSameInstanceKeepsItBusy(t *testing.T) {
	stuck := newStuck("stuck", "h1")
	nc := sliceChecker{targets: []string{"proj"}}
	r, _ := newTestRunner(t, 50*time.Millisecond, stuck, nc)
	r.round(context.Background())
	// A reload that keeps both providers unchanged passes the same instances again; a checker of
	// a non-comparable type must not make that panic.
	r.SetCheckers([]Checker{stuck, nc})
	r.round(context.Background())
	if n := stuck.calls.Load(); n != 1 {
		t.Errorf("after a reload with the same instance, its still-running abandoned call was not respected: %d calls", n)
	}
	if ts := mustTarget(t, r.Current(), "slice", "proj"); !ts.Up {
		t.Errorf("non-comparable checker after reload: %+v", ts)
	}
	close(stuck.release)
	<-stuck.returned
}

// TestNotContactedKeepsTheLastContactsTime: a verdict whose check made no contact with the
// target (NotContacted) is this round's verdict, but the check time stays the last contact's,
// so that the check timestamp moves only when the target was contacted; the message says when
// that was, and a flip it makes is dated when it was recorded, not at the old contact.
func TestNotContactedKeepsTheLastContactsTime(t *testing.T) {
	f := newFake("kvm-a", typeKVM, "hv1")
	r, _ := newTestRunner(t, time.Second, f)
	contact := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f.mu.Lock()
	f.verdicts["hv1"] = TargetResult{Target: "hv1", Up: true, Reason: ReasonReady, CheckedAt: contact}
	f.mu.Unlock()
	r.round(context.Background())
	if got := mustTarget(t, r.Current(), "kvm-a", "hv1"); !got.CheckedAt.Equal(contact) {
		t.Fatalf("after a contact: checked at %v, want %v", got.CheckedAt, contact)
	}

	var since time.Time
	for n := 1; n <= 2; n++ {
		f.mu.Lock()
		f.verdicts["hv1"] = TargetResult{Target: "hv1", Reason: ReasonTimeout, Message: "not started",
			CheckedAt: time.Now(), NotContacted: true}
		f.mu.Unlock()
		before := time.Now()
		r.round(context.Background())
		got := mustTarget(t, r.Current(), "kvm-a", "hv1")
		if got.Up || got.Reason != ReasonTimeout {
			t.Errorf("round %d without contact: %s, want this round's Timeout", n, got.Reason)
		}
		if !got.CheckedAt.Equal(contact) {
			t.Errorf("round %d without contact: checked at %v, want the last contact's %v", n, got.CheckedAt, contact)
		}
		if want := "not started; last contacted 2026-12-01T10:00:00Z"; got.Message != want {
			t.Errorf("round %d without contact: message %q, want %q", n, got.Message, want)
		}
		if n == 1 {
			if got.Since.Before(before) {
				t.Errorf("the flip to down is dated %v, before the round that observed it (%v)", got.Since, before)
			}
			since = got.Since
		} else if !got.Since.Equal(since) {
			t.Errorf("round %d: still down, but since moved from %v to %v", n, since, got.Since)
		}
	}

	later := contact.Add(time.Minute)
	f.mu.Lock()
	f.verdicts["hv1"] = TargetResult{Target: "hv1", Up: true, Reason: ReasonReady, CheckedAt: later}
	f.mu.Unlock()
	r.round(context.Background())
	if got := mustTarget(t, r.Current(), "kvm-a", "hv1"); !got.CheckedAt.Equal(later) || !got.Up {
		t.Errorf("after a new contact: %s checked at %v, want Ready at %v", got.Reason, got.CheckedAt, later)
	}
}

// discoveringChecker finds its targets in its check, as vsphere finds its hosts: Targets lists
// what the last check found.
type discoveringChecker struct {
	mu    sync.Mutex
	found []string
	next  [][]string // what each check finds
}

func (d *discoveringChecker) Name() string       { return "vc" }
func (d *discoveringChecker) Type() ProviderType { return typeGCP }
func (d *discoveringChecker) Targets() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string{"vc"}, d.found...)
}
func (d *discoveringChecker) Check(context.Context) []TargetResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.found, d.next = d.next[0], d.next[1:]
	out := []TargetResult{{Target: "vc", Reason: ReasonReady, Message: "ok"}}
	for _, t := range d.found {
		out = append(out, TargetResult{Target: t, Reason: ReasonReady, Message: "found"})
	}
	return out
}

// A target a check discovers has its verdict in the same round; one no longer found is gone
// in the round that no longer finds it.
func TestDiscoveredTargetsInTheirRound(t *testing.T) {
	d := &discoveringChecker{next: [][]string{{"h1", "h2"}, {"h2"}}}
	r, _ := newTestRunner(t, time.Second, d)
	r.round(context.Background())
	names := func() []string {
		var out []string
		for _, ts := range r.Current().Providers[0].Targets {
			out = append(out, ts.Target)
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"vc", "h1", "h2"}) {
		t.Errorf("after the first round: targets %q, want vc, h1, h2", got)
	}
	r.round(context.Background())
	if got := names(); !slices.Equal(got, []string{"vc", "h2"}) {
		t.Errorf("after the second round: targets %q, want vc, h2", got)
	}
}
