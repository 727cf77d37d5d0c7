package crdwriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// testFenceExemptsOnlyTheLease closes the write fence and sends, through the writer's own
// clients, writes of objects whose names contain "leases": none reaches the API server. Only
// leader election's own requests pass: creating and updating this writer's Lease.
func testFenceExemptsOnlyTheLease(t *testing.T, f *kubeFixture) {
	ctx := context.Background()
	const user = "writer-fence"
	f.put(t, "leases-db", map[string]string{ManagedByLabel: ManagedByValue})
	h := f.harness(t, f.userConfig(user, "system:masters"), newFakeSource(), func(o *Options) { o.LeaderElect = true })
	h.w.fence.set(func() bool { return false }) // outside a term

	obj := f.get(t, "leases-db")
	obj.Status.Type = "kvm"
	_, err := h.w.objects.UpdateStatus(ctx, obj)
	if !errors.Is(err, errFenced) {
		t.Errorf("PUT providerhealths/leases-db/status with the fence closed: err = %v, want the fence's", err)
	}
	err = h.w.objects.Delete(ctx, "leases-db", obj.UID, obj.ResourceVersion)
	if !errors.Is(err, errFenced) {
		t.Errorf("DELETE providerhealths/leases-db with the fence closed: err = %v, want the fence's", err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "leases-db.x", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "ProviderHealth", Name: "leases-db"}, Reason: "Ready", Message: "x"}
	if _, err := h.w.core.Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); !errors.Is(err, errFenced) {
		t.Errorf("POST events leases-db.x with the fence closed: err = %v, want the fence's", err)
	}
	patch := []byte(`{"count":2}`)
	if _, err := h.w.core.Events(metav1.NamespaceDefault).Patch(ctx, "leases-db.x", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); !errors.Is(err, errFenced) {
		t.Errorf("PATCH events/leases-db.x with the fence closed: err = %v, want the fence's", err)
	}
	// Another Lease, in the Lease's namespace or another: not leader election's.
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "leases-db", Namespace: metav1.NamespaceDefault}}
	if _, err := h.w.coord.Leases(metav1.NamespaceDefault).Create(ctx, other, metav1.CreateOptions{}); !errors.Is(err, errFenced) {
		t.Errorf("POST a Lease in another namespace with the fence closed: err = %v, want the fence's", err)
	}
	mine := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: DefaultInstance, Namespace: exporterNamespace}}
	created, err := h.w.coord.Leases(exporterNamespace).Create(ctx, mine, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating this writer's Lease with the fence closed: %v", err)
	}
	holder := "fence-test"
	created.Spec.HolderIdentity = &holder
	if _, err := h.w.coord.Leases(exporterNamespace).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Errorf("updating this writer's Lease with the fence closed: %v", err)
	}

	n := f.requests(t, user, func(e kube.AuditEvent) bool {
		return e.Verb != "get" && (strings.Contains(e.Name, "leases-db") || e.Resource == v1alpha1.Resource || e.Resource == "events")
	})
	if n != 0 {
		t.Errorf("%d write requests about leases-db reached the API server with the fence closed", n)
	}
	if f.get(t, "leases-db").Status.Type != "" {
		t.Error("the status of leases-db was written with the fence closed")
	}
}

// installCRDVariant installs a copy of deploy/crd/ changed by mod (given the CRD's only version)
// and waits until the API server serves it as probe says (given a scratch object of ours);
// the test's cleanup installs the real CRD again.
func (f *kubeFixture) installCRDVariant(t *testing.T, mod func(version map[string]any), probe func(obj *v1alpha1.ProviderHealth) bool) {
	t.Helper()
	path := filepath.Join(f.root, "deploy", "crd", "providerhealth.io_providerhealths.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	mod(crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any))
	variant, err := json.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	f.env.ApplyCRD(t, variant)
	t.Cleanup(func() {
		f.env.ApplyCRDFile(t, path)
		eventually(t, "the real CRD is served again", func() bool {
			f.put(t, "crd-probe", nil)
			defer f.remove(t, "crd-probe")
			o := f.get(t, "crd-probe")
			o.Status.TargetsReady, o.Status.Type = "0/0", "kvm"
			got, err := f.admin.UpdateStatus(context.Background(), o)
			return err == nil && got.Status.TargetsReady == "0/0"
		})
	})
	eventually(t, "the API server serves the CRD variant", func() bool {
		f.put(t, "crd-probe", nil)
		defer f.remove(t, "crd-probe")
		return probe(f.get(t, "crd-probe"))
	})
}

func (f *kubeFixture) remove(t *testing.T, name string) {
	t.Helper()
	if err := f.admin.c.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete %s: %v", name, err)
	}
}

// testNoStatusSubresource installs a CRD without the status subresource: PUT …/status answers
// 404 although the object exists. The writer says so once (log, metric), makes one status
// write, does not take the objects for deleted, and completes its sync of every provider.
func testNoStatusSubresource(t *testing.T, f *kubeFixture) {
	f.installCRDVariant(t, func(v map[string]any) { delete(v, "subresources") }, func(o *v1alpha1.ProviderHealth) bool {
		o.Status.Type = "kvm"
		_, err := f.admin.UpdateStatus(context.Background(), o)
		return apierrors.IsNotFound(err)
	})
	const user = "writer-nostatus"
	since := time.Now().Add(-time.Hour)
	a := provider("a-first", gcp.Type, target("p", checks.ReasonReady, "", since))
	b := provider("b-second", gcp.Type, target("p", checks.ReasonReady, "", since))
	src := newFakeSource()
	h := f.harness(t, f.userConfig(user, "system:masters"), src, func(o *Options) { o.HeartbeatInterval = time.Hour })
	h.start()
	h.round(a, b) // the sync of every provider completes
	if f.get(t, "a-first") == nil || f.get(t, "b-second") == nil {
		t.Error("the objects were not created")
	}
	if got := h.metric("crd_writer_crd_mismatch", "problem", "no_status_subresource"); got != 1 {
		t.Errorf("crd_mismatch{problem=no_status_subresource} = %v, want 1", got)
	}
	h.round(provider("a-first", gcp.Type, target("p", checks.ReasonForbidden, "", time.Now())), b)
	if n := f.requests(t, user, isStatusUpdate); n != 1 {
		t.Errorf("%d status writes, want 1: the first finds no status subresource, the others wait", n)
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "has no status subresource"); n != 1 {
		t.Errorf("the missing status subresource was logged %d times, want once", n)
	}
	if strings.Contains(logs, "recreating") || h.writes(writeCreate, resultSuccess) != 2 {
		t.Errorf("the objects were taken for deleted (%v creates):\n%s", h.writes(writeCreate, resultSuccess), logs)
	}
	h.stop()

	// With the real CRD again, the next term writes the statuses and clears the metric.
	f.env.ApplyCRDFile(t, filepath.Join(f.root, "deploy", "crd", "providerhealth.io_providerhealths.yaml"))
	h2 := f.harness(t, f.userConfig(user, "system:masters"), src, nil)
	h2.start()
	eventually(t, "the statuses are written with the status subresource back", func() bool {
		o := f.get(t, "a-first")
		return o != nil && readyOf(o).Reason == "Forbidden" && len(f.get(t, "b-second").Status.Conditions) == 1
	})
	if got := h2.metric("crd_writer_crd_mismatch", "problem", "no_status_subresource"); got != 0 {
		t.Errorf("crd_mismatch{problem=no_status_subresource} = %v with the real CRD, want 0", got)
	}
}

// testRejectedObject writes a provider whose target name the CRD refuses (longer than 253
// characters: 422 Invalid) beside a valid one: the refused one is that provider's own problem
// (logged once, metric), it is not retried while it does not change, and the other provider's
// changes are written at once, without a backoff.
func testRejectedObject(t *testing.T, f *kubeFixture) {
	const user = "writer-rejected"
	since := time.Now().Add(-time.Hour)
	long := provider("kvm-long", kvmcheck.Type, target(strings.Repeat("h", 300), checks.ReasonReady, "", since))
	ok := func(r checks.Reason) checks.ProviderState {
		return provider("gcp-ok", gcp.Type, target("p", r, "", since))
	}
	src := newFakeSource()
	// A long backoff: a global backoff after the 422 would hold gcp-ok's next change back.
	h := f.harness(t, f.userConfig(user, "system:masters"), src, func(o *Options) {
		o.MaxRetryBackoff, o.HeartbeatInterval = time.Hour, time.Hour
	})
	h.start()
	h.round(long, ok(checks.ReasonReady))
	h.round(long, ok(checks.ReasonForbidden))
	if o := f.get(t, "gcp-ok"); o == nil || readyOf(o).Reason != "Forbidden" {
		t.Errorf("the valid provider's change was not written: %+v", o)
	}
	h.round(long, ok(checks.ReasonForbidden))
	invalid := func(e kube.AuditEvent) bool { return e.Code == http.StatusUnprocessableEntity }
	if n := f.requests(t, user, invalid); n != 1 {
		t.Errorf("%d requests answered 422, want 1: an unchanged refused status is not sent again", n)
	}
	if got := h.metric("crd_writer_rejected_objects"); got != 1 {
		t.Errorf("crd_writer_rejected_objects = %v, want 1", got)
	}
	if got := h.writes(writeStatus, resultRejected); got != 1 {
		t.Errorf("writes_total{kind=status,result=rejected} = %v, want 1", got)
	}
	if n := strings.Count(h.logs.String(), "the API server rejects this provider's ProviderHealth object"); n != 1 {
		t.Errorf("the rejection was logged %d times, want once", n)
	}
	// The provider fixed (a reload with a shorter name): written, the metric back to 0.
	h.round(provider("kvm-long", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since)), ok(checks.ReasonForbidden))
	if o := f.get(t, "kvm-long"); o == nil || len(o.Status.Targets) != 1 || o.Status.Targets[0].Name != "hv1" {
		t.Errorf("the fixed provider was not written: %+v", o)
	}
	if got := h.metric("crd_writer_rejected_objects"); got != 0 {
		t.Errorf("crd_writer_rejected_objects = %v after the fix, want 0", got)
	}
}

// testPrunedFields installs an older CRD whose schema lacks status.targetsReady: the API server
// prunes it from every write. Unchanged rounds write nothing, and the mismatch is reported once.
func testPrunedFields(t *testing.T, f *kubeFixture) {
	f.installCRDVariant(t, func(v map[string]any) {
		status := v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["status"].(map[string]any)
		delete(status["properties"].(map[string]any), "targetsReady")
	}, func(o *v1alpha1.ProviderHealth) bool {
		o.Status.TargetsReady, o.Status.Type = "0/0", "kvm"
		got, err := f.admin.UpdateStatus(context.Background(), o)
		return err == nil && got.Status.TargetsReady == ""
	})
	const user = "writer-pruned"
	since := time.Now().Add(-time.Hour)
	p := provider("kvm-lab", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since), target("hv2", kvmcheck.ReasonPoolInactive, "", since))
	src := newFakeSource()
	h := f.harness(t, f.userConfig(user, "system:masters"), src, nil)
	h.start()
	h.round(p)
	before := h.writes(writeStatus, resultSuccess)
	auditBefore := f.requests(t, user, isStatusUpdate)
	for range 5 {
		h.round(p)
	}
	if n := h.writes(writeStatus, resultSuccess) - before; n != 0 {
		t.Errorf("5 unchanged rounds wrote the status %v times, want 0", n)
	}
	if n := f.requests(t, user, isStatusUpdate) - auditBefore; n != 0 {
		t.Errorf("5 unchanged rounds sent %d status writes (audit log), want 0", n)
	}
	if got := h.metric("crd_writer_crd_mismatch", "problem", "fields_pruned"); got != 1 {
		t.Errorf("crd_mismatch{problem=fields_pruned} = %v, want 1", got)
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "drops or changes status fields"); n != 1 || !strings.Contains(logs, "targetsReady") {
		t.Errorf("the pruned field was reported %d times (want once, naming targetsReady):\n%s", n, logs)
	}
	// A real change is still written.
	h.round(provider("kvm-lab", kvmcheck.Type, target("hv1", checks.ReasonReady, "", since), target("hv2", checks.ReasonReady, "", time.Now())))
	if o := f.get(t, "kvm-lab"); readyOf(o).Status != metav1.ConditionTrue {
		t.Errorf("a change was not written with the older CRD: %+v", readyOf(o))
	}
}

// testWritesBoundedByFence runs a term whose last renewal is known and records the deadline of
// every write request as it leaves the writer: each one (create, status, delete, Event) must end
// by the fence, the renewal plus the renew deadline, not at its own 15s timeout (Events had
// none). And a delete decided on an old list carries its resourceVersion: it refuses to delete
// an object written since.
func testWritesBoundedByFence(t *testing.T, f *kubeFixture) {
	f.putOwned(t, "garbage")
	type sent struct {
		what     string
		deadline time.Time
		bounded  bool
	}
	var (
		mu    sync.Mutex
		sends []sent
	)
	cfg := f.userConfig("writer-bounded", "system:masters")
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet {
				d, ok := r.Context().Deadline()
				mu.Lock()
				sends = append(sends, sent{r.Method + " " + r.URL.Path, d, ok})
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	const renewDeadline = 12 * time.Second // shorter than a request's own 15s timeout
	renewedAt := time.Now()
	lease := &leaseView{isLeader: func() bool { return true }, renewed: func() time.Time { return renewedAt }, renewDeadline: renewDeadline}
	src := newFakeSource()
	h := f.harness(t, cfg, src, nil)
	h.lead(lease)
	h.round(provider("kvm-lab", kvmcheck.Type, target("hv1", kvmcheck.ReasonTCPUnreachable, "refused", time.Now())))
	obj := f.get(t, "kvm-lab")
	eventually(t, "the Event is written", func() bool { return len(f.events(t, string(obj.UID))) == 1 })
	if f.get(t, "garbage") != nil {
		t.Error("the garbage was not collected")
	}
	fence := renewedAt.Add(renewDeadline)
	mu.Lock()
	kinds := map[string]bool{}
	for _, s := range sends {
		switch {
		case strings.HasSuffix(s.what, "/status"):
			kinds["status"] = true
		case strings.HasPrefix(s.what, "POST") && strings.HasSuffix(s.what, "/events"):
			kinds["event"] = true
		case strings.HasPrefix(s.what, "POST"):
			kinds["create"] = true
		case strings.HasPrefix(s.what, "DELETE"):
			kinds["delete"] = true
		}
		if !s.bounded || s.deadline.After(fence) {
			t.Errorf("%s was sent with deadline %v (set: %v), after the fence at %v", s.what, s.deadline, s.bounded, fence)
		}
	}
	mu.Unlock()
	if len(kinds) != 4 {
		t.Errorf("the writes seen were %v, want create, status, delete and event", kinds)
	}

	// A delete decided on an old read: the object was written since.
	f.putOwned(t, "stale-read")
	old := f.get(t, "stale-read")
	o := old.DeepCopy()
	o.Status.Type = "kvm"
	if _, err := f.admin.UpdateStatus(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if err := h.w.objects.Delete(context.Background(), "stale-read", old.UID, old.ResourceVersion); !apierrors.IsConflict(err) {
		t.Errorf("a delete with the resourceVersion of an old read: err = %v, want a conflict", err)
	}
	if f.get(t, "stale-read") == nil {
		t.Error("the object written since the read was deleted")
	}
}

// testChecksOffRollout is a rollout to checks off: the old leader (checks on) still holds the
// Lease when a new replica with checks off starts. The new one deletes nothing while the old one
// leads (the old one would recreate it, and the object would then stay stale forever); once the
// old one is gone it takes the Lease and deletes, and it keeps collecting: an object an old
// version recreates without the Lease goes at the next pass.
func testChecksOffRollout(t *testing.T, f *kubeFixture) {
	le := func(id string) func(*Options) {
		return func(o *Options) {
			o.LeaderElect, o.Identity = true, id
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
			o.HeartbeatInterval = time.Second
		}
	}
	since := time.Now().Add(-time.Hour)
	p := func(r checks.Reason) checks.ProviderState {
		return provider("cluster-main", kubernetes.Type, target("api", r, "", since))
	}
	old := f.harness(t, f.userConfig("writer-old", "system:masters"), newFakeSource(), le("old"))
	old.start()
	eventually(t, "the old replica leads", func() bool { return old.metric("crd_writer_leader") == 1 })
	old.round(p(checks.ReasonReady))

	const user = "writer-off"
	off := f.harness(t, f.userConfig(user, "system:masters"), nil, le("off"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- off.w.RunChecksOff(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunChecksOff: %v", err)
		}
	}()
	// The new replica is campaigning (it reads the Lease, or, unfenced, writes at once); the
	// old one still leads and writes.
	eventually(t, "the checks-off replica reads the Lease or writes", func() bool {
		return f.requests(t, user, func(e kube.AuditEvent) bool { return e.Resource == "leases" && e.Verb == "get" || isWrite(e) }) > 0
	})
	old.round(p(checks.ReasonForbidden))
	if n := f.requests(t, user, isWrite); n != 0 {
		t.Errorf("the checks-off replica made %d writes while the old replica held the Lease", n)
	}
	if o := f.get(t, "cluster-main"); o == nil || readyOf(o).Reason != "Forbidden" {
		t.Fatalf("the old leader's object: %+v", o)
	}
	old.stop() // the rollout ends the old replica; it hands the Lease back
	eventually(t, "the checks-off replica leads and deletes", func() bool {
		return off.metric("crd_writer_leader") == 1 && f.get(t, "cluster-main") == nil
	})
	// An old version without leader election recreates it: collected again.
	f.putOwned(t, "cluster-main")
	eventually(t, "the recreated object is collected at the next pass", func() bool { return f.get(t, "cluster-main") == nil })
}

// testTwoDefaultDeployments runs two deployments with the default flags whose Leases live in
// different namespaces (the pods' namespaces): both lead, each at its own Lease. Neither deletes
// or writes the other's objects, at its start or at a restart; the provider name both configure
// is a name clash for the second.
func testTwoDefaultDeployments(t *testing.T, f *kubeFixture) {
	ctx := context.Background()
	for _, ns := range []string{"team-a-ns", "team-b-ns"} {
		if _, err := f.core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.coord.Leases(ns).Delete(context.Background(), DefaultInstance, metav1.DeleteOptions{}) })
	}
	deployment := func(ns, id string) func(*Options) {
		return func(o *Options) {
			o.LeaderElect, o.Identity, o.LeaseNamespace = true, id, ns // everything else: the defaults
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
		}
	}
	since := time.Now().Add(-time.Hour)
	ph := func(name string, r checks.Reason) checks.ProviderState {
		return provider(name, gcp.Type, target("p", r, "", since))
	}
	aProviders := []checks.ProviderState{ph("a-only", checks.ReasonReady), ph("shared", checks.ReasonReady)}
	bProviders := []checks.ProviderState{ph("b-only", checks.ReasonForbidden), ph("shared", checks.ReasonForbidden)}
	start := func(user, ns, id string, providers []checks.ProviderState) *harness {
		// The runner's first snapshot names the configured providers.
		h := f.harness(t, f.userConfig(user, "system:masters"), newFakeSource(providers...), deployment(ns, id))
		h.start()
		eventually(t, id+" leads", func() bool { return h.metric("crd_writer_leader") == 1 })
		h.round(providers...)
		return h
	}
	a := start("writer-dep-a", "team-a-ns", "a1", aProviders)
	sharedA := f.get(t, "shared")
	if sharedA == nil || sharedA.Annotations[DeploymentAnnotation] != "team-a-ns/"+DefaultInstance {
		t.Fatalf("the first deployment's object lacks its deployment annotation: %+v", sharedA)
	}
	b := start("writer-dep-b", "team-b-ns", "b1", bProviders)
	check := func(when string) {
		t.Helper()
		if f.get(t, "a-only") == nil {
			t.Errorf("%s: the first deployment's a-only was deleted", when)
		}
		if o := f.get(t, "b-only"); o == nil || o.Annotations[DeploymentAnnotation] != "team-b-ns/"+DefaultInstance {
			t.Errorf("%s: the second deployment's b-only: %+v", when, o)
		}
		if o := f.get(t, "shared"); o == nil || o.UID != sharedA.UID || readyOf(o).Reason != v1alpha1.ReasonAllTargetsReady {
			t.Errorf("%s: the second deployment took over the first one's shared: %+v", when, o)
		}
	}
	check("after the second deployment's start")
	if a.metric("crd_writer_leader") != 1 {
		t.Error("the first deployment stopped leading")
	}
	eventually(t, "the second deployment reports the clash", func() bool { return b.metric("crd_writer_name_clashes") == 1 })

	// Each restarts.
	a.stop()
	a = start("writer-dep-a", "team-a-ns", "a2", aProviders)
	check("after the first deployment's restart")
	b.stop()
	b = start("writer-dep-b", "team-b-ns", "b2", bProviders)
	check("after the second deployment's restart")
	for _, user := range []string{"writer-dep-a", "writer-dep-b"} {
		theirs := map[string]string{"writer-dep-a": "b-only", "writer-dep-b": "a-only"}[user]
		if n := f.requests(t, user, func(e kube.AuditEvent) bool { return isWrite(e) && e.Name == theirs }); n != 0 {
			t.Errorf("%s wrote the other deployment's %s %d times", user, theirs, n)
		}
	}
	a.stop()
	b.stop()
}

// testWriteVolumeAtScale mirrors 100 providers of 1,000 targets each, 100 of them down, with the
// messages the KVM checks write. First the down targets' reasons alternate every round: with the
// minimum reason interval the alternating rounds write nothing (the Ready status and up/down of
// every target are unchanged); without it every object is rewritten every round. Then 1% of the
// targets flip every round: every object is written every round. It logs the writes and bytes of
// each (docs/benchmarks.md).
func testWriteVolumeAtScale(t *testing.T, f *kubeFixture) {
	const rounds = 3
	since := time.Now().Add(-time.Hour)
	alternating := func(round int) []checks.ProviderState {
		reason := kvmcheck.ReasonTCPUnreachable
		if round%2 == 1 {
			reason = kvmcheck.ReasonSSHHandshakeFailed
		}
		return fleetRound(0, reason, since)
	}
	flipping := func(round int) []checks.ProviderState { return fleetRound(round, kvmcheck.ReasonTCPUnreachable, since) }
	measure := func(user string, minReason time.Duration, snapshot func(int) []checks.ProviderState) (writes int, bytes int64) {
		var sent atomic.Int64
		cfg := f.userConfig(user, "system:masters")
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status") {
					sent.Add(r.ContentLength)
				}
				return rt.RoundTrip(r)
			})
		}
		src := newFakeSource(snapshot(0)...)
		h := f.harness(t, cfg, src, func(o *Options) { o.MinReasonInterval, o.HeartbeatInterval = minReason, time.Hour })
		h.start()
		defer h.stop()
		wait := func() {
			want := float64(src.Current().Round)
			itestutil.Eventually(t, 2*time.Minute, "the writer synced the round", func() bool { return h.metric("crd_writer_synced_round") >= want })
		}
		src.publish(snapshot(0)...)
		wait()
		before, bytesBefore := h.writes(writeStatus, resultSuccess), sent.Load()
		for r := 1; r <= rounds; r++ {
			src.publish(snapshot(r)...)
			wait()
		}
		return int(h.writes(writeStatus, resultSuccess) - before), sent.Load() - bytesBefore
	}
	writes, bytes := measure("writer-scale-off", -1, alternating)
	t.Logf("reasons alternating, without a minimum reason interval: %d status writes, %d bytes in %d rounds (%.1f MB a round, %.1f KB an object)",
		writes, bytes, rounds, float64(bytes)/rounds/1e6, float64(bytes)/float64(max(writes, 1))/1e3)
	if writes != fleetProviders*rounds {
		t.Errorf("without a minimum reason interval: %d status writes in %d rounds, want %d (every object every round)", writes, rounds, fleetProviders*rounds)
	}
	f.reset(t)
	writes, bytes = measure("writer-scale-on", DefaultMinReasonInterval, alternating)
	t.Logf("reasons alternating, with the minimum reason interval (%s): %d status writes, %d bytes in %d rounds", DefaultMinReasonInterval, writes, bytes, rounds)
	if writes != 0 {
		t.Errorf("with the minimum reason interval: %d status writes in %d rounds of reason-only changes, want 0", writes, rounds)
	}
	f.reset(t)
	writes, bytes = measure("writer-scale-flip", DefaultMinReasonInterval, flipping)
	t.Logf("1%% of the targets flipping every round: %d status writes, %d bytes in %d rounds (%.1f MB a round, %.1f KB an object)",
		writes, bytes, rounds, float64(bytes)/rounds/1e6, float64(bytes)/float64(max(writes, 1))/1e3)
	if writes != fleetProviders*rounds {
		t.Errorf("1%% flipping: %d status writes in %d rounds, want %d (every object has a flip every round)", writes, rounds, fleetProviders*rounds)
	}
}

// testListsInPages starts a term over 120 objects: the list that seeds memory is read in pages
// of listPageSize; the garbage collection after a reload reads only metadata.
func testListsInPages(t *testing.T, f *kubeFixture) {
	const user, n = "writer-pages", 120
	var ps []checks.ProviderState
	for i := range n {
		name := fmt.Sprintf("p-%03d", i)
		f.putOwned(t, name)
		ps = append(ps, provider(name, gcp.Type))
	}
	src := newFakeSource(ps...)
	h := f.harness(t, f.userConfig(user, "system:masters"), src, nil)
	h.start()
	h.round(ps...)
	lists := func(kind string) []kube.AuditEvent {
		var out []kube.AuditEvent
		for _, e := range f.env.AuditEvents(t) {
			if e.User == user && e.Verb == "list" && e.Resource == v1alpha1.Resource && e.ResponseKind == kind {
				out = append(out, e)
			}
		}
		return out
	}
	full := lists("ProviderHealthList")
	if len(full) != (n+listPageSize-1)/listPageSize {
		t.Errorf("the seed made %d list requests, want %d pages of %d", len(full), (n+listPageSize-1)/listPageSize, listPageSize)
	}
	for _, e := range full {
		if !strings.Contains(e.RequestURI, fmt.Sprintf("limit=%d", listPageSize)) || e.ResponseItems > listPageSize {
			t.Errorf("a seed list without its page limit: %s (%d items)", e.RequestURI, e.ResponseItems)
		}
	}
	h.round(ps[1:]...) // a reload removes p-000
	eventually(t, "p-000 is collected", func() bool { return f.get(t, "p-000") == nil })
	if meta := lists("PartialObjectMetadataList"); len(meta) != 1 {
		t.Errorf("the garbage collection after the reload made %d metadata-only lists, want 1", len(meta))
	}
	if got := len(lists("ProviderHealthList")); got != len(full) {
		t.Errorf("the garbage collection listed whole objects (%d lists, %d before)", got, len(full))
	}
}
