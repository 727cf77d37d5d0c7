package charts

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

// TestChartAgainstAPIServer runs the chart against the test environment's real kube-apiserver
// with the Prometheus Operator's CRDs installed: `kubectl apply --dry-run=server
// --validate=strict` accepts every object of the default rendering and of the one with every
// toggle on (CRD included) and refuses a misspelt field; PodSecurity admits the Deployment's pod
// in a namespace enforcing "restricted"; then a real helm install creates the objects and the
// CRD, the API server's authorizer lets the ServiceAccount do each verb of the shard on Leases in
// its namespace and none elsewhere, helm upgrade changes them (a value changed, a toggle turned
// off, sharding off: the shard's rights go), and helm uninstall removes them but keeps the CRD
// and the ProviderHealth objects.
func TestChartAgainstAPIServer(t *testing.T) {
	h := newHelm(t)
	kubectlPath, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH: install it (e.g. the kubectl package) to apply the chart's renderings")
	}
	crds := kube.OperatorCRDs(t)
	env := kube.Start(t)
	env.ApplyCRD(t, crds)
	cache := filepath.Join(t.TempDir(), "kubectl-cache")
	kubectl := func(stdin []byte, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectlPath, append([]string{"--kubeconfig", env.Kubeconfig, "--cache-dir", cache}, args...)...)
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustKubectl := func(stdin []byte, args ...string) string {
		t.Helper()
		out, err := kubectl(stdin, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	helmKube := func(args ...string) (string, error) {
		t.Helper()
		return h.run(append(args, "--kubeconfig", env.Kubeconfig)...)
	}

	// The release's namespace, at the Pod Security level deploy/'s namespace enforces.
	mustKubectl(nil, "create", "namespace", namespace)
	mustKubectl(nil, "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")

	for name, args := range map[string][]string{
		"defaults":     {"--include-crds"},
		"every toggle": {"--include-crds", "-f", everyToggle(t)},
	} {
		manifest := h.template(args...)
		objs := kube.DecodeObjects(t, manifest)
		out, err := kubectl(manifest, "apply", "--dry-run=server", "--validate=strict", "-f", "-")
		if err != nil {
			t.Errorf("%s: kubectl apply --dry-run=server --validate=strict refused the rendering: %v\n%s", name, err, out)
			continue
		}
		for _, o := range objs {
			gk := schema.FromAPIVersionAndKind(o.GetAPIVersion(), o.GetKind()).GroupKind()
			if line := fmt.Sprintf("%s/%s", strings.ToLower(gk.String()), o.GetName()); !strings.Contains(out, line) {
				t.Errorf("%s: the dry run did not report %s:\n%s", name, line, out)
			}
		}
		if n := strings.Count(out, "(server dry run)"); n != len(objs) {
			t.Errorf("%s: the dry run reported %d objects, the rendering holds %d:\n%s", name, n, len(objs), out)
		}
		if name == "every toggle" {
			for _, kind := range append([]string{"CustomResourceDefinition", "Secret"}, monitoringKinds...) {
				if len(objects(objs).all(kind)) == 0 {
					t.Errorf("every toggle: no %s in the rendering", kind)
				}
			}
		}
	}

	// Strict validation is on and reaches the server: a misspelt field is refused.
	manifest := h.template("-f", everyToggle(t))
	bad := bytes.Replace(manifest, []byte("readOnlyRootFilesystem: true"), []byte("readOnlyRootFileSystem: true"), 1)
	if bytes.Equal(bad, manifest) {
		t.Fatal("no readOnlyRootFilesystem in the rendering to misspell")
	}
	if out, err := kubectl(bad, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err == nil || !strings.Contains(out, "readOnlyRootFileSystem") {
		t.Errorf("a misspelt field was not refused (err %v):\n%s", err, out)
	}

	// The API server's PodSecurity admission admits a Pod made of the Deployment's template in
	// the namespace that enforces "restricted" (it judges Pods, not Deployments).
	dep := objects(kube.DecodeObjects(t, manifest)).get(t, "Deployment", namespace, release)
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "pod-security-check", "namespace": namespace},
		"spec":     field(dep, "spec", "template", "spec")}
	podYAML, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(podYAML, "create", "--dry-run=server", "-f", "-"); err != nil {
		t.Errorf("the Deployment's pod is refused at Pod Security \"restricted\": %v\n%s", err, out)
	}
	loose := bytes.Replace(podYAML, []byte("allowPrivilegeEscalation: false"), []byte("allowPrivilegeEscalation: true"), 1)
	if out, err := kubectl(loose, "create", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(out, `violates PodSecurity "restricted`) {
		t.Errorf("a pod that may escalate privileges was admitted in the namespace (err %v):\n%s", err, out)
	}

	// The schema refuses at install time too. --skip-crds: helm installs crds/ before it
	// validates the values (seen with v4.3.2), and the install below must find no CRD.
	if out, err := helmKube("install", "bad", chartDir(t), "--namespace", namespace, "--skip-crds", "--set", "replica=2"); err == nil || !strings.Contains(out, "additional properties 'replica' not allowed") {
		t.Errorf("helm install with an unknown top-level key: err %v, want the schema's refusal:\n%s", err, out)
	}

	// A real install under another release name, in its own namespace, with every toggle on.
	const rel, ns = "site-a", "site-a"
	name := rel + "-provider-health-exporter"
	if out, err := kubectl(nil, "get", "crd", "providerhealths.providerhealth.io"); err == nil {
		t.Fatalf("the ProviderHealth CRD exists before the install:\n%s", out)
	}
	out, err := helmKube("install", rel, chartDir(t), "--namespace", ns, "--create-namespace", "-f", everyToggle(t))
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "kubectl get ph") ||
		!strings.Contains(out, "port-forward service/"+name+" 9847") {
		t.Errorf("helm install's output lacks the status or the notes (what to open):\n%s", out)
	}
	installed := map[string]string{ // kind -> namespace ("" cluster-scoped)
		"deployment": ns, "service": ns, "serviceaccount": ns, "configmap/" + name + "-providers": ns,
		"secret/" + name + "-ssh": ns, "secret/" + name + "-gcp": ns, "secret/" + name + "-vsphere": ns, "secret/" + name + "-kubeconfigs": ns,
		"poddisruptionbudget": ns, "networkpolicy": ns, "servicemonitor": ns, "prometheusrule": ns, "alertmanagerconfig": ns,
		"role/" + name + "-leader-election": ns, "rolebinding/" + name + "-leader-election": ns,
		"role/" + name + "-shard": ns, "rolebinding/" + name + "-shard": ns,
		"role/" + name + "-events": "default", "rolebinding/" + name + "-events": "default",
		"clusterrole": "", "clusterrolebinding": "", "clusterrole/" + name + "-viewer": "",
	}
	get := func(what, inNS string) (string, error) {
		ref := what
		if !strings.Contains(what, "/") {
			ref = what + "/" + name
		}
		args := []string{"get", ref, "-o", "name"}
		if inNS != "" {
			args = append(args, "--namespace", inNS)
		}
		return kubectl(nil, args...)
	}
	for what, inNS := range installed {
		if out, err := get(what, inNS); err != nil {
			t.Errorf("after helm install, %s (namespace %q) is missing: %v\n%s", what, inNS, err, out)
		}
	}
	mustKubectl(nil, "get", "crd", "providerhealths.providerhealth.io")
	// The shard's rights, judged by the API server's authorizer as the pods' ServiceAccount:
	// each verb the shard uses on Leases in the release's namespace, none in another namespace
	// nor across all of them, and no verb it does not use.
	serviceAccount := "system:serviceaccount:" + ns + ":" + name
	canI := func(verb string, where ...string) string {
		t.Helper()
		out, _ := kubectl(nil, append([]string{"auth", "can-i", verb, "leases.coordination.k8s.io", "--as", serviceAccount}, where...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return strings.TrimSpace(lines[len(lines)-1])
	}
	for _, verb := range []string{"get", "list", "create", "update", "delete"} {
		if got := canI(verb, "--namespace", ns); got != "yes" {
			t.Errorf("the ServiceAccount: can-i %s leases in %s = %q, want yes (the shard needs it)", verb, ns, got)
		}
		for _, where := range [][]string{{"--namespace", "default"}, {"--all-namespaces"}} {
			if got := canI(verb, where...); got != "no" {
				t.Errorf("the ServiceAccount: can-i %s leases %v = %q, want no (the shard's rights are its namespace's)", verb, where, got)
			}
		}
	}
	if got := canI("watch", "--namespace", ns); got != "no" {
		t.Errorf("the ServiceAccount: can-i watch leases = %q, want no (the shard does not watch)", got)
	}
	jsonpath := func(ref, inNS, path string) string {
		t.Helper()
		return strings.TrimSpace(mustKubectl(nil, "get", ref, "--namespace", inNS, "-o", "jsonpath="+path))
	}
	if got := jsonpath("deployment/"+name, ns, "{.spec.replicas}"); got != "2" {
		t.Errorf("installed Deployment replicas = %s, want 2", got)
	}
	// A ProviderHealth object, as the exporter would write: it must outlive the release.
	mustKubectl([]byte("apiVersion: providerhealth.io/v1alpha1\nkind: ProviderHealth\nmetadata:\n  name: kvm-lab\n"), "create", "-f", "-")

	// helm upgrade: a value changed and a toggle turned off reach the cluster.
	out, err = helmKube("upgrade", rel, chartDir(t), "--namespace", ns, "-f", everyToggle(t),
		"--set", "replicas=3", "--set", "serviceMonitor.interval=1m", "--set", "networkPolicy.enabled=false", "--set", "shard.enabled=false")
	if err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	if !strings.Contains(out, "REVISION: 2") {
		t.Errorf("helm upgrade did not make revision 2:\n%s", out)
	}
	if got := jsonpath("deployment/"+name, ns, "{.spec.replicas}"); got != "3" {
		t.Errorf("after helm upgrade --set replicas=3 the Deployment has %s replicas", got)
	}
	if got := jsonpath("servicemonitor/"+name, ns, "{.spec.endpoints[0].interval}"); got != "1m" {
		t.Errorf("after helm upgrade --set serviceMonitor.interval=1m the ServiceMonitor scrapes every %s", got)
	}
	if out, err := get("networkpolicy", ns); err == nil {
		t.Errorf("after helm upgrade --set networkPolicy.enabled=false the NetworkPolicy is still there:\n%s", out)
	}
	if out, err := get("role/"+name+"-shard", ns); err == nil {
		t.Errorf("after helm upgrade --set shard.enabled=false the shard's Role is still there:\n%s", out)
	}
	if got := canI("list", "--namespace", ns); got != "no" {
		t.Errorf("after helm upgrade --set shard.enabled=false the ServiceAccount may still list Leases (%q)", got)
	}
	if args := jsonpath("deployment/"+name, ns, "{.spec.template.spec.containers[0].args}"); strings.Contains(args, "--shard.enabled") {
		t.Errorf("after helm upgrade --set shard.enabled=false the Deployment's args still hold --shard.enabled: %s", args)
	}

	// helm uninstall: every object goes, the CRD (crds/ is never deleted by helm) and the
	// ProviderHealth objects stay.
	if out, err := helmKube("uninstall", rel, "--namespace", ns); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	for what, inNS := range installed {
		if out, err := get(what, inNS); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("after helm uninstall, %s (namespace %q) is still there (err %v):\n%s", what, inNS, err, out)
		}
	}
	if out, err := kubectl(nil, "get", "crd", "providerhealths.providerhealth.io"); err != nil {
		t.Errorf("helm uninstall deleted the ProviderHealth CRD: %v\n%s", err, out)
	}
	if out, err := kubectl(nil, "get", "providerhealth", "kvm-lab"); err != nil {
		t.Errorf("the ProviderHealth object did not survive helm uninstall: %v\n%s", err, out)
	}
	if out, err := helmKube("list", "--all-namespaces", "-q"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("helm list after uninstall: %v\n%q", err, out)
	}
}
