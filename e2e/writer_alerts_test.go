package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/demo"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestWriterAlertsOnRealStack runs the exporter with the ProviderHealth writer on against a real
// API server, as the ServiceAccount of deploy/rbac/ (its RBAC and the optional admission policy
// of deploy/optional/ applied), scraped by a real Prometheus that evaluates the mixin's rules
// (test-sized windows) and notifies a real Alertmanager:
//   - the CRD is not installed: the writer cannot mirror a round, ProviderHealthCRDWriterLagging
//     fires; the CRD installed, the writer writes its objects under the admission policy and the
//     alert resolves;
//   - the ServiceAccount's ClusterRoleBinding deleted, a provider added by a reload (POST
//     /-/reload with --web.enable-lifecycle): the API server refuses the create of its object,
//     ProviderHealthCRDWriteErrors fires; the RBAC applied again, the object is written and the
//     alert resolves;
//   - a provider whose name another instance's object holds: ProviderHealthCRDNameClash fires.
//
// The checks are gcp providers against the GCE wire server (gceChecks): only the rounds matter.
func TestWriterAlertsOnRealStack(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH")
	}
	gce := startGCE(t)
	env := kube.Start(t) // without the CRD, for now
	run := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("", "apply", "-f", repoFile("deploy", "namespace.yaml"))
	run("", "apply", "-k", repoFile("deploy", "rbac"))
	run("", "apply", "-f", repoFile("deploy", "optional", "validatingadmissionpolicy.yaml"))
	const serviceAccount = "system:serviceaccount:provider-health-exporter:provider-health-exporter"
	env.AddUser(serviceAccount)

	path := gce.writeProviders(t, "", gcpProvider{"alpha", "alpha-project"}, gcpProvider{"beta", "beta-project"})
	x := startExporter(t, "--config.file="+path, "--provider-check-interval=10s", "--web.enable-lifecycle",
		"--crd.enabled", "--crd.kubeconfig="+env.KubeconfigFor(serviceAccount), "--crd.heartbeat-interval=1m")
	addr := strings.TrimPrefix(x.base, "http://")
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range x.logs.Records() {
				if r["component"] == "crdwriter" || r["component"] == "client-go" {
					t.Logf("exporter: %v", r)
				}
			}
		}
	})
	rules := demo.MixinRules(t, repoRoot, `{crdWriterLagFor: "10s", crdWriteErrorsWindow: "1m", crdWriteErrorsFor: "10s", crdNameClashFor: "10s"}`)
	stack := promstack.Start(t, promstack.Options{ScrapeTargets: []string{addr}, RuleFiles: rules})
	stack.WaitTargetUp(t, addr, 60*time.Second)

	firing := func(alertname string) string {
		return `ALERTS{alertname="` + alertname + `", alertstate="firing"}`
	}
	resolved := func(alertname string) {
		t.Helper()
		stack.WaitForQuery(t, firing(alertname), func(s []promstack.Sample) bool { return len(s) == 0 }, 3*time.Minute)
	}

	// No CRD: the writer retries listing the objects and mirrors no round.
	a := stack.WaitForAlert(t, "ProviderHealthCRDWriterLagging", 3*time.Minute)
	if d := a.Annotations["description"]; !strings.Contains(d, "The ProviderHealth writer on "+addr+" has mirrored no round") {
		t.Errorf("ProviderHealthCRDWriterLagging's description does not name the writing replica %s: %q", addr, d)
	}
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	testutil.Eventually(t, 2*time.Minute, "the writer to write its objects as the ServiceAccount, under the admission policy", func() bool {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "ph", "alpha", "beta", "-o", "name").CombinedOutput()
		return err == nil && strings.Contains(string(out), "/alpha\n") && strings.Contains(string(out), "/beta\n")
	})
	resolved("ProviderHealthCRDWriterLagging")

	// The ServiceAccount loses its ClusterRoleBinding (a broken RBAC rollout): the object of a
	// provider added by a reload cannot be created.
	run("", "delete", "clusterrolebinding", "provider-health-exporter")
	gce.writeProviders(t, path, gcpProvider{"alpha", "alpha-project"}, gcpProvider{"beta", "beta-project"}, gcpProvider{"gamma", "gamma-project"})
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %s", code, body)
	}
	a = stack.WaitForAlert(t, "ProviderHealthCRDWriteErrors", 3*time.Minute)
	if d := a.Annotations["description"]; !strings.Contains(d, "of the ProviderHealth writes to the Kubernetes API failed") || !strings.Contains(d, "Writing replica: "+addr+".") {
		t.Errorf("ProviderHealthCRDWriteErrors's description: %q", d)
	}
	// A refusal (403) is about the object written: it backs off that object, and its log line
	// names the provider and the API server's answer.
	if r := x.logs.Find("writing this provider's ProviderHealth object failed; retrying it with backoff, the other providers are written as usual"); r == nil ||
		!strings.Contains(fmt.Sprint(r["err"]), "forbidden") || r["provider"] == nil {
		t.Errorf("the writer's log does not give the API server's refusal: %v", r)
	}
	// The RBAC of deploy/ applied again.
	run("", "apply", "-k", repoFile("deploy", "rbac"))
	testutil.Eventually(t, 2*time.Minute, "the object of the added provider to be written", func() bool {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "ph", "gamma", "-o", "name").CombinedOutput()
		return err == nil && strings.Contains(string(out), "/gamma")
	})
	resolved("ProviderHealthCRDWriteErrors")

	// A name another instance's object holds.
	theirs := "apiVersion: providerhealth.io/v1alpha1\nkind: ProviderHealth\nmetadata:\n  name: delta\n  labels:\n    app.kubernetes.io/managed-by: provider-health-exporter\n    providerhealth.io/instance: site-b\n"
	run(theirs, "create", "-f", "-")
	gce.writeProviders(t, path, gcpProvider{"alpha", "alpha-project"}, gcpProvider{"beta", "beta-project"},
		gcpProvider{"gamma", "gamma-project"}, gcpProvider{"delta", "delta-project"})
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %s", code, body)
	}
	a = stack.WaitForAlert(t, "ProviderHealthCRDNameClash", 3*time.Minute)
	if d := a.Annotations["description"]; !strings.HasPrefix(d, "1 configured provider(s) of the exporter on "+addr+" have a ProviderHealth object name held by another") {
		t.Errorf("ProviderHealthCRDNameClash's description: %q", d)
	}
	// The writer was on and leading throughout: no NoLeader alert.
	if s, err := stack.Query(context.Background(), firing("ProviderHealthCRDWriterNoLeader")); err != nil || len(s) != 0 {
		t.Errorf("ProviderHealthCRDWriterNoLeader fires while the only replica writes: %v %v", s, err)
	}
}
