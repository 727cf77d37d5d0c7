package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	rendezvous "github.com/provider-health-exporter/provider-health-exporter/checks/shard"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
)

// runOneRound runs e's runner until its first round is published.
func runOneRound(t *testing.T, e *exporter.Exporter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Runner().Run(ctx) }()
	<-e.Runner().FirstRound()
	cancel()
	<-done
}

// verdictsOf lists a snapshot's verdicts as "provider/target up reason", sorted, and its
// targets without a verdict.
func verdictsOf(s *checks.Snapshot) (verdicts, unchecked []string) {
	for _, p := range s.Providers {
		for _, t := range p.Targets {
			verdicts = append(verdicts, fmt.Sprintf("%s/%s %v %s", p.Name, t.Target, t.Up, t.Reason))
		}
		for _, u := range p.Unchecked {
			unchecked = append(unchecked, p.Name+"/"+u.Target)
		}
	}
	slices.Sort(verdicts)
	return verdicts, unchecked
}

// The fleet each replica folds from its own snapshot and the others' parts is the unsharded
// exporter's: every target of every provider, with the same verdicts, on every replica.
func TestFleetOfTheShardsIsTheUnshardedVerdicts(t *testing.T) {
	path := shardedProviders(t)
	whole := newReplica(t, path)
	runOneRound(t, whole)
	want, _ := verdictsOf(whole.Runner().Current())
	if len(want) != 9 {
		t.Fatalf("unsharded verdicts %v, want the eight hosts and the cluster", want)
	}

	members := []string{"phe-0", "phe-1", "phe-2"}
	replicas := map[string]*Shard{}
	for _, m := range members {
		e := newReplica(t, path)
		replicas[m] = sharded(t, e, m, members, nil)
		runOneRound(t, e)
	}
	for self, s := range replicas {
		own, _ := verdictsOf(s.runner.Current())
		if len(own) == 0 || len(own) == len(want) {
			t.Fatalf("%s reports %v itself: the test needs a split", self, own)
		}
		var parts []Part
		for other, o := range replicas {
			if other != self {
				pub := o.publication()
				parts = append(parts, Part{Identity: other, Live: true, Data: pub.Data, CheckedAt: pub.CheckedAt})
			}
		}
		s.setParts(parts)
		got, unchecked := verdictsOf(s.Fleet().Current())
		if !slices.Equal(got, want) || len(unchecked) != 0 {
			t.Errorf("%s's fleet:\n%s\nunchecked %v; want the unsharded verdicts:\n%s", self, strings.Join(got, "\n"), unchecked, strings.Join(want, "\n"))
		}
	}

	// Without the others' parts a replica's fleet lists their targets without a verdict, never
	// as down or gone.
	s := replicas["phe-0"]
	s.setParts(nil)
	got, unchecked := verdictsOf(s.Fleet().Current())
	if len(got)+len(unchecked) != len(want) || len(unchecked) == 0 {
		t.Errorf("phe-0 alone: verdicts %v, unchecked %v; want its own verdicts and the others' targets unchecked", got, unchecked)
	}
	for _, p := range s.Fleet().Current().Providers {
		for _, u := range p.Unchecked {
			if !strings.Contains(u.Message, "not reported yet by the replica that owns it") {
				t.Errorf("%s/%s unchecked with %q, want it to say its owner has not reported it", p.Name, u.Target, u.Message)
			}
		}
	}
}

// A handover ends as soon as the new owner's part has the target: the old owner stops
// reporting it then, not two intervals later; targets the new owner has not reported yet
// stay.
func TestHandoverEndsWhenTheNewOwnerReports(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	s := sharded(t, e, "phe-0", []string{"phe-0"}, nil)
	s.runSoon = func() {}
	two := []string{"phe-0", "phe-1"}
	s.setMembers(two)
	var moved []string
	for i := 1; i <= 8; i++ {
		if h := fmt.Sprintf("hv%d", i); rendezvous.Owner(two, "lab/"+h) == "phe-1" {
			moved = append(moved, h)
		}
	}
	if len(moved) < 2 {
		t.Fatalf("moved %v: the test needs two hosts moving", moved)
	}
	// phe-1 has reported the first moved host only.
	now := time.Now()
	snap := &checks.Snapshot{Providers: []checks.ProviderState{{Name: "lab", Type: "kvm", Targets: []checks.TargetState{{
		TargetResult: checks.TargetResult{Target: moved[0], Up: true, Reason: checks.ReasonReady, CheckedAt: now}, Since: now,
	}}}}}
	s.setParts([]Part{{Identity: "phe-1", Live: true, Data: encodePart(snap, MaxPart).data, CheckedAt: now}})
	if s.owns("lab/" + moved[0]) {
		t.Errorf("phe-0 still reports %s after phe-1's part has it", moved[0])
	}
	for _, h := range moved[1:] {
		if !s.owns("lab/" + h) {
			t.Errorf("phe-0 stopped reporting %s, which phe-1 has not reported yet", h)
		}
	}
	// A part of a replica that is no member (its Lease released) ends nothing.
	snap.Providers[0].Targets[0].Target = moved[1]
	s.setParts([]Part{{Identity: "phe-1", Live: false, LastLive: now, Data: encodePart(snap, MaxPart).data, CheckedAt: now}})
	if !s.owns("lab/" + moved[1]) {
		t.Errorf("phe-0 stopped reporting %s on the part of a replica whose Lease is not live", moved[1])
	}
}

// A new owner goes on from the newest verdict another replica published on the target, not
// from one older than staleIntervals intervals.
func TestCarryTakesTheNewestRecentVerdict(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	s := sharded(t, e, "phe-0", []string{"phe-0"}, nil)
	now := time.Now()
	part := func(identity string, live bool, checked time.Time, up bool, failures int) Part {
		reason := checks.ReasonReady
		if !up {
			reason = "SSHHandshakeFailed"
		}
		enc := encodePart(&checks.Snapshot{Providers: []checks.ProviderState{{Name: "lab", Type: "kvm", Thresholds: checks.Thresholds{Failure: 9, Success: 9}, Targets: []checks.TargetState{{
			TargetResult: checks.TargetResult{Target: "hv1", Up: up, Reason: reason, CheckedAt: checked}, Since: checked.Add(-time.Hour), ConsecutiveFailures: failures,
		}}}}}, MaxPart)
		return Part{Identity: identity, Live: live, LastLive: now, Data: enc.data, CheckedAt: checked}
	}
	s.setParts([]Part{
		part("phe-1", false, now.Add(-30*time.Second), true, 2),
		part("phe-2", true, now.Add(-90*time.Second), false, 5),
	})
	c, ok := s.carry("lab", "hv1")
	if !ok || !c.Up || c.ConsecutiveFailures != 2 || !c.Since.Equal(now.Add(-30*time.Second-time.Hour).Truncate(time.Millisecond)) {
		t.Errorf("carry: %+v, %v; want phe-1's newer verdict (up, two failures), its Since kept", c, ok)
	}
	if _, ok := s.carry("lab", "hv2"); ok {
		t.Error("carried a verdict nobody published")
	}
	s.setParts([]Part{part("phe-1", false, now.Add(-4*time.Minute), true, 2)})
	if c, ok := s.carry("lab", "hv1"); ok {
		t.Errorf("carried %+v, checked four intervals ago; want nothing (stale)", c)
	}
}

// A provider owned whole that has just come to this replica (no check of it here yet) shows
// the verdict its old owner published, not nothing; once it comes to another replica that has
// not reported it, its targets are listed without a verdict.
func TestFleetOfAProviderOwnedWholeDuringAHandover(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	self, other := "phe-0", ""
	for i := 1; other == ""; i++ {
		if m := fmt.Sprintf("phe-%d", i); rendezvous.Owner([]string{self, m}, "cluster") == self {
			other = m
		}
	}
	s := sharded(t, e, self, []string{self, other}, nil)
	now := time.Now()
	enc := encodePart(&checks.Snapshot{Providers: []checks.ProviderState{{Name: "cluster", Type: "kubernetes", Targets: []checks.TargetState{{
		TargetResult: checks.TargetResult{Target: "cluster", Reason: "APIUnreachable", CheckedAt: now}, Since: now,
	}}}}}, MaxPart)
	s.setParts([]Part{{Identity: other, Live: true, Data: enc.data, CheckedAt: now}})
	got, _ := verdictsOf(s.Fleet().Current())
	if !slices.Contains(got, "cluster/cluster false APIUnreachable") {
		t.Errorf("fleet %v: want the old owner's verdict on the provider this replica has not checked yet", got)
	}

	// Owned by a third replica, which has not reported it: listed without a verdict.
	third := ""
	for i := 100; third == ""; i++ {
		if m := fmt.Sprintf("phe-%d", i); rendezvous.Owner([]string{self, other, m}, "cluster") == m {
			third = m
		}
	}
	s.setMembers([]string{self, other, third})
	s.setParts(nil)
	for _, ps := range s.Fleet().Current().Providers {
		if ps.Name != "cluster" {
			continue
		}
		if len(ps.Targets) != 0 || len(ps.Unchecked) != 1 || !strings.Contains(ps.Unchecked[0].Message, third) {
			t.Errorf("cluster owned by %s, unreported: %+v; want its target listed without a verdict, naming its owner", third, ps)
		}
	}
}

// Only live members' parts count, and those of members seen live within three intervals: a
// part of a Lease never seen live (forged: no holder, a renewal in the year 3000) changes no
// verdict, carries no count and ends no handover; nor does one with times far in the future.
func TestForgedPartsCountForNothing(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	s := sharded(t, e, "phe-0", []string{"phe-0"}, nil)
	now := time.Now()
	enc := encodePart(&checks.Snapshot{Providers: []checks.ProviderState{{Name: "lab", Type: "kvm", Thresholds: checks.Thresholds{Failure: 5, Success: 5}, Targets: []checks.TargetState{{
		TargetResult: checks.TargetResult{Target: "hv1", Reason: "TCPUnreachable", CheckedAt: now}, Since: now, ConsecutiveFailures: 4,
	}}}}}, MaxPart)
	s.setParts([]Part{{Identity: "phe-forged", Live: false, Data: enc.data, CheckedAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}})
	if _, ok := s.carry("lab", "hv1"); ok {
		t.Error("carried a verdict from a part whose Lease was never seen live")
	}
	// Seen live four intervals ago: out of the carry window.
	s.setParts([]Part{{Identity: "phe-old", LastLive: now.Add(-4 * time.Minute), Data: enc.data, CheckedAt: now}})
	if _, ok := s.carry("lab", "hv1"); ok {
		t.Error("carried a verdict from a member last seen live four intervals ago")
	}
	// A live member whose round claims the year 3000: its verdicts are not newer than any.
	s.setParts([]Part{{Identity: "phe-1", Live: true, Data: enc.data, CheckedAt: now, RoundAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}})
	if c, ok := s.carry("lab", "hv1"); ok {
		t.Errorf("carried %+v from a part whose round is in the year 3000", c)
	}
	// The same part, live and honest: carried, its count kept.
	s.setParts([]Part{{Identity: "phe-1", Live: true, Data: enc.data, CheckedAt: now}})
	if c, ok := s.carry("lab", "hv1"); !ok || c.ConsecutiveFailures != 4 || c.Up {
		t.Errorf("carry from a live member: %+v %v; want down with 4 failures", c, ok)
	}
}

// The fleet's subscribers (the ProviderHealth writer, which folds the whole fleet at each
// notice) are told when the parts or the members changed, not at every read of the members that
// found the same parts.
func TestFleetToldOfChangesOnly(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	sh := sharded(t, e, "phe-0", []string{"phe-0", "phe-1"}, nil)
	sh.runSoon = func() {}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	told := sh.Fleet().Subscribe(ctx)
	wasTold := func() bool {
		select {
		case <-told:
			return true
		default:
			return false
		}
	}
	now := time.Now()
	snap := &checks.Snapshot{Providers: []checks.ProviderState{{Name: "lab", Type: "kvm", Targets: []checks.TargetState{{
		TargetResult: checks.TargetResult{Target: "hv1", Up: true, Reason: checks.ReasonReady, CheckedAt: now}, Since: now,
	}}}}}
	data := encodePart(snap, MaxPart).data
	steps := []struct {
		what string
		do   func()
		told bool
	}{
		{"a first part", func() { sh.setParts([]Part{{Identity: "phe-1", Live: true, Data: data, CheckedAt: now}}) }, true},
		{"the same part again", func() { sh.setParts([]Part{{Identity: "phe-1", Live: true, Data: data, CheckedAt: now}}) }, false},
		{"the part confirmed by a later round", func() {
			sh.setParts([]Part{{Identity: "phe-1", Live: true, Data: data, CheckedAt: now.Add(time.Second)}})
		}, true},
		{"its member no longer live", func() {
			sh.setParts([]Part{{Identity: "phe-1", LastLive: now, Data: data, CheckedAt: now.Add(time.Second)}})
		}, true},
		{"the members", func() { sh.setMembers([]string{"phe-0"}) }, true},
	}
	for _, s := range steps {
		s.do()
		if got := wasTold(); got != s.told {
			t.Errorf("%s: subscribers told %v, want %v", s.what, got, s.told)
		}
	}
}
