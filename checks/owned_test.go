package checks

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks/shard"
)

// subsetChecker is a fakeChecker that can check some of its targets (SubsetChecker), and
// records what it was asked.
type subsetChecker struct {
	*fakeChecker
	mu    sync.Mutex
	asked [][]string
}

func (s *subsetChecker) CheckTargets(ctx context.Context, targets []string) []TargetResult {
	s.mu.Lock()
	s.asked = append(s.asked, slices.Clone(targets))
	s.mu.Unlock()
	all := s.Check(ctx)
	return slices.DeleteFunc(all, func(r TargetResult) bool { return !slices.Contains(targets, r.Target) })
}

func (s *subsetChecker) lastAsked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asked) == 0 {
		return nil
	}
	return s.asked[len(s.asked)-1]
}

func ownKeys(keys ...string) Ownership {
	return func(k string) bool { return slices.Contains(keys, k) }
}

func targetsOf(s *Snapshot, provider string) (verdicts, unchecked []string) {
	p := s.Provider(provider)
	for _, t := range p.Targets {
		verdicts = append(verdicts, t.Target)
	}
	for _, t := range p.Unchecked {
		unchecked = append(unchecked, t.Target)
	}
	return verdicts, unchecked
}

func TestOwnershipKeyFollowsTheRegistration(t *testing.T) {
	if !PerTarget(typeKVM) || PerTarget(typeGCP) || PerTarget(typeKubernetes) || PerTarget("unregistered") {
		t.Fatalf("PerTarget: kvm %v, gcp %v, kubernetes %v, unregistered %v; want only kvm",
			PerTarget(typeKVM), PerTarget(typeGCP), PerTarget(typeKubernetes), PerTarget("unregistered"))
	}
	if got := OwnershipKey("lab", typeKVM, "hv1"); got != "lab/hv1" {
		t.Errorf("OwnershipKey(kvm) = %q, want lab/hv1", got)
	}
	if got := OwnershipKey("prod", typeGCP, "my-project"); got != "prod" {
		t.Errorf("OwnershipKey(gcp) = %q, want prod", got)
	}
}

func TestRunnerChecksOwnedTargetsOnly(t *testing.T) {
	kvm := &subsetChecker{fakeChecker: newFake("lab", typeKVM, "hv1", "hv2", "hv3", "hv4")}
	gcp := newFake("prod", typeGCP, "my-project")
	r, _ := newTestRunner(t, time.Second, kvm, gcp)
	r.SetOwnership(ownKeys("lab/hv2", "lab/hv4"))
	r.round(context.Background())

	s := r.Current()
	if v, u := targetsOf(s, "lab"); !slices.Equal(v, []string{"hv2", "hv4"}) || len(u) != 0 {
		t.Errorf("kvm provider: verdicts %v, unchecked %v; want [hv2 hv4] and none", v, u)
	}
	if got := kvm.lastAsked(); !slices.Equal(got, []string{"hv2", "hv4"}) {
		t.Errorf("CheckTargets asked for %v, want [hv2 hv4]", got)
	}
	if v, u := targetsOf(s, "prod"); len(v) != 0 || len(u) != 0 {
		t.Errorf("gcp provider owned elsewhere: verdicts %v, unchecked %v; want none", v, u)
	}
	if s.Provider("prod") == nil {
		t.Error("a provider owned elsewhere left the snapshot; its provider-level series must stay")
	}
	if n := gcp.callCount(); n != 0 {
		t.Errorf("gcp checker called %d times although another replica owns it", n)
	}

	// The ownership moves: the gcp provider and hv1 come here, hv4 goes.
	r.SetOwnership(ownKeys("lab/hv1", "lab/hv2", "prod"))
	r.round(context.Background())
	s = r.Current()
	if v, _ := targetsOf(s, "lab"); !slices.Equal(v, []string{"hv1", "hv2"}) {
		t.Errorf("after the move, kvm verdicts %v, want [hv1 hv2]", v)
	}
	if v, _ := targetsOf(s, "prod"); !slices.Equal(v, []string{"my-project"}) {
		t.Errorf("after the move, gcp verdicts %v, want [my-project]", v)
	}
	if n := gcp.callCount(); n != 1 {
		t.Errorf("gcp checker called %d times after it came here, want 1", n)
	}
}

// A PerTarget checker without SubsetChecker is checked whole; the others' targets are dropped
// without being reported as a checker's bug.
func TestRunnerOwnedWithoutSubsetChecker(t *testing.T) {
	kvm := newFake("lab", typeKVM, "hv1", "hv2", "hv3")
	r, rec := newTestRunner(t, time.Second, kvm)
	r.SetOwnership(ownKeys("lab/hv3"))
	r.round(context.Background())
	if v, _ := targetsOf(r.Current(), "lab"); !slices.Equal(v, []string{"hv3"}) {
		t.Errorf("verdicts %v, want [hv3]", v)
	}
	for _, l := range rec.take() {
		if l.msg != "target has a verdict" && l.level > 0 {
			t.Errorf("unexpected log: %s", l)
		}
	}
}

// Nothing owned: the provider stays listed, without targets, and is never called.
func TestRunnerOwnsNothing(t *testing.T) {
	kvm := newFake("lab", typeKVM, "hv1", "hv2")
	r, _ := newTestRunner(t, time.Second, kvm)
	r.SetOwnership(ownKeys())
	r.round(context.Background())
	if v, u := targetsOf(r.Current(), "lab"); len(v)+len(u) != 0 {
		t.Errorf("verdicts %v, unchecked %v; want none", v, u)
	}
	if n := kvm.callCount(); n != 0 {
		t.Errorf("checker called %d times with no target owned", n)
	}
	if r.Current().Round != 1 {
		t.Errorf("round %d, want 1: a replica that owns nothing still completes rounds", r.Current().Round)
	}
}

// The shards' snapshots together hold exactly the verdicts of one unsharded runner: every
// target once, with the same reason.
func TestShardsUnionEqualsUnsharded(t *testing.T) {
	hosts := []string{"hv1", "hv2", "hv3", "hv4", "hv5", "hv6", "hv7", "hv8", "hv9", "hv10"}
	build := func() []Checker {
		kvm := newFake("lab", typeKVM, hosts...)
		kvm.set("hv3", reasonTCPUnreachable, "refused")
		kvm.set("hv7", reasonPoolInactive, "inactive")
		k8s := newFake("cluster", typeKubernetes, "https://api")
		gcp := newFake("prod", typeGCP, "my-project")
		gcp.set("my-project", ReasonUnauthorized, "401")
		return []Checker{kvm, k8s, gcp}
	}
	verdicts := func(r *Runner) map[string]Reason {
		out := map[string]Reason{}
		for _, p := range r.Current().Providers {
			for _, ts := range p.Targets {
				if _, dup := out[p.Name+"/"+ts.Target]; dup {
					t.Errorf("%s/%s reported twice", p.Name, ts.Target)
				}
				out[p.Name+"/"+ts.Target] = ts.Reason
			}
		}
		return out
	}
	whole, _ := newTestRunner(t, time.Second, build()...)
	whole.round(context.Background())
	want := verdicts(whole)

	members := []string{"phe-0", "phe-1", "phe-2"}
	union := map[string]Reason{}
	for _, self := range members {
		r, _ := newTestRunner(t, time.Second, build()...)
		r.SetOwnership(func(key string) bool { return shard.Owner(members, key) == self })
		r.round(context.Background())
		for k, v := range verdicts(r) {
			if _, dup := union[k]; dup {
				t.Errorf("%s reported by two shards", k)
			}
			union[k] = v
		}
	}
	if len(union) != len(want) {
		t.Errorf("the shards report %d targets, the unsharded runner %d", len(union), len(want))
	}
	for k, v := range want {
		if union[k] != v {
			t.Errorf("%s: shards say %q, unsharded %q", k, union[k], v)
		}
	}
}

// A SubsetChecker that owns none of its targets is still called, with none, every round: it
// lets go of what it holds for the targets it no longer owns (kvm's pooled links). Nothing is
// reported.
func TestRunnerOwnsNothingOfSubsetChecker(t *testing.T) {
	kvm := &subsetChecker{fakeChecker: newFake("lab", typeKVM, "hv1", "hv2")}
	r, _ := newTestRunner(t, time.Second, kvm)
	r.SetOwnership(ownKeys())
	r.round(context.Background())
	if v, u := targetsOf(r.Current(), "lab"); len(v)+len(u) != 0 {
		t.Errorf("verdicts %v, unchecked %v; want none", v, u)
	}
	kvm.mu.Lock()
	asked := slices.Clone(kvm.asked)
	kvm.mu.Unlock()
	if len(asked) != 1 || len(asked[0]) != 0 {
		t.Errorf("CheckTargets asked for %v, want one call with no target", asked)
	}
}

// TestRunSoon: RunSoon runs a round outside the schedule (here an hour away), as soon as the
// running one ends; calls while one is pending make one round.
func TestRunSoon(t *testing.T) {
	f := newFake("prod", typeGCP, "my-project")
	c := &holdingChecker{fakeChecker: f, entered: make(chan struct{}, 1), release: make(chan struct{})}
	r, _ := newTestRunner(t, time.Second, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	<-r.FirstRound()
	waitPublished := func(round uint64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for r.Current().Round < round {
			if time.Now().After(deadline) {
				t.Fatalf("round %d not published (%d checks so far)", round, f.callCount())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.RunSoon()
	waitPublished(2)
	// Three calls while a round runs make one round after it: the third round's check is held
	// until the calls are made.
	c.hold.Store(true)
	r.RunSoon()
	<-c.entered
	c.hold.Store(false)
	r.RunSoon()
	r.RunSoon()
	r.RunSoon()
	close(c.release)
	waitPublished(4)
	if n, pending := f.callCount(), len(r.soon); n != 4 || pending != 0 {
		t.Errorf("after round 4: %d checks and %d round(s) pending, want 4 and none: three RunSoon calls during a round make one round", n, pending)
	}
}

// holdingChecker is a fakeChecker whose Check, while hold is set, says it entered and waits
// for release.
type holdingChecker struct {
	*fakeChecker
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (c *holdingChecker) Check(ctx context.Context) []TargetResult {
	if c.hold.Load() {
		c.entered <- struct{}{}
		<-c.release
	}
	return c.fakeChecker.Check(ctx)
}

// A target taken over from another replica goes on from the verdict and counts it published
// (Carried): not published before this replica's own first check, then its thresholds count
// on from the carried counts and Since stays the carried one.
func TestRunnerCarriesATakenOverTargetsCounts(t *testing.T) {
	kvm := &subsetChecker{fakeChecker: newFake("lab", typeKVM, "hv1", "hv2")}
	r, _ := newTestRunner(t, time.Second, kvm)
	r.SetProviders([]Provider{{Checker: kvm, Thresholds: Thresholds{Failure: 3, Success: 2}}})
	since := time.Now().Add(-time.Hour).Truncate(time.Second)
	carried := map[string]Carried{
		// Up, with two failures already counted: a third failure turns it down.
		"hv1": {Up: true, Reason: ReasonReady, Since: since, CheckedAt: since.Add(time.Minute), ConsecutiveFailures: 2},
		// Down, one success counted: one more success turns it up.
		"hv2": {Up: false, Reason: reasonTCPUnreachable, Message: "connection refused", Since: since, CheckedAt: since.Add(time.Minute), ConsecutiveSuccesses: 1},
	}
	r.SetCarrier(func(provider, target string) (Carried, bool) {
		c, ok := carried[target]
		return c, ok && provider == "lab"
	})
	r.SetOwnership(ownKeys())
	r.round(context.Background())
	// Both come to this replica: the carried state is not published before a check here.
	kvm.set("hv1", reasonTCPUnreachable, "connection refused")
	r.SetOwnership(ownKeys("lab/hv1", "lab/hv2"))
	// A round that does not start their checks (the concurrency slots ran out).
	kvm.results = func() []TargetResult {
		return []TargetResult{{Target: "hv1", Reason: ReasonTimeout, NotStarted: true}, {Target: "hv2", Reason: ReasonTimeout, NotStarted: true}}
	}
	r.round(context.Background())
	kvm.results = nil
	if v, u := targetsOf(r.Current(), "lab"); len(v) != 0 || !slices.Equal(u, []string{"hv1", "hv2"}) {
		t.Fatalf("before a check here: verdicts %v, unchecked %v; want none and [hv1 hv2]", v, u)
	}
	r.round(context.Background())
	p := r.Current().Provider("lab")
	if len(p.Targets) != 2 {
		t.Fatalf("after the first check here: %+v, want two verdicts", p)
	}
	hv1, hv2 := p.Targets[0], p.Targets[1]
	if hv1.Up || hv1.ConsecutiveFailures != 3 {
		t.Errorf("hv1: up %v, %d failures; want down at the third failure in a row (two carried)", hv1.Up, hv1.ConsecutiveFailures)
	}
	if !hv2.Up || hv2.ConsecutiveSuccesses != 2 {
		t.Errorf("hv2: up %v, %d successes; want up at the second success in a row (one carried)", hv2.Up, hv2.ConsecutiveSuccesses)
	}
	kvm.set("hv1", reasonTCPUnreachable, "still refused")
	r.round(context.Background())
	if got := r.Current().Provider("lab").Targets[0]; got.Up || got.Since.Equal(since) {
		t.Errorf("hv1 after another failure: up %v since %v; want down since the check here that turned it down", got.Up, got.Since)
	}
	// A target that stays as it was keeps the carried Since.
	kvm2 := &subsetChecker{fakeChecker: newFake("lab", typeKVM, "hv3")}
	r2, _ := newTestRunner(t, time.Second, kvm2)
	r2.SetCarrier(func(_, target string) (Carried, bool) {
		return Carried{Up: true, Reason: ReasonReady, Since: since, CheckedAt: since}, true
	})
	r2.SetOwnership(ownKeys("lab/hv3"))
	r2.round(context.Background())
	if got := r2.Current().Provider("lab").Targets; len(got) != 1 || !got[0].Up || !got[0].Since.Equal(since) {
		t.Errorf("a carried up target checked up: %+v; want up since the carried time", got)
	}
}
