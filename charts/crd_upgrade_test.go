package charts

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

// previousChart writes, under dir, the chart as version 0.1.0 shipped it: the CRD in crds/
// (which Helm installs once and never upgrades) instead of templates/crd.yaml, and, since that
// CRD must be older than the one the chart holds now, with the last type of status.type's enum
// left out. It returns the chart's directory and the type left out.
func previousChart(t *testing.T, dir string) (string, string) {
	t.Helper()
	prev := filepath.Join(dir, "provider-health-exporter")
	if out, err := exec.Command("cp", "-r", chartDir(t), prev).CombinedOutput(); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(prev, "templates", "crd.yaml")); err != nil {
		t.Fatal(err)
	}
	chartYAML := filepath.Join(prev, "Chart.yaml")
	var chart map[string]any
	if err := yaml.Unmarshal(readFile(t, chartYAML), &chart); err != nil {
		t.Fatal(err)
	}
	chart["version"] = "0.1.0"
	writeYAML(t, chartYAML, chart)

	var crd map[string]any
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir(t), "files", "crds", "providerhealth.io_providerhealths.yaml")), &crd); err != nil {
		t.Fatal(err)
	}
	typ := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["status"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)
	enum := typ["enum"].([]any)
	if len(enum) < 2 {
		t.Fatalf("the CRD's status.type enum %v has fewer than two types", enum)
	}
	newest := enum[len(enum)-1].(string)
	typ["enum"] = enum[:len(enum)-1]
	if err := os.MkdirAll(filepath.Join(prev, "crds"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeYAML(t, filepath.Join(prev, "crds", "providerhealth.io_providerhealths.yaml"), crd)
	return prev, newest
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCRDUpgrade installs the previous chart version (its CRD in crds/, a type behind) on a
// real API server, where a ProviderHealth object's status of the newest type is refused; helm
// upgrade to this chart (taking over the CRD crds/ had created, as docs/deploy.md says) updates
// the CRD, so the same status is accepted; a second upgrade needs nothing special; helm
// uninstall keeps the CRD and the objects; crds.install=false renders no CRD.
func TestCRDUpgrade(t *testing.T) {
	h := newHelm(t)
	kubectlPath, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH: install it (e.g. the kubectl package) to read the cluster")
	}
	env := kube.Start(t)
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
	helmKube := func(args ...string) string {
		t.Helper()
		out, err := h.run(append(args, "--kubeconfig", env.Kubeconfig)...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	const rel, ns = "phe", "monitoring"
	// The object the exporter would write, and its status of a type.
	setType := func(name, typ string) (string, error) {
		if out, err := kubectl([]byte("apiVersion: providerhealth.io/v1alpha1\nkind: ProviderHealth\nmetadata:\n  name: "+name+"\n"), "apply", "-f", "-"); err != nil {
			t.Fatalf("create ProviderHealth %s: %v\n%s", name, err, out)
		}
		return kubectl(nil, "patch", "providerhealth", name, "--subresource=status", "--type=merge",
			"-p", `{"status":{"type":"`+typ+`","readyTargets":0,"totalTargets":0}}`)
	}

	prev, newest := previousChart(t, t.TempDir())
	helmKube("install", rel, prev, "--namespace", ns, "--create-namespace", "--set", "replicas=1")
	if out, err := setType("before", newest); err == nil || !strings.Contains(out, "Unsupported value") {
		t.Fatalf("the previous version's CRD accepted status.type %q (err %v): the test needs a CRD a type behind\n%s", newest, err, out)
	}

	// The upgrade: --take-ownership adopts the CRD that crds/ created outside the release.
	out := helmKube("upgrade", rel, chartDir(t), "--namespace", ns, "--set", "replicas=1", "--take-ownership")
	if !strings.Contains(out, "REVISION: 2") {
		t.Errorf("helm upgrade did not make revision 2:\n%s", out)
	}
	enum, err := kubectl(nil, "get", "crd", "providerhealths.providerhealth.io", "-o",
		"jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.status.properties.type.enum}")
	if err != nil || !strings.Contains(enum, `"`+newest+`"`) {
		t.Errorf("after helm upgrade the CRD's type enum is %s (%v), want it to hold %s", enum, err, newest)
	}
	if out, err := setType("after", newest); err != nil {
		t.Errorf("after helm upgrade, status.type %q is refused: %v\n%s", newest, err, out)
	}
	meta, err := kubectl(nil, "get", "crd", "providerhealths.providerhealth.io", "-o",
		`jsonpath={.metadata.annotations.helm\.sh/resource-policy} {.metadata.annotations.meta\.helm\.sh/release-name} {.metadata.labels.app\.kubernetes\.io/managed-by}`)
	if err != nil || strings.TrimSpace(meta) != "keep "+rel+" Helm" {
		t.Errorf("the CRD's resource policy, release and manager are %q (%v), want keep %s Helm", meta, err, rel)
	}

	// A later upgrade finds the CRD in the release: no flag needed.
	helmKube("upgrade", rel, chartDir(t), "--namespace", ns, "--set", "replicas=1", "--set", "crd.leaderElect=false")

	helmKube("uninstall", rel, "--namespace", ns)
	if out, err := kubectl(nil, "get", "crd", "providerhealths.providerhealth.io"); err != nil {
		t.Errorf("helm uninstall deleted the CRD despite helm.sh/resource-policy keep: %v\n%s", err, out)
	}
	got, err := kubectl(nil, "get", "providerhealth", "-o", "name")
	if names := strings.Fields(got); err != nil || !slices.Contains(names, "providerhealth.providerhealth.io/after") {
		t.Errorf("after helm uninstall the ProviderHealth objects are %v (%v)", names, err)
	}

	if objs := objects(kube.DecodeObjects(t, h.template("--set", "crds.install=false"))); len(objs.all("CustomResourceDefinition")) != 0 {
		t.Error("crds.install=false still renders the CRD")
	}
}
