package crdwriter

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

func TestReadyCondition(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	up := func(n string) checks.TargetState { return target(n, checks.ReasonReady, "", t0) }
	down := func(n string, r checks.Reason, msg string) checks.TargetState { return target(n, r, msg, t0) }
	tests := []struct {
		name        string
		targets     []checks.TargetState
		status      metav1.ConditionStatus
		reason      string
		message     string
		targetsText string
	}{
		{"no targets yet", nil, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingFirstCheck, "the provider has not been checked yet", "0/0"},
		{"one ready", []checks.TargetState{up("api")}, metav1.ConditionTrue, v1alpha1.ReasonAllTargetsReady, "the target is ready", "1/1"},
		{"all ready", []checks.TargetState{up("a"), up("b"), up("c")}, metav1.ConditionTrue, v1alpha1.ReasonAllTargetsReady, "all 3 targets ready", "3/3"},
		{"one down", []checks.TargetState{up("hv1"), down("hv2", kvmcheck.ReasonTCPUnreachable, "dial tcp: connection refused")},
			metav1.ConditionFalse, "TCPUnreachable", "1 of 2 targets down: hv2 (TCPUnreachable): dial tcp: connection refused", "1/2"},
		{"down sharing a reason", []checks.TargetState{down("hv1", checks.ReasonTimeout, "x"), up("hv2"), down("hv3", checks.ReasonTimeout, "y")},
			metav1.ConditionFalse, "Timeout", "2 of 3 targets down (Timeout): hv1, hv3", "1/3"},
		{"down for different reasons", []checks.TargetState{down("hv1", checks.ReasonTimeout, "x"), down("hv2", kvmcheck.ReasonHostKeyMismatch, "y"), up("hv3")},
			metav1.ConditionFalse, v1alpha1.ReasonMultipleReasons, "2 of 3 targets down: hv1 (Timeout), hv2 (HostKeyMismatch)", "1/3"},
		// A target in maintenance is not ready, and not counted as down.
		{"in maintenance, none down", []checks.TargetState{up("vc"), down("esx1", checks.ReasonMaintenance, "in maintenance mode")},
			metav1.ConditionTrue, v1alpha1.ReasonAllTargetsReady, "1 of 2 targets ready, none down; 1 in maintenance: esx1", "1/2"},
		{"down and in maintenance", []checks.TargetState{down("esx1", checks.ReasonMaintenance, "m"), down("esx2", "HostDisconnected", "x"), up("vc")},
			metav1.ConditionFalse, "HostDisconnected", "1 of 3 targets down: esx2 (HostDisconnected): x; 1 in maintenance: esx1", "1/3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &providerMem{}
			m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Targets: tc.targets}, 0, time.Now(), time.Minute)
			st := m.render()
			if len(st.Conditions) != 1 {
				t.Fatalf("conditions = %+v, want one", st.Conditions)
			}
			c := st.Conditions[0]
			if c.Type != v1alpha1.ConditionReady || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Errorf("condition = %s %s %s %q, want Ready %s %s %q", c.Type, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
			}
			for _, ts := range st.Targets {
				if ts.Reason == string(checks.ReasonMaintenance) && ts.Up {
					t.Errorf("target %s in maintenance reads up", ts.Name)
				}
			}
			if st.TargetsReady != tc.targetsText || int(st.TotalTargets) != len(tc.targets) || st.Type != "kvm" {
				t.Errorf("targetsReady %q total %d type %q, want %q %d kvm", st.TargetsReady, st.TotalTargets, st.Type, tc.targetsText, len(tc.targets))
			}
		})
	}
}

// TestProviderWithoutTargets: once a round has run, a provider that lists no target at all
// (a kvm provider whose host files list none) has none in its object, and its condition says
// why; before the first round (a restart) the object's targets stay until the first verdicts.
func TestProviderWithoutTargets(t *testing.T) {
	now := time.Now()
	m := &providerMem{}
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Targets: []checks.TargetState{target("hv1", checks.ReasonReady, "", now)}}, 1, now, time.Hour)
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm"}, 0, now, time.Hour)
	if st := m.render(); len(st.Targets) != 1 {
		t.Fatalf("round 0 without targets: %d targets, want the known one kept", len(st.Targets))
	}
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Unchecked: []checks.UncheckedTarget{{Target: "hv1"}}}, 2, now, time.Hour)
	if st := m.render(); len(st.Targets) != 1 {
		t.Fatalf("hv1 listed without a verdict: %d targets, want it kept", len(st.Targets))
	}
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm"}, 3, now, time.Hour)
	st := m.render()
	c := st.Conditions[0]
	if len(st.Targets) != 0 || st.TotalTargets != 0 || st.TargetsReady != "0/0" ||
		c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonAwaitingFirstCheck || !strings.Contains(c.Message, "no targets") {
		t.Errorf("a provider without targets: %+v", st)
	}
}

func TestManyDownTargetsListedWithLimit(t *testing.T) {
	var ts []checks.TargetState
	for i := range 12 {
		ts = append(ts, target(fmt.Sprintf("hv%02d", i), checks.ReasonTimeout, "", time.Time{}))
	}
	ts[0].Reason = kvmcheck.ReasonPoolNotFound
	m := &providerMem{}
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Targets: ts}, 0, time.Now(), 0)
	c := m.render().Conditions[0]
	want := "12 of 12 targets down: hv00 (PoolNotFound), hv01 (Timeout), hv02 (Timeout), hv03 (Timeout), hv04 (Timeout), hv05 (Timeout), hv06 (Timeout), hv07 (Timeout), hv08 (Timeout), hv09 (Timeout) and 2 more"
	if c.Message != want || c.Reason != v1alpha1.ReasonMultipleReasons {
		t.Errorf("condition = %s %q\nwant MultipleReasons %q", c.Reason, c.Message, want)
	}
}

func TestTargetListBounded(t *testing.T) {
	const total = v1alpha1.MaxTargets + 44
	var ts []checks.TargetState
	for i := range total {
		r := checks.ReasonReady
		if i%50 == 49 { // 6 down targets, spread out, some past the limit
			r = kvmcheck.ReasonSSHAuthFailed
		}
		ts = append(ts, target(fmt.Sprintf("hv%03d", i), r, "", time.Time{}))
	}
	m := &providerMem{}
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Targets: ts}, 0, time.Now(), 0)
	st := m.render()
	if len(st.Targets) != v1alpha1.MaxTargets || int(st.OmittedTargets) != total-v1alpha1.MaxTargets {
		t.Fatalf("targets %d omitted %d, want %d and %d", len(st.Targets), st.OmittedTargets, v1alpha1.MaxTargets, total-v1alpha1.MaxTargets)
	}
	if st.TotalTargets != total || st.ReadyTargets != total-6 || st.TargetsReady != fmt.Sprintf("%d/%d", total-6, total) {
		t.Errorf("counts = %d/%d %q, want every target counted", st.ReadyTargets, st.TotalTargets, st.TargetsReady)
	}
	down, prev := 0, ""
	for _, tgt := range st.Targets {
		if !tgt.Up {
			down++
		}
		if tgt.Name <= prev {
			t.Fatalf("targets out of the checker's order: %s after %s", tgt.Name, prev)
		}
		prev = tgt.Name
	}
	if down != 6 {
		t.Errorf("%d down targets listed, want all 6", down)
	}
	if c := st.Conditions[0]; !strings.HasSuffix(c.Message, fmt.Sprintf("(44 targets not listed in status.targets, which holds at most %d)", v1alpha1.MaxTargets)) {
		t.Errorf("condition message %q does not note the omitted targets", c.Message)
	}
}

func TestTransitionTimes(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	t0 := now.Add(-10 * time.Minute)
	m := &providerMem{}
	ps := func(ts ...checks.TargetState) *checks.ProviderState {
		return &checks.ProviderState{Name: "p", Type: "kvm", Targets: ts}
	}
	ev := m.observe(ps(target("a", checks.ReasonReady, "", t0), target("b", checks.ReasonReady, "", t0)), 0, now, time.Hour)
	if len(ev) != 0 {
		t.Errorf("events for targets first seen up: %+v", ev)
	}
	c := m.render().Conditions[0]
	if !c.LastTransitionTime.Equal(&metav1.Time{Time: now}) {
		t.Errorf("first condition time %s, want now %s", c.LastTransitionTime, now)
	}

	// b goes down at t1: its time and the condition's move to t1, one Warning Event.
	t1 := now.Add(time.Minute)
	ev = m.observe(ps(target("a", checks.ReasonReady, "", t0), target("b", kvmcheck.ReasonTCPUnreachable, "refused", t1)), 0, t1.Add(time.Second), time.Hour)
	if len(ev) != 1 || ev[0].eventType != "Warning" || ev[0].reason != "TCPUnreachable" || ev[0].message != "target b is down (TCPUnreachable): refused" {
		t.Errorf("events = %+v, want one Warning TCPUnreachable", ev)
	}
	st := m.render()
	if got := st.Targets[1].LastTransitionTime.Time; !got.Equal(t1) {
		t.Errorf("b's transition time %s, want %s", got, t1)
	}
	if got := st.Conditions[0]; got.Status != metav1.ConditionFalse || !got.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("condition %s since %s, want False since %s", got.Status, got.LastTransitionTime, t1)
	}

	// Still down with another reason (the runner's Since moves, ours does not): one Event, no move.
	t2 := t1.Add(time.Minute)
	ev = m.observe(ps(target("a", checks.ReasonReady, "", t0), target("b", kvmcheck.ReasonSSHAuthFailed, "denied", t2)), 0, t2, time.Hour)
	if len(ev) != 1 || ev[0].reason != "SSHAuthFailed" || ev[0].eventType != "Warning" {
		t.Errorf("events = %+v, want one Warning SSHAuthFailed", ev)
	}
	st = m.render()
	if got := st.Targets[1]; !got.LastTransitionTime.Time.Equal(t1) || got.Reason != "SSHAuthFailed" {
		t.Errorf("b = %+v, want reason SSHAuthFailed since %s", got, t1)
	}
	if got := st.Conditions[0]; !got.LastTransitionTime.Time.Equal(t1) || got.Reason != "SSHAuthFailed" {
		t.Errorf("condition %s since %s, want reason SSHAuthFailed since %s", got.Reason, got.LastTransitionTime, t1)
	}

	// Rounds without a flip move nothing and report nothing.
	for i := range 3 {
		at := t2.Add(time.Duration(i+1) * time.Minute)
		if ev := m.observe(ps(target("a", checks.ReasonReady, "", t0), target("b", kvmcheck.ReasonSSHAuthFailed, "denied", t2)), 0, at, time.Hour); len(ev) != 0 {
			t.Errorf("round %d: events %+v, want none", i, ev)
		}
	}
	if !sameVisible(&st, ptr(m.render())) {
		t.Error("status changed in rounds without a change")
	}

	// Back up at t3: one Normal Ready Event, times move to t3.
	t3 := t2.Add(10 * time.Minute)
	ev = m.observe(ps(target("a", checks.ReasonReady, "", t0), target("b", checks.ReasonReady, "", t3)), 0, t3, time.Hour)
	if len(ev) != 1 || ev[0].eventType != "Normal" || ev[0].reason != "Ready" || !strings.Contains(ev[0].message, "target b is ready again after 11m0s down (was SSHAuthFailed)") {
		t.Errorf("events = %+v, want one Normal Ready", ev)
	}
	st = m.render()
	if got := st.Conditions[0]; got.Status != metav1.ConditionTrue || !got.LastTransitionTime.Time.Equal(t3) {
		t.Errorf("condition %s since %s, want True since %s", got.Status, got.LastTransitionTime, t3)
	}

	// Restart: memory seeded from the object keeps every time.
	m2 := memFromStatus(&st)
	ev = m2.observe(ps(target("a", checks.ReasonReady, "", now.Add(time.Hour)), target("b", checks.ReasonReady, "", now.Add(time.Hour))), 0, now.Add(time.Hour), time.Hour)
	if len(ev) != 0 {
		t.Errorf("events after a restart without a change: %+v", ev)
	}
	if st2 := m2.render(); !sameVisible(&st, &st2) {
		t.Errorf("status after a restart differs:\n%+v\n%+v", st, st2)
	}
}

func TestStaleness(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	m := &providerMem{}
	old := target("a", checks.ReasonReady, "", now.Add(-time.Hour))
	old.CheckedAt = now.Add(-4 * time.Minute)
	m.observe(&checks.ProviderState{Name: "p", Type: "gcp", Targets: []checks.TargetState{old}}, 0, now, 3*time.Minute)
	st := m.render()
	c := st.Conditions[0]
	if c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonChecksStale || !strings.Contains(c.Message, "stale after 3m0s") {
		t.Errorf("condition = %s %s %q, want Unknown ChecksStale", c.Status, c.Reason, c.Message)
	}
	if len(st.Targets) != 1 || !st.Targets[0].Up {
		t.Errorf("stale targets lost their last verdicts: %+v", st.Targets)
	}
	// Fresh again: True, since now.
	fresh := target("a", checks.ReasonReady, "", now.Add(-time.Hour))
	m.observe(&checks.ProviderState{Name: "p", Type: "gcp", Targets: []checks.TargetState{fresh}}, 0, now.Add(time.Minute), 3*time.Minute)
	c = m.render().Conditions[0]
	if c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(now.Add(time.Minute)) {
		t.Errorf("condition = %s since %s, want True since %s", c.Status, c.LastTransitionTime, now.Add(time.Minute))
	}
}

func TestMessageOnlyChangeIsNotVisible(t *testing.T) {
	now := time.Now()
	m := &providerMem{}
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Targets: []checks.TargetState{target("a", checks.ReasonTimeout, "after 10.1s", now)}}, 0, now, 0)
	a := m.render()
	m.observe(&checks.ProviderState{Name: "p", Type: "kvm", Targets: []checks.TargetState{target("a", checks.ReasonTimeout, "after 10.2s", now)}}, 0, now, 0)
	b := m.render()
	if !sameVisible(&a, &b) {
		t.Error("a change of message alone counts as visible")
	}
	if a.Targets[0].Message == b.Targets[0].Message {
		t.Error("the new message was not kept for the next write")
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 600) // 1200 bytes
	got := checks.Clip(s, v1alpha1.MaxTargetMessageLength)
	if len(got) > v1alpha1.MaxTargetMessageLength || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
		t.Errorf("clip gave %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if checks.Clip("short", 10) != "short" {
		t.Error("clip changed a short string")
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkObserveRender measures the writer's work per round for a large provider (what it
// does for every snapshot, even when nothing is written).
func BenchmarkObserveRender(b *testing.B) {
	var ts []checks.TargetState
	for i := range 300 {
		ts = append(ts, target(fmt.Sprintf("hv%03d", i), checks.ReasonReady, "pool default running", time.Now()))
	}
	ps := &checks.ProviderState{Name: "p", Type: "kvm", Targets: ts}
	m := &providerMem{}
	m.observe(ps, 0, time.Now(), time.Hour)
	prev := m.render()
	b.ResetTimer()
	for b.Loop() {
		m.observe(ps, 0, time.Now(), time.Hour)
		st := m.render()
		if !sameVisible(&prev, &st) {
			b.Fatal("status changed")
		}
	}
}

// A host entering maintenance records a Normal Event that says so, not a Warning that it is
// down; leaving it says how long it was in maintenance.
func TestMaintenanceEvents(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	m := &providerMem{}
	ps := func(ts ...checks.TargetState) *checks.ProviderState {
		return &checks.ProviderState{Name: "vc", Type: "vsphere", Targets: ts}
	}
	m.observe(ps(target("esx1", checks.ReasonReady, "", now)), 0, now, time.Hour)
	t1 := now.Add(time.Minute)
	ev := m.observe(ps(target("esx1", checks.ReasonMaintenance, "in maintenance mode", t1)), 0, t1, time.Hour)
	if len(ev) != 1 || ev[0].eventType != "Normal" || ev[0].reason != "Maintenance" || ev[0].message != "target esx1 is in maintenance: in maintenance mode" {
		t.Errorf("events = %+v, want one Normal Maintenance", ev)
	}
	if c := m.render().Conditions[0]; c.Status != metav1.ConditionTrue {
		t.Errorf("condition %s %s %q with its one target in maintenance, want True", c.Status, c.Reason, c.Message)
	}
	t2 := t1.Add(3 * time.Minute)
	ev = m.observe(ps(target("esx1", checks.ReasonReady, "", t2)), 0, t2, time.Hour)
	if len(ev) != 1 || ev[0].message != "target esx1 is ready again after 3m0s in maintenance (was Maintenance)" {
		t.Errorf("events = %+v, want one saying the host is back after 3m0s in maintenance", ev)
	}
}
