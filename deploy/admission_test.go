package deploy

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// exporterServiceAccount is the username of deploy/rbac/serviceaccount.yaml's ServiceAccount.
const exporterServiceAccount = "system:serviceaccount:provider-health-exporter:provider-health-exporter"

var providerHealths = schema.GroupVersionResource{Group: "providerhealth.io", Version: "v1alpha1", Resource: "providerhealths"}

// TestValidatingAdmissionPolicy applies deploy/optional/validatingadmissionpolicy.yaml, with
// the CRD and deploy/rbac/, to a real API server; then, as the exporter's ServiceAccount
// (impersonated), creating, updating the status of and deleting a ProviderHealth that carries
// its instance's labels is admitted, and the same on an object of another instance, of no
// instance or not managed by the exporter is refused with the policy's message. Other users are
// not judged by it.
func TestValidatingAdmissionPolicy(t *testing.T) {
	root := testutil.RepoRoot(t)
	env := kube.Start(t)
	env.ApplyCRDFile(t, filepath.Join(root, "deploy", "crd", "providerhealth.io_providerhealths.yaml"))
	flags := kube.ClusterFlags(t, env.Kubeconfig)
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := kube.Kubectl(t, nil, append(flags, args...)...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kubectl("apply", "-f", filepath.Join(root, "deploy", "namespace.yaml"))
	kubectl("apply", "-k", filepath.Join(root, "deploy", "rbac"))
	policyFile := filepath.Join(root, "deploy", "optional", "validatingadmissionpolicy.yaml")
	kubectl("apply", "--validate=strict", "-f", policyFile)

	admin, err := dynamic.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	saConfig := rest.CopyConfig(env.AdminConfig)
	saConfig.Impersonate = rest.ImpersonationConfig{UserName: exporterServiceAccount}
	sa, err := dynamic.NewForConfig(saConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	const instance = crdwriter.DefaultInstance // the policy's, and the Deployment's (no --crd.instance)
	mine := map[string]string{crdwriter.ManagedByLabel: crdwriter.ManagedByValue, crdwriter.InstanceLabel: instance}
	object := func(name string, labels map[string]string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "providerhealth.io/v1alpha1", "kind": "ProviderHealth",
			"metadata": map[string]any{"name": name},
		}}
		o.SetLabels(labels)
		return o
	}
	// refusedByPolicy: err is the policy's denial, naming the object and the instance.
	refusedByPolicy := func(err error, name string) bool {
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'provider-health-exporter'") &&
			strings.Contains(err.Error(), "ProviderHealth "+name+" does not belong to exporter instance "+instance) &&
			strings.Contains(err.Error(), "may create, update and delete only ProviderHealth objects labelled")
	}
	expectRefused := func(what, name string, err error) {
		t.Helper()
		if !refusedByPolicy(err, name) {
			t.Errorf("%s as the ServiceAccount: %v; want the policy's refusal", what, err)
		}
	}
	expectAdmitted := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s as the ServiceAccount: %v; want it admitted", what, err)
		}
	}
	create := func(c dynamic.Interface, o *unstructured.Unstructured, dryRun bool) error {
		opts := metav1.CreateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := c.Resource(providerHealths).Create(ctx, o, opts)
		return err
	}
	// updateStatus writes a status the CRD's schema accepts, through the status subresource
	// (the only update the writer's ClusterRole grants).
	updateStatus := func(c dynamic.Interface, name string) error {
		o, err := admin.Resource(providerHealths).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		o.Object["status"] = map[string]any{"readyTargets": int64(1), "totalTargets": int64(1)}
		_, err = c.Resource(providerHealths).UpdateStatus(ctx, o, metav1.UpdateOptions{})
		return err
	}
	remove := func(c dynamic.Interface, name string) error {
		return c.Resource(providerHealths).Delete(ctx, name, metav1.DeleteOptions{})
	}

	// The API server applies a new policy once its informer has seen it: wait until a dry-run
	// create of an unlabelled object is refused by it.
	testutil.Eventually(t, time.Minute, "the policy to take effect", func() bool {
		return refusedByPolicy(create(sa, object("probe", nil), true), "probe")
	})

	others := map[string]map[string]string{
		"other-instance": {crdwriter.ManagedByLabel: crdwriter.ManagedByValue, crdwriter.InstanceLabel: "site-b"},
		// Written before instances existed: the writer takes them as the default instance's,
		// the policy does not (docs/deploy.md: label them before applying it).
		"no-instance": {crdwriter.ManagedByLabel: crdwriter.ManagedByValue},
		"unmanaged":   {crdwriter.InstanceLabel: instance},
		"no-labels":   nil,
	}
	for name, labels := range others {
		// CREATE is judged on the new object.
		expectRefused("create "+name, name, create(sa, object(name, labels), false))
		// Other users are not judged: the admin creates it, for the update and delete below.
		if err := create(admin, object(name, labels), false); err != nil {
			t.Fatalf("create %s as the admin: %v", name, err)
		}
		// UPDATE of the status subresource, and DELETE (judged on oldObject).
		expectRefused("update the status of "+name, name, updateStatus(sa, name))
		expectRefused("delete "+name, name, remove(sa, name))
		if _, err := admin.Resource(providerHealths).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s after the refused delete: %v", name, err)
		}
	}

	// The ServiceAccount's own object: create, status update and delete are admitted.
	expectAdmitted("create mine", create(sa, object("mine", mine), false))
	expectAdmitted("update the status of mine", updateStatus(sa, "mine"))
	expectAdmitted("delete mine", remove(sa, "mine"))
	if _, err := admin.Resource(providerHealths).Get(ctx, "mine", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("mine after its delete: %v, want NotFound", err)
	}

	// RBAC still decides first: an update of the main resource is not the ServiceAccount's to
	// make, whatever the labels.
	expectAdmitted("create mine again", create(sa, object("mine", mine), false))
	o, err := admin.Resource(providerHealths).Get(ctx, "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Resource(providerHealths).Update(ctx, o, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || refusedByPolicy(err, "mine") {
		t.Errorf("update of mine (not the status) as the ServiceAccount: %v, want RBAC's Forbidden", err)
	}
}
