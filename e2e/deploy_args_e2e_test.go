package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestDeploymentArgsAsServiceAccount runs two exporters with the flags of deploy/deployment.yaml
// (the writer with leader election, sharded), each named by $POD_NAME as the Deployment's pods
// are, as the ServiceAccount of deploy/ with only the RBAC of deploy/rbac/ and deploy/rbac/shard/
// applied to a real API server: both join the shard (each holds its Lease, labelled with the
// instance, and sees two members), the objects are written, a replica stopped with SIGTERM
// deletes its Lease, and the API server forbade none of the ServiceAccount's requests.
//
// Outside a pod the exporter has no in-cluster config nor pod namespace, so the test adds the
// kubeconfig and namespace flags; the rest are the Deployment's own.
func TestDeploymentArgsAsServiceAccount(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH")
	}
	binary(t)
	const namespace = "provider-health-exporter"
	const serviceAccount = "system:serviceaccount:" + namespace + ":provider-health-exporter"

	raw, err := os.ReadFile(repoFile("deploy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &dep); err != nil {
		t.Fatalf("deploy/deployment.yaml: %v", err)
	}
	if dep.Namespace != namespace || dep.Spec.Template.Spec.ServiceAccountName != "provider-health-exporter" {
		t.Fatalf("deploy/deployment.yaml runs as %s/%s, the test as %s", dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName, serviceAccount)
	}
	var args []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--config.file=") && !strings.HasPrefix(a, "--web.listen-address=") {
			args = append(args, a)
		}
	}
	if !slices.Contains(args, "--shard.enabled") || !slices.Contains(args, "--crd.enabled") {
		t.Fatalf("deploy/deployment.yaml's args %v: this test runs the writer sharded", args)
	}

	gce := startGCE(t)
	env := kube.Start(t)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("apply", "-f", repoFile("deploy", "namespace.yaml"))
	run("apply", "-k", repoFile("deploy", "rbac"))
	run("apply", "-k", repoFile("deploy", "rbac", "shard"))
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	env.AddUser(serviceAccount, "system:serviceaccounts", "system:serviceaccounts:"+namespace)
	kubeconfig := env.KubeconfigFor(serviceAccount)
	// Checked at the end, also after a failure above (before the API server stops): every
	// request the replicas made as the ServiceAccount was allowed.
	t.Cleanup(func() {
		var forbidden []string
		for _, e := range env.AuditEvents(t) {
			if e.User == serviceAccount && e.Code == http.StatusForbidden {
				forbidden = append(forbidden, e.Verb+" "+e.Resource+" "+e.Namespace+"/"+e.Name)
			}
		}
		if len(forbidden) > 0 {
			t.Errorf("requests of the ServiceAccount forbidden with the RBAC of deploy/: %v", forbidden)
		}
	})

	path := gce.writeProviders(t, "", gcpProvider{"alpha", "alpha-project"}, gcpProvider{"beta", "beta-project"},
		gcpProvider{"gamma", "gamma-project"}, gcpProvider{"delta", "delta-project"})
	start := func(pod string) *testExporter {
		t.Helper()
		t.Setenv("POD_NAME", pod) // read by the process at its start, as the downward API gives it
		return startExporter(t, append(slices.Clone(args), "--config.file="+path, "--provider-check-interval=10s",
			"--crd.kubeconfig="+kubeconfig, "--crd.lease-namespace="+namespace,
			"--shard.kubeconfig="+kubeconfig, "--shard.lease-namespace="+namespace)...)
	}
	pods := []string{"provider-health-exporter-7c9d5b8f6-a1b2c", "provider-health-exporter-7c9d5b8f6-d3e4f"}
	a, b := start(pods[0]), start(pods[1])

	admin, err := kubernetes.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	leases := admin.CoordinationV1().Leases(namespace)
	ctx := context.Background()
	for _, x := range []*testExporter{a, b} {
		testutil.Eventually(t, time.Minute, "each replica to see both members", func() bool {
			code, body := x.do(http.MethodGet, "/metrics")
			return code == http.StatusOK && strings.Contains(body, "\nproxy_operator_shard_members 2\n")
		})
	}
	for _, pod := range pods {
		l, err := leases.Get(ctx, pod, metav1.GetOptions{})
		if err != nil || l.Labels["providerhealth.io/shard"] != "member" || l.Labels["providerhealth.io/instance"] != "provider-health-exporter" {
			t.Errorf("the Lease of %s: %v (labels %v); want it labelled as the instance's member", pod, err, l.GetLabels())
		}
	}
	testutil.Eventually(t, 2*time.Minute, "the leader to write the providers' objects as the ServiceAccount", func() bool {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "ph", "-o", "name").CombinedOutput()
		return err == nil && strings.Count(string(out), "providerhealth.providerhealth.io/") == 4
	})

	// A replica that leaves (a rollout's SIGTERM, a drain) deletes its Lease.
	b.signal(syscall.SIGTERM)
	testutil.Eventually(t, 30*time.Second, "the stopped replica's Lease to be deleted", func() bool {
		_, err := leases.Get(ctx, pods[1], metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	testutil.Eventually(t, 30*time.Second, "the other replica to see one member", func() bool {
		code, body := a.do(http.MethodGet, "/metrics")
		return code == http.StatusOK && strings.Contains(body, "\nproxy_operator_shard_members 1\n")
	})

}
