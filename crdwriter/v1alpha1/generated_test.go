package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// controllerGen is the command that generates the CRD and the deepcopy code: the version pinned
// in the tools module, as `make generate` runs it. CONTROLLER_GEN overrides it (a command line
// split on spaces).
func controllerGen() []string {
	if c := os.Getenv("CONTROLLER_GEN"); c != "" {
		return strings.Fields(c)
	}
	return []string{"go", "tool", "-modfile=tools/go.mod", "controller-gen"}
}

// TestGeneratedFilesUpToDate regenerates the CRD and the deepcopy code into a temporary
// directory and fails when the committed files differ: edit the markers, then regenerate.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root := testutil.RepoRoot(t)
	tmp := t.TempDir()
	args := append(controllerGen(),
		"object", "paths=./crdwriter/v1alpha1/...", "crd:crdVersions=v1",
		"output:crd:dir="+filepath.Join(tmp, "crd"), "output:object:dir="+filepath.Join(tmp, "obj"))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if _, lookErr := exec.LookPath(args[0]); lookErr != nil || strings.Contains(out.String(), "dial tcp") {
			skipOrFail(t, "controller-gen cannot run (%v): %s", err, out.String())
		}
		t.Fatalf("controller-gen failed: %v\n%s", err, out.String())
	}
	for _, f := range []struct{ generated, committed string }{
		{filepath.Join(tmp, "crd", "providerhealth.io_providerhealths.yaml"), filepath.Join(root, "deploy", "crd", "providerhealth.io_providerhealths.yaml")},
		{filepath.Join(tmp, "crd", "providerhealth.io_providerhealthparts.yaml"), filepath.Join(root, "deploy", "crd", "providerhealth.io_providerhealthparts.yaml")},
		{filepath.Join(tmp, "obj", "zz_generated.deepcopy.go"), filepath.Join(root, "crdwriter", "v1alpha1", "zz_generated.deepcopy.go")},
	} {
		want, err := os.ReadFile(f.generated)
		if err != nil {
			t.Fatalf("read generated file: %v", err)
		}
		got, err := os.ReadFile(f.committed)
		if err != nil {
			t.Fatalf("read committed file: %v", err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s is out of date: regenerate it with\n  %s object paths=./crdwriter/v1alpha1/... crd:crdVersions=v1 output:crd:dir=deploy/crd",
				f.committed, strings.Join(controllerGen(), " "))
		}
	}
	// Only the CRD files may live in deploy/crd/, so `kubectl apply -f deploy/crd/` applies
	// exactly what the types describe.
	generated, err := os.ReadDir(filepath.Join(tmp, "crd"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadDir(filepath.Join(root, "deploy", "crd"))
	if err != nil {
		t.Fatal(err)
	}
	if len(generated) != 2 || len(committed) != len(generated) {
		t.Errorf("controller-gen wrote %d CRD files, deploy/crd/ holds %d; want 2 of each", len(generated), len(committed))
	}
}

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("REQUIRE_INTEGRATION") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// TestCRDAgreesWithGoConstants checks the generated schema against the constants the writer
// uses and against the exporter's list of provider types, which are the one source of truth.
func TestCRDAgreesWithGoConstants(t *testing.T) {
	// The kind is the Go type's name (the scheme registers types by it); the short name is what
	// the docs promise (`kubectl get ph`).
	kind, shortName := reflect.TypeFor[v1alpha1.ProviderHealth]().Name(), "ph"
	raw, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "deploy", "crd", "providerhealth.io_providerhealths.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("decode CRD: %v", err)
	}
	if crd.Spec.Group != v1alpha1.GroupName || crd.Spec.Names.Plural != v1alpha1.Resource ||
		crd.Spec.Names.Kind != kind || !slices.Equal(crd.Spec.Names.ShortNames, []string{shortName}) ||
		crd.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Errorf("CRD names = %s %+v %s, want group %s, kind %s, plural %s, short name %s, cluster scope",
			crd.Spec.Group, crd.Spec.Names, crd.Spec.Scope, v1alpha1.GroupName, kind, v1alpha1.Resource, shortName)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != v1alpha1.SchemeGroupVersion.Version {
		t.Fatalf("CRD versions = %+v, want only %s", crd.Spec.Versions, v1alpha1.SchemeGroupVersion.Version)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("CRD has no status subresource")
	}
	status := v.Schema.OpenAPIV3Schema.Properties["status"]
	if _, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]; ok {
		t.Error("CRD has a spec; the resource is status-only")
	}
	targets := status.Properties["targets"]
	if targets.MaxItems == nil || *targets.MaxItems != v1alpha1.MaxTargets {
		t.Errorf("status.targets maxItems = %v, want %d", targets.MaxItems, v1alpha1.MaxTargets)
	}
	if ext := targets.XListType; ext == nil || *ext != "map" || !slices.Equal(targets.XListMapKeys, []string{"name"}) {
		t.Errorf("status.targets is not a list map keyed by name: %v %v", targets.XListType, targets.XListMapKeys)
	}
	if n := targets.Items.Schema.Properties["name"].MaxLength; n == nil || *n != v1alpha1.MaxTargetNameLength {
		t.Errorf("status.targets[].name maxLength = %v, want %d", n, v1alpha1.MaxTargetNameLength)
	}
	// The providers file refuses longer names with config's own constant (config imports no
	// Kubernetes package): the two must agree.
	if config.MaxTargetNameLength != v1alpha1.MaxTargetNameLength {
		t.Errorf("config.MaxTargetNameLength = %d, the CRD's status.targets[].name maxLength %d", config.MaxTargetNameLength, v1alpha1.MaxTargetNameLength)
	}
	msg := targets.Items.Schema.Properties["message"]
	if msg.MaxLength == nil || *msg.MaxLength != v1alpha1.MaxTargetMessageLength {
		t.Errorf("status.targets[].message maxLength = %v, want %d", msg.MaxLength, v1alpha1.MaxTargetMessageLength)
	}
	var enum []string
	for _, e := range status.Properties["type"].Enum {
		enum = append(enum, strings.Trim(string(e.Raw), `"`))
	}
	var types []string
	for _, t := range checks.Registered() {
		types = append(types, string(t.Name))
	}
	if !slices.Equal(slices.Sorted(slices.Values(enum)), types) {
		t.Errorf("status.type enum = %v, want the build's provider types %v (providers/): run `make generate`", enum, types)
	}
	var columns []string
	for _, c := range v.AdditionalPrinterColumns {
		col := strings.ToUpper(c.Name)
		if c.Priority > 0 {
			col += "(wide)"
		}
		columns = append(columns, col)
	}
	want := []string{"READY", "REASON", "TARGETS", "AGE", "TYPE(wide)", "MESSAGE(wide)", "SINCE(wide)"}
	if !slices.Equal(columns, want) {
		t.Errorf("printer columns = %v, want %v", columns, want)
	}
}

// TestPartCRDAgreesWithGoConstants checks the ProviderHealthPart CRD: its names, namespaced
// scope, and spec.data's bound equal to MaxPartData once in base64.
func TestPartCRDAgreesWithGoConstants(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "deploy", "crd", "providerhealth.io_providerhealthparts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("decode CRD: %v", err)
	}
	kind := reflect.TypeFor[v1alpha1.ProviderHealthPart]().Name()
	if crd.Spec.Group != v1alpha1.GroupName || crd.Spec.Names.Plural != v1alpha1.PartResource || crd.Spec.Names.Kind != kind ||
		crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("CRD names = %s %+v %s, want group %s, kind %s, plural %s, namespaced",
			crd.Spec.Group, crd.Spec.Names, crd.Spec.Scope, v1alpha1.GroupName, kind, v1alpha1.PartResource)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD versions = %+v, want one", crd.Spec.Versions)
	}
	data := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["data"]
	if want := int64((v1alpha1.MaxPartData + 2) / 3 * 4); data.MaxLength == nil || *data.MaxLength != want {
		t.Errorf("spec.data maxLength = %v, want %d (MaxPartData in base64)", data.MaxLength, want)
	}
}
