package crdwriter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

// The writer under churn, restarts and bad objects, against the real API server (subtests of
// TestAgainstAPIServer).

// passesDuring counts the sync loop's passes while d passes.
func (h *harness) passesDuring(d time.Duration) int64 {
	before := h.w.passes.Load()
	time.Sleep(d)
	return h.w.passes.Load() - before
}

// testNoBusyLoop: with nothing to write, the sync loop waits. Two ways it used to spin until
// the next heartbeat: a reason change held back by the minimum reason interval that went back
// before the hold ran out, and a status the API server refuses (422) once a heartbeat is due.
func testNoBusyLoop(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour)
	kvmLab := func(r checks.Reason) checks.ProviderState {
		return provider("kvm-lab", kvmcheck.Type, target("hv1", r, "dial tcp 198.18.0.11:22: connect: connection refused", since))
	}
	src := newFakeSource()
	h := f.harness(t, f.userConfig("writer-spin-reason", "system:masters"), src, func(o *Options) {
		// 2s: the change of the next round (well within a second) is held back, whatever the
		// fraction of a second the heartbeat was truncated by.
		o.MinReasonInterval, o.HeartbeatInterval = 2*time.Second, time.Hour
	})
	h.start()
	h.round(kvmLab(kvmcheck.ReasonTCPUnreachable))
	h.round(kvmLab(kvmcheck.ReasonSSHHandshakeFailed)) // a reason-only change: held back
	h.round(kvmLab(kvmcheck.ReasonTCPUnreachable))     // back to what the object shows: nothing to write
	time.Sleep(2500 * time.Millisecond)                // the hold has run out
	if n := h.passesDuring(time.Second); n > 2 {
		t.Errorf("the sync loop made %d passes in a second with nothing to write after a held reason change went back, want at most 2", n)
	}
	if o := f.get(t, "kvm-lab"); o.Status.Targets[0].Reason != "TCPUnreachable" {
		t.Errorf("the object's reason = %s, want TCPUnreachable", o.Status.Targets[0].Reason)
	}
	h.stop()
	f.reset(t)

	// A 422 once a heartbeat is due: the object was written, a second later its new status is
	// refused; the heartbeat comes due before the refusal's re-check.
	const heartbeat = 3 * time.Second
	src = newFakeSource()
	h = f.harness(t, f.userConfig("writer-spin-422", "system:masters"), src, func(o *Options) { o.HeartbeatInterval = heartbeat })
	h.start()
	h.round(provider("kvm-lab", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since)))
	written := time.Now()
	time.Sleep(1500 * time.Millisecond)
	h.round(provider("kvm-lab", kvmcheck.Type, target(strings.Repeat("h", 300), checks.ReasonReady, "", since)))
	if got := h.metric("crd_writer_rejected_objects"); got != 1 {
		t.Fatalf("rejected objects = %v, want 1", got)
	}
	time.Sleep(time.Until(written.Add(heartbeat + 100*time.Millisecond))) // the heartbeat is due
	if n := h.passesDuring(time.Second); n > 2 {
		t.Errorf("the sync loop made %d passes in a second with a refused status and a heartbeat due, want at most 2", n)
	}
}

// testRestartBeforeFirstRound: a writer restarted before its first round publishes nothing less
// true than the object showed (an object of 1,000 targets lists 256 of them), and the first
// round records no Event for a transition the previous writer recorded.
func testRestartBeforeFirstRound(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-48 * time.Hour)
	var ts []checks.TargetState
	for i := range 1000 {
		r, msg := checks.ReasonReady, "pool default running, 1.2 TiB of 2.0 TiB available"
		if i%10 < 3 { // 300 down: more than the 256 the object lists
			r, msg = kvmcheck.ReasonTCPUnreachable, fmt.Sprintf("dial tcp 198.18.%d.%d:22: connect: connection refused", i/250, i%250)
		}
		ts = append(ts, target(fmt.Sprintf("hv%04d", i), r, msg, since))
	}
	big := provider("kvm-fleet", kvmcheck.Type, ts...)
	first := newFakeSource()
	h := f.harness(t, f.userConfig("writer-before", "system:masters"), first, nil)
	h.start()
	h.round(big)
	before := f.get(t, "kvm-fleet")
	if before.Status.TargetsReady != "700/1000" || len(before.Status.Targets) != v1alpha1.MaxTargets {
		t.Fatalf("the first writer's object: %s, %d targets listed", before.Status.TargetsReady, len(before.Status.Targets))
	}
	h.stop()

	const user = "writer-restarted"
	// The restarted exporter's runner has not finished a round: the provider has no targets.
	src := newFakeSource(provider("kvm-fleet", kvmcheck.Type))
	h = f.harness(t, f.userConfig(user, "system:masters"), src, nil)
	h.start()
	h.round(provider("kvm-fleet", kvmcheck.Type))
	o := f.get(t, "kvm-fleet")
	if o.Status.TargetsReady != "700/1000" || o.Status.ReadyTargets != 700 || o.Status.TotalTargets != 1000 || o.Status.OmittedTargets != before.Status.OmittedTargets {
		t.Errorf("before its first round the restarted writer published %s (%d/%d, %d omitted), the object showed 700/1000",
			o.Status.TargetsReady, o.Status.ReadyTargets, o.Status.TotalTargets, o.Status.OmittedTargets)
	}
	if n := f.requests(t, user, isStatusUpdate); n != 0 {
		t.Errorf("the restarted writer wrote the status %d times before its first round, want 0", n)
	}
	h.round(big) // the first round: the same verdicts
	time.Sleep(time.Second)
	if n := f.requests(t, user, isEventWrite); n != 0 {
		t.Errorf("the restarted writer recorded %d Events for transitions already recorded, want 0", n)
	}
	if o := f.get(t, "kvm-fleet"); o.Status.TargetsReady != "700/1000" || !o.Status.Targets[0].LastTransitionTime.Time.Equal(since.Truncate(time.Second)) {
		t.Errorf("after the first round: %s, first target since %v", o.Status.TargetsReady, o.Status.Targets[0].LastTransitionTime)
	}
}

// testBadObjectHoldsNothingBack: a ValidatingAdmissionPolicy denies (403) the status writes of
// one provider's object. That object backs off alone: the other provider's flip is written in
// the same round, synced_round advances, and the failing object is visible (metric, log). Once
// the policy goes, the object is written.
func testBadObjectHoldsNothingBack(t *testing.T, f *kubeFixture) {
	ctx := context.Background()
	adm, err := admissionv1client.NewForConfig(f.env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	fail, forbidden := admissionregistrationv1.Fail, metav1.StatusReasonForbidden
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-bad-one"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupName}, APIVersions: []string{"v1alpha1"},
						Resources: []string{v1alpha1.Resource + "/status"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.metadata.name != 'bad-one'", Message: "bad-one may not be written", Reason: &forbidden,
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-bad-one"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "deny-bad-one",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unbind := func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	}
	t.Cleanup(unbind)
	f.putOwned(t, "bad-one")
	eventually(t, "the policy denies bad-one's status writes", func() bool {
		o := f.get(t, "bad-one")
		o.Status.Type = "gcp"
		_, err := f.admin.UpdateStatus(ctx, o)
		return apierrors.IsForbidden(err)
	})

	since := time.Now().Add(-time.Hour)
	ph := func(name string, r checks.Reason) checks.ProviderState {
		return provider(name, gcp.Type, target("p", r, "", since))
	}
	src := newFakeSource()
	// A backoff of an hour: a backoff of every provider would hold good-one's flip back.
	h := f.harness(t, f.userConfig("writer-bad-object", "system:masters"), src, func(o *Options) {
		o.MaxRetryBackoff, o.HeartbeatInterval = time.Hour, time.Hour
	})
	h.start()
	h.round(ph("bad-one", checks.ReasonReady), ph("good-one", checks.ReasonReady)) // synced_round advances
	h.round(ph("bad-one", checks.ReasonForbidden), ph("good-one", checks.ReasonForbidden))
	if o := f.get(t, "good-one"); o == nil || readyOf(o).Reason != "Forbidden" {
		t.Errorf("good-one's flip was not written within the round: %+v", o)
	}
	if got := h.metric("crd_writer_failing_objects"); got != 1 {
		t.Errorf("failing objects = %v, want 1", got)
	}
	if !strings.Contains(h.logs.String(), "provider=bad-one") || !strings.Contains(h.logs.String(), "writing this provider's ProviderHealth object failed") {
		t.Error("the failing object was not logged")
	}
	if o := f.get(t, "bad-one"); len(o.Status.Conditions) != 0 {
		t.Errorf("bad-one was written under the policy: %+v", o.Status)
	}
	// The status page's report names the failing object, with the policy's answer.
	r := h.w.Report()
	if !r.Writing || len(r.Problems) != 1 {
		t.Fatalf("report = %+v, want this writer writing with one problem (bad-one)", r)
	}
	if p := r.Problems[0]; p.Provider != "bad-one" || p.Problem != ProblemFailing || !strings.Contains(p.Err, "bad-one may not be written") ||
		p.Attempts < 1 || !p.RetryAt.After(p.Since) {
		t.Errorf("problem = %+v, want bad-one failing with the policy's message, its attempts and next retry", p)
	}
	if r.SyncedRound != src.Current().Round {
		t.Errorf("report's synced round = %d, want %d (good-one was written)", r.SyncedRound, src.Current().Round)
	}
	h.stop()
	if r := h.w.Report(); r.Writing || len(r.Problems) != 0 {
		t.Errorf("report after the term = %+v, want not writing, no problems", r)
	}

	// Without the policy, the next term writes it and the metric is back to 0.
	unbind()
	eventually(t, "the policy no longer applies", func() bool {
		o := f.get(t, "bad-one")
		o.Status.Type = "gcp"
		_, err := f.admin.UpdateStatus(ctx, o)
		return err == nil
	})
	h = f.harness(t, f.userConfig("writer-bad-object", "system:masters"), src, nil)
	h.start()
	h.round(ph("bad-one", checks.ReasonForbidden), ph("good-one", checks.ReasonForbidden))
	if o := f.get(t, "bad-one"); readyOf(o).Reason != "Forbidden" {
		t.Errorf("bad-one was not written once allowed: %+v", o.Status)
	}
	if got := h.metric("crd_writer_failing_objects"); got != 0 {
		t.Errorf("failing objects = %v once written, want 0", got)
	}
	if r := h.w.Report(); len(r.Problems) != 0 {
		t.Errorf("problems once written = %+v, want none", r.Problems)
	}
}

// testTwoWritersOneIdentity runs two writers of one identity without leader election (the
// replicas of a deployment without --crd.leader-elect): they overwrite each other, and each
// reports it (metric, log).
func testTwoWritersOneIdentity(t *testing.T, f *kubeFixture) {
	ph := func(r checks.Reason, since time.Time) checks.ProviderState {
		return provider("cluster-main", kubernetes.Type, target("api", r, "", since))
	}
	// Each checks on its own, so their verdicts differ a little (here: since when): each
	// finds the object written by the other and writes its own again.
	srcA, srcB := newFakeSource(), newFakeSource()
	a := f.harness(t, f.userConfig("writer-twin-a", "system:masters"), srcA, nil)
	b := f.harness(t, f.userConfig("writer-twin-b", "system:masters"), srcB, nil)
	a.start()
	b.start()
	for i := range 6 {
		r := checks.ReasonReady
		if i%2 == 1 {
			r = checks.ReasonForbidden
		}
		at := time.Now()
		a.round(ph(r, at))
		b.round(ph(r, at.Add(-time.Second)))
	}
	eventually(t, "both writers see the other's writes", func() bool {
		return a.metric("crd_writer_other_writer_writes_total") > 0 && b.metric("crd_writer_other_writer_writes_total") > 0
	})
	for _, h := range []*harness{a, b} {
		if !strings.Contains(h.logs.String(), "another exporter process with this deployment's identity writes") {
			t.Error("the other writer was not logged")
		}
	}
	if w := f.get(t, "cluster-main").Status.Writer; w != a.w.writerID && w != b.w.writerID {
		t.Errorf("status.writer = %q, want one of the writers' IDs", w)
	}

	// One writer alone (the other stopped, then restarted: a new process) reports nothing.
	b.stop()
	a.stop()
	c := f.harness(t, f.userConfig("writer-twin-a", "system:masters"), srcA, nil)
	c.start()
	for i := range 3 {
		r := checks.ReasonReady
		if i%2 == 0 {
			r = checks.ReasonForbidden
		}
		c.round(ph(r, time.Now()))
	}
	if got := c.metric("crd_writer_other_writer_writes_total"); got != 0 {
		t.Errorf("a single writer, restarted, reports %v writes of another writer, want 0", got)
	}
}

// testOlderBuildObject: an object of an older build (the instance label, no deployment
// annotation) is a clash whose log and Event say how to adopt it; adopted, it keeps its
// transition times of two days ago.
func testOlderBuildObject(t *testing.T, f *kubeFixture) {
	ctx := context.Background()
	long := metav1.NewTime(time.Now().Add(-48 * time.Hour).Truncate(time.Second))
	_, err := f.admin.Create(ctx, &v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: "kvm-old",
		Labels: map[string]string{ManagedByLabel: ManagedByValue, InstanceLabel: DefaultInstance}}})
	if err != nil {
		t.Fatal(err)
	}
	old := f.get(t, "kvm-old")
	old.Status = v1alpha1.ProviderHealthStatus{Type: "kvm", ReadyTargets: 1, TotalTargets: 2, TargetsReady: "1/2",
		Targets: []v1alpha1.TargetStatus{
			{Name: "hv1", Up: true, Reason: "Ready", LastTransitionTime: long},
			{Name: "hv2", Up: false, Reason: "TCPUnreachable", LastTransitionTime: long},
		},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "TCPUnreachable", Message: "1 of 2 targets down", LastTransitionTime: long}},
	}
	if _, err := f.admin.UpdateStatus(ctx, old); err != nil {
		t.Fatal(err)
	}
	const user = "writer-older-build"
	now := time.Now()
	p := provider("kvm-old", kvmcheck.Type, target("hv1", checks.ReasonReady, "", now), target("hv2", kvmcheck.ReasonTCPUnreachable, "refused", now))
	h := f.harness(t, f.userConfig(user, "system:masters"), newFakeSource(p), func(o *Options) { o.HeartbeatInterval = 2 * time.Second })
	h.start()
	h.round(p)
	eventually(t, "the clash is reported", func() bool { return h.metric("crd_writer_name_clashes") == 1 })
	adopt := "kubectl annotate ph kvm-old " + DeploymentAnnotation + "=" + exporterNamespace + "/" + DefaultInstance
	eventually(t, "the NameClash Event says how to adopt the object", func() bool {
		for _, e := range f.events(t, string(old.UID)) {
			if e.Reason == ReasonNameClash && strings.Contains(e.Message, adopt) && !strings.Contains(e.Message, "rename") {
				return true
			}
		}
		return false
	})
	if logs := h.logs.String(); !strings.Contains(logs, "older build") || strings.Contains(logs, "rename one of the providers") {
		t.Errorf("the log does not say what is true:\n%s", logs)
	}
	// The adoption the message gives (the instance label is already ours).
	o := f.get(t, "kvm-old")
	o.Annotations = map[string]string{DeploymentAnnotation: exporterNamespace + "/" + DefaultInstance}
	if _, err := f.admin.c.Update(ctx, o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the adopted object is written", func() bool {
		o := f.get(t, "kvm-old")
		return o.Status.Writer == h.w.writerID && h.metric("crd_writer_name_clashes") == 0
	})
	got := f.get(t, "kvm-old")
	for _, ts := range got.Status.Targets {
		if !ts.LastTransitionTime.Equal(&long) {
			t.Errorf("target %s: lastTransitionTime %v after the adoption, want %v (kept)", ts.Name, ts.LastTransitionTime, long)
		}
	}
	if c := readyOf(got); !c.LastTransitionTime.Equal(&long) {
		t.Errorf("Ready: lastTransitionTime %v after the adoption, want %v (kept)", c.LastTransitionTime, long)
	}
	time.Sleep(time.Second)
	if n := f.requests(t, user, func(e kube.AuditEvent) bool { return isEventWrite(e) && e.Code < 300 }); n != 1 {
		t.Errorf("%d Events written, want 1 (the NameClash): none for the verdicts the adopted object showed", n)
	}
}

// testEventBudgetPerTarget: one target changing reason every round spends its own Event
// budget, not the object's: another target's down Event is still recorded, and the dropped
// Events are counted.
func testEventBudgetPerTarget(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour)
	reasons := []checks.Reason{kvmcheck.ReasonTCPUnreachable, kvmcheck.ReasonSSHHandshakeFailed}
	src := newFakeSource()
	h := f.harness(t, f.userConfig("writer-event-budget", "system:masters"), src, nil)
	h.start()
	const rounds = 40
	for i := range rounds {
		h.round(provider("kvm-lab", kvmcheck.Type,
			target("hv1", reasons[i%2], "flapping between reasons", since),
			target("hv2", checks.ReasonReady, "", since)))
	}
	h.round(provider("kvm-lab", kvmcheck.Type,
		target("hv1", kvmcheck.ReasonTCPUnreachable, "flapping between reasons", since),
		target("hv2", kvmcheck.ReasonPoolInactive, "pool default is inactive", time.Now())))
	uid := string(f.get(t, "kvm-lab").UID)
	eventually(t, "hv2's down Event is recorded", func() bool {
		for _, e := range f.events(t, uid) {
			if strings.HasPrefix(e.Message, "target hv2 is down") && e.Annotations[TargetAnnotation] == "hv2" {
				return true
			}
		}
		return false
	})
	// hv1: its down Event, then a reason change in each of the other rounds and the last one.
	if got := h.metric("crd_writer_events_dropped_total", "cause", dropTargetBudget); got != rounds+1-eventTargetBurst {
		t.Errorf("events_dropped_total{cause=target_budget} = %v, want %d (hv1's Events beyond its budget)", got, rounds+1-eventTargetBurst)
	}
	var hv1 int32
	for _, e := range f.events(t, uid) {
		if e.Annotations[TargetAnnotation] == "hv1" {
			hv1 += e.Count
		}
	}
	if hv1 == 0 || hv1 > eventTargetBurst {
		t.Errorf("hv1's Events (counting repeats) = %d, want 1 to its budget, %d", hv1, eventTargetBurst)
	}
}
