package crdwriter

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

func readyOf(obj *v1alpha1.ProviderHealth) metav1.Condition {
	for _, c := range obj.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

func TestWriterSteadyStateAndFlip(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	kvm := func(hv2 checks.Reason, sinceHv2 time.Time) checks.ProviderState {
		return provider("kvm-lab", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since), target("hv2", hv2, "msg", sinceHv2))
	}
	src := newFakeSource(provider("kvm-lab", kvmcheck.Type))
	h := newHarness(t, nil, objs, src, nil)
	h.start()
	h.round(kvm(checks.ReasonReady, since))

	obj := objs.get("kvm-lab")
	if obj == nil || obj.Labels[ManagedByLabel] != ManagedByValue {
		t.Fatalf("object = %+v, want one with our label", obj)
	}
	if c := readyOf(obj); c.Status != metav1.ConditionTrue || obj.Status.TargetsReady != "2/2" || obj.Status.LastHeartbeatTime == nil {
		t.Fatalf("status = %+v", obj.Status)
	}
	writesBefore := objs.count("status") + objs.count("create")
	rv := obj.ResourceVersion

	// Steady state: rounds with the same verdicts make no request at all.
	for range 5 {
		h.round(kvm(checks.ReasonReady, since))
	}
	if n := objs.count("status") + objs.count("create") + objs.count("get") - writesBefore; n != 0 {
		t.Errorf("%d requests in steady state, want 0", n)
	}
	if got := objs.get("kvm-lab").ResourceVersion; got != rv {
		t.Errorf("resource version moved from %s to %s in steady state", rv, got)
	}
	if ev := drainEvents(h.rec); len(ev) != 0 {
		t.Errorf("events in steady state: %v", ev)
	}

	// One target flips: exactly one status write and one Event.
	flip := time.Now().Truncate(time.Second)
	statusBefore := objs.count("status")
	metricBefore := h.writes(writeStatus, resultSuccess)
	h.round(kvm(kvmcheck.ReasonLibvirtConnectFailed, flip))
	h.round(kvm(kvmcheck.ReasonLibvirtConnectFailed, flip))
	if n := objs.count("status") - statusBefore; n != 1 {
		t.Errorf("%d status writes for one flip, want 1", n)
	}
	ev := drainEvents(h.rec)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning LibvirtConnectFailed target hv2 is down (LibvirtConnectFailed): msg") {
		t.Errorf("events = %q, want one Warning LibvirtConnectFailed", ev)
	}
	obj = objs.get("kvm-lab")
	c := readyOf(obj)
	if c.Status != metav1.ConditionFalse || c.Reason != "LibvirtConnectFailed" || obj.Status.TargetsReady != "1/2" {
		t.Errorf("status after the flip = %+v", obj.Status)
	}
	if got := obj.Status.Targets[0].LastTransitionTime.Time; !got.Equal(since.Truncate(time.Second)) {
		t.Errorf("hv1's transition time moved to %s", got)
	}
	if got := obj.Status.Targets[1].LastTransitionTime.Time; !got.Equal(flip) {
		t.Errorf("hv2's transition time %s, want %s", got, flip)
	}
	if h.writes(writeStatus, resultSuccess)-metricBefore != 1 || h.writes(writeCreate, resultSuccess) != 1 {
		t.Errorf("writes metric: status +%v create %v, want +1 and 1", h.writes(writeStatus, resultSuccess)-metricBefore, h.writes(writeCreate, resultSuccess))
	}
	if h.metric("crd_writer_leader") != 1 {
		t.Error("leader metric is not 1 while writing without leader election")
	}
	h.stop()
	if h.metric("crd_writer_leader") != 0 {
		t.Error("leader metric is not 0 after Run returned")
	}
}

func TestWriterHeartbeatCarriesMessages(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.HeartbeatInterval = 1500 * time.Millisecond })
	h.start()
	h.round(provider("gcp", gcp.Type, target("proj", gcp.ReasonRateLimited, "quota 1", since)))
	first := objs.get("gcp")
	statusBefore := objs.count("status")
	h.round(provider("gcp", gcp.Type, target("proj", gcp.ReasonRateLimited, "quota 2", since)))
	if objs.count("status") != statusBefore {
		t.Error("a message-only change was written before the heartbeat")
	}
	// The heartbeat (at most HeartbeatInterval after the last write) writes it.
	eventually(t, "the heartbeat wrote the new message", func() bool {
		o := objs.get("gcp")
		return len(o.Status.Targets) == 1 && o.Status.Targets[0].Message == "quota 2"
	})
	hb := objs.get("gcp").Status.LastHeartbeatTime
	if !hb.After(first.Status.LastHeartbeatTime.Time) {
		t.Errorf("heartbeat %s not after %s", hb, first.Status.LastHeartbeatTime)
	}
	if n := objs.count("status") - statusBefore; n != 1 {
		t.Errorf("%d heartbeat writes, want 1", n)
	}
}

func TestWriterConflictDeletionAndForeignObjects(t *testing.T) {
	objs := newFakeObjects()
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}})
	since := time.Now().Add(-time.Hour)
	p := func(r checks.Reason) []checks.ProviderState {
		return []checks.ProviderState{
			provider("ours", kubernetes.Type, target("api", r, "", since)),
			provider("theirs", kubernetes.Type, target("api", checks.ReasonReady, "", since)),
		}
	}
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, nil)
	h.start()
	h.round(p(checks.ReasonReady)...)
	if o := objs.get("theirs"); len(o.Status.Conditions) != 0 || o.Labels[ManagedByLabel] != "" {
		t.Errorf("an object without our label was modified: %+v", o)
	}
	if !strings.Contains(h.logs.String(), "belongs to someone else") {
		t.Errorf("no warning about the foreign object in the logs:\n%s", h.logs.String())
	}
	if got := h.metric("crd_writer_name_clashes"); got != 1 {
		t.Errorf("name clashes metric = %v, want 1", got)
	}
	if ev := drainEvents(h.rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning NameClash exporter instance \"provider-health-exporter\" (Lease default/provider-health-exporter) also has a provider named theirs") {
		t.Errorf("events = %q, want one NameClash", ev)
	}

	// Someone else bumped the object: a conflict, resolved by re-reading.
	objs.mu.Lock()
	objs.conflictOnce["ours"] = true
	objs.mu.Unlock()
	getsBefore := objs.count("get")
	h.round(p(checks.ReasonForbidden)...)
	if c := readyOf(objs.get("ours")); c.Reason != "Forbidden" {
		t.Errorf("after a conflict the status is %+v", c)
	}
	if h.writes(writeStatus, resultConflict) != 1 || objs.count("get")-getsBefore != 1 {
		t.Errorf("conflicts %v, gets %d: want 1 and 1", h.writes(writeStatus, resultConflict), objs.count("get")-getsBefore)
	}
	drainEvents(h.rec)

	// Deleted by someone: recreated at the next change, with the transition times memory kept.
	downSince := readyOf(objs.get("ours")).LastTransitionTime
	objs.remove("ours")
	h.round(p(checks.ReasonUnauthorized)...)
	o := objs.get("ours")
	if o == nil {
		t.Fatal("the deleted object was not recreated at the next change")
	}
	if c := readyOf(o); c.Reason != "Unauthorized" || !c.LastTransitionTime.Equal(&downSince) {
		t.Errorf("recreated status = %+v, want Unauthorized since %s", c, downSince)
	}
	if ev := drainEvents(h.rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning Unauthorized target api is still down, now Unauthorized (was Forbidden)") {
		t.Errorf("events = %q", ev)
	}
}

func TestWriterGarbageCollection(t *testing.T) {
	objs := newFakeObjects()
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: ownedBy("old", DefaultInstance, "default/"+DefaultInstance)})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "theirs-old"}})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "other-manager", Labels: map[string]string{ManagedByLabel: "someone-else"}}})
	since := time.Now().Add(-time.Hour)
	a := provider("a", gcp.Type, target("p", checks.ReasonReady, "", since))
	b := provider("b", gcp.Type, target("p", checks.ReasonReady, "", since))
	src := newFakeSource(a, b)
	h := newHarness(t, nil, objs, src, nil)
	h.start()
	h.round(a, b)
	if objs.get("old") != nil {
		t.Error("our object of an unconfigured provider survived the start")
	}
	if objs.get("theirs-old") == nil || objs.get("other-manager") == nil {
		t.Error("an object without our label was deleted")
	}
	if objs.get("a") == nil || objs.get("b") == nil {
		t.Fatal("configured providers have no objects")
	}

	// A reload drops b: the runner publishes a snapshot without it.
	h.round(a)
	if objs.get("b") != nil {
		t.Error("b's object survived the reload that removed b")
	}
	if objs.get("a") == nil || objs.get("theirs-old") == nil {
		t.Error("the reload deleted the wrong objects")
	}
	h.stop()

	// Checks off: all of ours go, nothing else.
	if err := h.w.DeleteAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if objs.get("a") != nil {
		t.Error("DeleteAll left one of ours")
	}
	if objs.get("theirs-old") == nil || objs.get("other-manager") == nil {
		t.Error("DeleteAll deleted an object that is not ours")
	}
	if got := h.writes(writeDelete, resultSuccess); got != 3 {
		t.Errorf("delete writes = %v, want 3", got)
	}
}

func TestWriterRestartKeepsTransitionTimes(t *testing.T) {
	objs := newFakeObjects()
	down := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, nil)
	h.start()
	h.round(provider("k", kubernetes.Type, target("api", checks.ReasonAPIUnreachable, "", down)))
	before := objs.get("k")
	h.stop()
	drainEvents(h.rec)

	// A new process: the runner's Since is its own first check; round 0 lists no targets yet,
	// and a round that did not reach the target lists it without a verdict.
	src2 := newFakeSource(provider("k", kubernetes.Type))
	h2 := newHarness(t, nil, objs, src2, nil)
	h2.start()
	notReached := provider("k", kubernetes.Type)
	notReached.Unchecked = []checks.UncheckedTarget{{Target: "api", Listed: time.Now()}}
	h2.round(notReached)
	h2.round(provider("k", kubernetes.Type, target("api", checks.ReasonAPIUnreachable, "", time.Now())))
	after := objs.get("k")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a restart without a change wrote the object:\n%+v\n%+v", before.Status, after.Status)
	}
	if got := after.Status.Targets[0].LastTransitionTime.Time; !got.Equal(down) {
		t.Errorf("transition time after a restart %s, want %s", got, down)
	}
	if ev := drainEvents(h2.rec); len(ev) != 0 {
		t.Errorf("events after a restart without a change: %q", ev)
	}
}

func TestWriterOutageAndMissingCRD(t *testing.T) {
	objs := newFakeObjects()
	objs.noCRD = true
	since := time.Now().Add(-time.Hour)
	src := newFakeSource(provider("k", kubernetes.Type))
	h := newHarness(t, nil, objs, src, nil)
	h.start()
	eventually(t, "several list attempts", func() bool { return objs.count("list") >= 3 })
	if n := strings.Count(h.logs.String(), "kubectl apply -f deploy/crd/"); n != 1 {
		t.Errorf("the missing CRD was logged %d times, want once:\n%s", n, h.logs.String())
	}
	objs.mu.Lock()
	objs.noCRD = false
	objs.mu.Unlock()
	h.round(provider("k", kubernetes.Type, target("api", checks.ReasonReady, "", since)))

	// The API server goes away; rounds go on (the writer never blocks them) and the writer
	// catches up with the newest one when it is back.
	objs.setFail(errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"))
	src.publish(provider("k", kubernetes.Type, target("api", checks.ReasonForbidden, "", time.Now())))
	eventually(t, "failed attempts", func() bool { return h.writes(writeStatus, resultError) >= 3 })
	up := time.Now().Truncate(time.Second)
	src.publish(provider("k", kubernetes.Type, target("api", checks.ReasonReady, "", up)))
	objs.setFail(nil)
	h.round(provider("k", kubernetes.Type, target("api", checks.ReasonReady, "", up)))
	o := objs.get("k")
	if c := readyOf(o); c.Status != metav1.ConditionTrue || !o.Status.Targets[0].LastTransitionTime.Time.Equal(up) {
		t.Errorf("after the outage: %+v", o.Status)
	}
	// Both transitions seen during the outage are reported once the API server is back.
	eventually(t, "two events", func() bool { return len(h.rec.Events) >= 2 })
	ev := drainEvents(h.rec)
	if len(ev) != 2 || !strings.HasPrefix(ev[0], "Warning Forbidden") || !strings.HasPrefix(ev[1], "Normal Ready") {
		t.Errorf("events = %q, want the down and the up transition", ev)
	}
	if h.writes(writeStatus, resultError) < 1 {
		t.Error("failed writes were not counted")
	}
}

func TestWriterStaleness(t *testing.T) {
	objs := newFakeObjects()
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.StaleAfter = 300 * time.Millisecond })
	h.start()
	h.round(provider("k", kubernetes.Type, target("api", checks.ReasonReady, "", time.Now())))
	if c := readyOf(objs.get("k")); c.Status != metav1.ConditionTrue {
		t.Fatalf("condition %+v", c)
	}
	// No more rounds: the writer notices by itself that the results went stale.
	eventually(t, "Ready turns Unknown", func() bool {
		c := readyOf(objs.get("k"))
		return c.Status == metav1.ConditionUnknown && c.Reason == v1alpha1.ReasonChecksStale
	})
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a rest.Config succeeded")
	}
	_, err := New(Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, LeaderElect: true,
		LeaseDuration: time.Second, RenewDeadline: 2 * time.Second})
	if err == nil {
		t.Error("New accepted a lease duration shorter than the renew deadline")
	}
	w, err := New(Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if w.opts.StaleAfter != 3*time.Minute || w.opts.HeartbeatInterval != DefaultHeartbeatInterval || w.opts.Identity == "" {
		t.Errorf("defaults = %+v", w.opts)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("Run without a Source succeeded")
	}
}

// The snapshot's providers are the configured ones: a provider that leaves the snapshot loses its
// object.
func TestWriterGarbageFromSnapshot(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	a := provider("a", gcp.Type, target("p", checks.ReasonReady, "", since))
	b := provider("b", gcp.Type, target("p", checks.ReasonReady, "", since))
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.HeartbeatInterval = time.Hour })
	h.start()
	h.round(a, b)
	if objs.get("b") == nil {
		t.Fatal("b has no object")
	}
	h.round(a)
	eventually(t, "b's object is deleted", func() bool { return objs.get("b") == nil })
	// And the writer is idle again: no request while nothing changes.
	total := func() int {
		return objs.count("list") + objs.count("get") + objs.count("create") + objs.count("status") + objs.count("delete")
	}
	before := total()
	time.Sleep(200 * time.Millisecond)
	if n := total() - before; n != 0 {
		t.Errorf("%d requests while idle, want 0", n)
	}
}

// A provider that keeps its name but changes type (a reload) starts afresh: the runner dropped
// its targets, so the status must not show the new type beside the old targets and verdict.
func TestWriterTypeChangeResetsProvider(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, nil)
	h.start()
	h.round(provider("p", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since), target("hv2", checks.ReasonReady, "", since)))
	if obj := objs.get("p"); obj == nil || obj.Status.TotalTargets != 2 || readyOf(obj).Status != metav1.ConditionTrue {
		t.Fatalf("status before the reload = %+v", obj)
	}
	drainEvents(h.rec)

	// The reload: same name, another type, no targets checked yet.
	changed := time.Now().Truncate(time.Second)
	h.round(provider("p", gcp.Type))
	obj := objs.get("p")
	st := obj.Status
	c := readyOf(obj)
	if st.Type != string(gcp.Type) || len(st.Targets) != 0 || st.TotalTargets != 0 || st.ReadyTargets != 0 || st.TargetsReady != "0/0" {
		t.Errorf("status after the type change = %+v, want type gcp and no targets", st)
	}
	if c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonAwaitingFirstCheck || c.LastTransitionTime.Time.Before(changed) {
		t.Errorf("Ready after the type change = %+v, want Unknown AwaitingFirstCheck since the change", c)
	}

	// The new checker's first verdict: a fresh target, first seen down.
	down := time.Now().Truncate(time.Second)
	h.round(provider("p", gcp.Type, target("my-project", checks.ReasonForbidden, "denied", down)))
	obj = objs.get("p")
	if len(obj.Status.Targets) != 1 || obj.Status.Targets[0].Name != "my-project" || readyOf(obj).Reason != "Forbidden" {
		t.Errorf("status after the first check of the new type = %+v", obj.Status)
	}
	if ev := drainEvents(h.rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning Forbidden target my-project is down") {
		t.Errorf("events = %q, want the new target's down Event only", ev)
	}
}

// With leader election, a term makes no write once the elector has observed another holder of
// the Lease, even though client-go has not given up renewing yet (its context is still live).
func TestWriterStopsWritingWhenAnotherHolderIsObserved(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	p := func(r checks.Reason) checks.ProviderState {
		return provider("p", kubernetes.Type, target("api", r, "", since))
	}
	src := newFakeSource()
	// Polled rarely, so that the gate before each write is what stops this term.
	h := newHarness(t, nil, objs, src, func(o *Options) { o.RetryPeriod = time.Hour })
	var leading atomic.Bool
	leading.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.w.lead(ctx, &leaseView{isLeader: leading.Load, renewed: time.Now, renewDeadline: time.Hour})
	}()
	h.round(p(checks.ReasonReady))
	if readyOf(objs.get("p")).Status != metav1.ConditionTrue {
		t.Fatalf("the leader did not write: %+v", objs.get("p").Status)
	}
	drainEvents(h.rec)
	writes := func() int { return objs.count("create") + objs.count("status") + objs.count("delete") }
	before := writes()

	leading.Store(false) // the elector saw another holder
	src.publish(p(checks.ReasonForbidden))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not end after another holder was observed")
	}
	if n := writes() - before; n != 0 {
		t.Errorf("%d writes after another holder was observed", n)
	}
	if ev := drainEvents(h.rec); len(ev) != 0 {
		t.Errorf("Events after another holder was observed: %q", ev)
	}
	if got := readyOf(objs.get("p")); got.Status != metav1.ConditionTrue {
		t.Errorf("the object changed after another holder was observed: %+v", got)
	}
	if !strings.Contains(h.logs.String(), "another replica holds the lease now") {
		t.Error("ending the term was not logged")
	}
}

// Objects of another instance or deployment are never written or deleted, by garbage
// collection, by checks turned off, or when a provider of the same name is configured (a name
// clash). Objects that name no deployment (no instance label, or no deployment annotation)
// belong to nobody: no instance takes them, the default one neither.
func TestWriterInstancesKeepToTheirOwn(t *testing.T) {
	objs := newFakeObjects()
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: ownedBy("b-only", "team-b", "default/team-b")})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: ownedBy("shared", "team-b", "default/team-b")})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: ownedBy("a-old", "team-a", "default/team-a")})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: ownedBy("a-elsewhere", "team-a", "other-namespace/team-a")})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Labels: map[string]string{ManagedByLabel: ManagedByValue}}})
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "no-deployment", Labels: map[string]string{ManagedByLabel: ManagedByValue, InstanceLabel: DefaultInstance}}})
	since := time.Now().Add(-time.Hour)
	mine := provider("a-new", gcp.Type, target("p", checks.ReasonReady, "", since))
	shared := provider("shared", gcp.Type, target("p", checks.ReasonForbidden, "", since))
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.Instance = "team-a" })
	h.start()
	h.round(mine, shared)

	if objs.get("a-old") != nil {
		t.Error("team-a's object of an unconfigured provider survived team-a's start")
	}
	for _, name := range []string{"b-only", "shared", "legacy", "a-elsewhere", "no-deployment"} {
		if o := objs.get(name); o == nil || len(o.Status.Conditions) != 0 {
			t.Errorf("team-a deleted or wrote %s, which is not its own: %+v", name, o)
		}
	}
	if o := objs.get("a-new"); o == nil || o.Labels[InstanceLabel] != "team-a" || o.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("team-a's new object lacks its labels: %+v", o)
	}
	if got := h.metric("crd_writer_name_clashes"); got != 1 {
		t.Errorf("name clashes = %v, want 1 (shared)", got)
	}
	ev := drainEvents(h.rec)
	if len(ev) != 1 || !strings.Contains(ev[0], `NameClash exporter instance "team-a" (Lease default/team-a) also has a provider named shared and leaves this object alone: it belongs to exporter instance "team-b" of the deployment with the Lease default/team-b`) {
		t.Errorf("events = %q, want one NameClash about shared", ev)
	}
	if !strings.Contains(h.logs.String(), `owner="exporter instance \"team-b\" of the deployment with the Lease default/team-b"`) {
		t.Errorf("the clash is not logged with its owner:\n%s", h.logs.String())
	}
	h.stop()
	if err := h.w.DeleteAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if objs.get("a-new") != nil {
		t.Error("DeleteAll left team-a's object")
	}
	for _, name := range []string{"b-only", "shared", "legacy", "a-elsewhere", "no-deployment"} {
		if objs.get(name) == nil {
			t.Errorf("team-a's DeleteAll deleted %s", name)
		}
	}

	// Nor does the default instance take the objects that name no deployment.
	d := newHarness(t, nil, objs, newFakeSource(), nil)
	if err := d.w.DeleteAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if objs.get("legacy") == nil || objs.get("no-deployment") == nil {
		t.Error("the default instance's DeleteAll deleted an object of no deployment")
	}
}

// A leader whose last renewal of the Lease is older than the renew deadline makes no write, even
// though its elector has not observed another holder (a replica frozen past its lease); it
// writes again once the Lease is renewed.
func TestWriterFencedByRenewalAge(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	p := func(r checks.Reason) checks.ProviderState {
		return provider("p", kubernetes.Type, target("api", r, "", since))
	}
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.RetryPeriod = 50 * time.Millisecond })
	var renewed atomic.Pointer[time.Time]
	now := time.Now()
	renewed.Store(&now)
	lease := &leaseView{isLeader: func() bool { return true }, renewed: func() time.Time { return *renewed.Load() }, renewDeadline: time.Second}
	h.lead(lease)
	h.round(p(checks.ReasonReady))
	drainEvents(h.rec)
	writes := func() int { return objs.count("create") + objs.count("status") + objs.count("delete") }
	before := writes()

	stale := time.Now().Add(-2 * time.Second) // the last renewal, as a frozen replica wakes
	renewed.Store(&stale)
	src.publish(p(checks.ReasonForbidden))
	eventually(t, "the overdue renewal is logged", func() bool {
		return strings.Contains(h.logs.String(), "the last renewal of the lease is older than the renew deadline")
	})
	if n := writes() - before; n != 0 {
		t.Errorf("%d writes with an overdue renewal", n)
	}
	if ev := drainEvents(h.rec); len(ev) != 0 {
		t.Errorf("Events with an overdue renewal: %q", ev)
	}
	// The transport refuses a write that got past the gate.
	if _, err := h.w.core.Events("default").Create(context.Background(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !errors.Is(err, errFenced) {
		t.Errorf("an Event sent with an overdue renewal: err = %v, want the fence's", err)
	}

	fresh := time.Now()
	renewed.Store(&fresh)
	eventually(t, "the change is written once the lease is renewed", func() bool { return readyOf(objs.get("p")).Reason == "Forbidden" })
	// The writer records the transition's Event after the status write returns.
	var ev []string
	eventually(t, "the transition's Event", func() bool { ev = append(ev, drainEvents(h.rec)...); return len(ev) > 0 })
	if ev = append(ev, drainEvents(h.rec)...); len(ev) != 1 {
		t.Errorf("events after the renewal = %q, want the one transition", ev)
	}
}

// A change of reasons alone waits for the minimum reason interval; a flip is written at once,
// with the newest reasons.
func TestWriterReasonOnlyChangesWait(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour)
	p := func(hv1, hv2 checks.Reason) checks.ProviderState {
		return provider("kvm-lab", kvmcheck.Type, target("hv1", hv1, "", since), target("hv2", hv2, "", since))
	}
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.MinReasonInterval, o.HeartbeatInterval = time.Hour, 2*time.Hour })
	h.start()
	h.round(p(kvmcheck.ReasonTCPUnreachable, checks.ReasonReady))
	before := objs.count("status")
	h.round(p(kvmcheck.ReasonSSHHandshakeFailed, checks.ReasonReady))
	h.round(p(kvmcheck.ReasonTCPUnreachable, checks.ReasonReady))
	h.round(p(kvmcheck.ReasonSSHHandshakeFailed, checks.ReasonReady))
	if n := objs.count("status") - before; n != 0 {
		t.Errorf("%d status writes for reason-only changes within the interval, want 0", n)
	}
	h.round(p(kvmcheck.ReasonSSHHandshakeFailed, kvmcheck.ReasonPoolInactive)) // hv2 flips
	if n := objs.count("status") - before; n != 1 {
		t.Errorf("%d status writes after a flip, want 1", n)
	}
	if o := objs.get("kvm-lab"); readyOf(o).Reason != "MultipleReasons" || o.Status.Targets[0].Reason != "SSHHandshakeFailed" {
		t.Errorf("the flip's write lacks the newest reasons: %+v", o.Status)
	}
}

// The migration docs/crd.md gives for a renamed --crd.instance: the old objects clash until
// they are given the new identity (label and annotation), then the renamed writer adopts them
// at its next re-check, keeping the object and its transition times.
func TestWriterAdoptsAMigratedObject(t *testing.T) {
	objs := newFakeObjects()
	since := time.Now().Add(-time.Hour).Truncate(time.Second)
	old := ownedBy("kvm-lab", "old", "default/old")
	objs.put(&v1alpha1.ProviderHealth{ObjectMeta: old})
	src := newFakeSource()
	h := newHarness(t, nil, objs, src, func(o *Options) { o.Instance, o.HeartbeatInterval = "new", 200*time.Millisecond })
	h.start()
	p := provider("kvm-lab", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since))
	h.round(p)
	if got := h.metric("crd_writer_name_clashes"); got != 1 {
		t.Fatalf("name clashes = %v before the migration, want 1", got)
	}
	if o := objs.get("kvm-lab"); len(o.Status.Conditions) != 0 {
		t.Fatalf("the old instance's object was written: %+v", o.Status)
	}
	uid := objs.get("kvm-lab").UID
	// kubectl label ... providerhealth.io/instance=new; kubectl annotate ... providerhealth.io/deployment=default/new
	objs.mu.Lock()
	o := objs.objs["kvm-lab"]
	o.Labels[InstanceLabel], o.Annotations[DeploymentAnnotation] = "new", "default/new"
	o.ResourceVersion = objs.nextRV()
	objs.mu.Unlock()
	eventually(t, "the migrated object is adopted and written", func() bool {
		o := objs.get("kvm-lab")
		return len(o.Status.Targets) == 1 && h.metric("crd_writer_name_clashes") == 0
	})
	if o := objs.get("kvm-lab"); o.UID != uid || !o.Status.Targets[0].LastTransitionTime.Time.Equal(since) {
		t.Errorf("the adopted object was replaced or lost its times: %+v", o)
	}
}
