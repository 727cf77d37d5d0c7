package crdwriter

import (
	"context"
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kube"
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
