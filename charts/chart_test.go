// Package charts holds the exporter's Helm chart (charts/provider-health-exporter); its tests
// check the chart's copies of generated files, then run a real helm (built from the Go module
// proxy, internal/testenv/helm): helm lint --strict, helm template with the defaults and with
// every toggle, the renderings compared object by object with kustomize's rendering of deploy/,
// and (apiserver_test.go) a strict server-side dry run, helm install, upgrade and uninstall
// against the test environment's real API server.
package charts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/helm"
)

// release and namespace are those of deploy/: a release of this name renders objects of the
// same names as kustomize does, so the two renderings can be compared object by object.
const (
	release   = "provider-health-exporter"
	namespace = "provider-health-exporter"
)

func repoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Dir(filepath.Dir(file))
}

func chartDir(t testing.TB) string {
	return filepath.Join(repoRoot(t), "charts", "provider-health-exporter")
}

// everyToggle is the values file with every toggle of the chart on.
func everyToggle(t testing.TB) string {
	return filepath.Join(repoRoot(t), "charts", "testdata", "every-toggle.yaml")
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// helmCmd runs the helm binary; each test has its own helm home (cache, config, data), so
// nothing is read from or written to the user's.
type helmCmd struct {
	t    testing.TB
	path string
	home string
}

func newHelm(t testing.TB) helmCmd {
	t.Helper()
	return helmCmd{t: t, path: helm.RequireBinary(t), home: t.TempDir()}
}

// run runs helm with args for at most three minutes and returns its combined output.
func (h helmCmd) run(args ...string) (string, error) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.path, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// template renders the chart as release in namespace with extra arguments (-f, --set).
func (h helmCmd) template(args ...string) []byte {
	h.t.Helper()
	out, err := h.run(append([]string{"template", release, chartDir(h.t), "--namespace", namespace}, args...)...)
	if err != nil {
		h.t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return []byte(out)
}

func decodeObjects(t testing.TB, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode the rendered manifests: %v\n%s", err, manifest)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// objects is a rendering, by kind and name.
type objects []*unstructured.Unstructured

func (o objects) kinds() []string {
	var ks []string
	for _, x := range o {
		ks = append(ks, x.GetKind()+"/"+x.GetName())
	}
	slices.Sort(ks)
	return ks
}

func (o objects) all(kind string) objects {
	var out objects
	for _, x := range o {
		if x.GetKind() == kind {
			out = append(out, x)
		}
	}
	return out
}

// find returns the object of kind named name in namespace ns ("" for cluster-scoped), or nil.
func (o objects) find(kind, ns, name string) *unstructured.Unstructured {
	for _, x := range o {
		if x.GetKind() == kind && x.GetName() == name && x.GetNamespace() == ns {
			return x
		}
	}
	return nil
}

// get returns the object of kind named name in namespace ns, failing the test when it is missing.
func (o objects) get(t testing.TB, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	x := o.find(kind, ns, name)
	if x == nil {
		t.Fatalf("no %s %s/%s in the rendering (it holds %v)", kind, ns, name, o.kinds())
	}
	return x
}

// field returns the value at path in obj (nil when absent).
func field(obj *unstructured.Unstructured, path ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
	return v
}

// asYAML renders v for a comparison and its failure message.
func asYAML(t testing.TB, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChartCopiesOfGeneratedFiles: the chart's appVersion is the exporter's VERSION, its CRD
// (files/crds/, rendered by templates/crd.yaml) is byte for byte deploy/crd's (generated by `make generate`), and its PrometheusRule and
// AlertmanagerConfig specs and dashboards are what `make deploy-rules` generates from the mixin
// now, the specs equal to those of deploy/prometheusrule.yaml and deploy/alertmanagerconfig.yaml
// once the job placeholder names deploy/'s job.
func TestChartCopiesOfGeneratedFiles(t *testing.T) {
	root := repoRoot(t)
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir(t), "Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if version := strings.TrimSpace(string(readFile(t, filepath.Join(root, "VERSION")))); chart.AppVersion != version {
		t.Errorf("Chart.yaml's appVersion is %q, VERSION says %q: keep them equal", chart.AppVersion, version)
	}

	crds := []string{"providerhealth.io_providerhealths.yaml", "providerhealth.io_providerhealthparts.yaml"}
	for _, crd := range crds {
		if !bytes.Equal(readFile(t, filepath.Join(chartDir(t), "files", "crds", crd)), readFile(t, filepath.Join(root, "deploy", "crd", crd))) {
			t.Errorf("charts/provider-health-exporter/files/crds/%s differs from deploy/crd/%s: run make generate", crd, crd)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(chartDir(t), "files", "crds")); err != nil || len(ents) != len(crds) {
		t.Errorf("the chart's files/crds/ should hold only the CRDs of deploy/crd/: %v %v", ents, err)
	}
	// No crds/ directory: Helm would install it once and never upgrade it (templates/crd.yaml).
	if _, err := os.Stat(filepath.Join(chartDir(t), "crds")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the chart has a crds/ directory (%v): the CRD is a template so that helm upgrade updates it", err)
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(t, "no go command to run jsonnet from the tools module: %v", err)
	}
	// The dashboards, as `make deploy-rules` writes them (jsonnet -m).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	dashDir := t.TempDir()
	cmd := exec.CommandContext(ctx, goTool, "tool", "-modfile=tools/go.mod", "jsonnet", "-J", "mixin", "-m", dashDir, "charts/grafana-dashboards.jsonnet")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("jsonnet charts/grafana-dashboards.jsonnet: %v\n%s", err, out)
	}
	cancel()
	generated, _ := filepath.Glob(filepath.Join(dashDir, "*"))
	committed, _ := filepath.Glob(filepath.Join(chartDir(t), "files", "dashboards", "*"))
	if len(generated) == 0 || len(generated) != len(committed) {
		t.Errorf("the mixin generates the dashboards %v, the chart holds %v: run make deploy-rules", generated, committed)
	}
	for _, g := range generated {
		if !bytes.Equal(readFile(t, g), readFile(t, filepath.Join(chartDir(t), "files", "dashboards", filepath.Base(g)))) {
			t.Errorf("charts/provider-health-exporter/files/dashboards/%s differs from what the mixin generates: run make deploy-rules", filepath.Base(g))
		}
	}

	for _, c := range []struct{ jsonnet, file, deploy string }{
		{"charts/prometheusrule-spec.jsonnet", "prometheusrule-spec.yaml", "deploy/prometheusrule.yaml"},
		{"charts/alertmanagerconfig-spec.jsonnet", "alertmanagerconfig-spec.yaml", "deploy/alertmanagerconfig.yaml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		// The command of `make deploy-rules`.
		cmd := exec.CommandContext(ctx, goTool, "tool", "-modfile=tools/go.mod", "jsonnet", "-J", "mixin", "-S", c.jsonnet)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		generated, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("jsonnet %s: %v\n%s", c.jsonnet, err, stderr.String())
		}
		committed := readFile(t, filepath.Join(chartDir(t), "files", c.file))
		if !bytes.Equal(generated, committed) {
			t.Errorf("charts/provider-health-exporter/files/%s differs from what the mixin generates: run make deploy-rules\n--- generated:\n%.2000s", c.file, generated)
		}
		// The chart replaces the job placeholder with the release's job (job_test.go); with
		// the release of deploy/'s names the job is deploy/'s.
		var spec any
		if err := yaml.Unmarshal(bytes.ReplaceAll(committed, []byte("__PHE_JOB__"), []byte("provider-health-exporter")), &spec); err != nil {
			t.Fatalf("files/%s: %v", c.file, err)
		}
		var obj struct {
			Spec any `json:"spec"`
		}
		if err := yaml.Unmarshal(readFile(t, filepath.Join(root, c.deploy)), &obj); err != nil {
			t.Fatal(err)
		}
		if got, want := asYAML(t, spec), asYAML(t, obj.Spec); got != want || obj.Spec == nil {
			t.Errorf("files/%s is not the spec of %s:\n%s\nwant:\n%s", c.file, c.deploy, got, want)
		}
	}
}

// TestLintStrict: helm lint --strict passes with the defaults and with every toggle on.
func TestLintStrict(t *testing.T) {
	h := newHelm(t)
	for name, args := range map[string][]string{
		"defaults":     nil,
		"every toggle": {"-f", everyToggle(t)},
	} {
		out, err := h.run(append([]string{"lint", "--strict", chartDir(t), "--namespace", namespace}, args...)...)
		if err != nil || !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint --strict (%s): %v\n%s", name, err, out)
		}
	}
}

// TestSchemaRefuses: values.schema.json refuses a value of the wrong type and an unknown
// top-level key, with a message naming it, in helm template, helm lint and (apiserver_test.go)
// helm install alike.
func TestSchemaRefuses(t *testing.T) {
	h := newHelm(t)
	for _, c := range []struct {
		set  string
		want []string
	}{
		{"replicas=two", []string{"replicas", "integer"}},
		{"serviceMonitor.enabled=yes", []string{"serviceMonitor", "enabled", "boolean"}},
		{"replica=2", []string{"replica", "additional"}},
		{"image.tags=v1", []string{"tags", "additional"}},
		{"shard.enabled=yes", []string{"shard", "enabled", "boolean"}},
		{"shard.retryPeriod=2sec", []string{"retryPeriod", "does not match pattern"}},
		{"shard.leaseDuration=15", []string{"leaseDuration", "string"}},
		{"shard.renewDeadline=1d", []string{"renewDeadline", "does not match pattern"}},
		{"shard.retryperiod=2s", []string{"retryperiod", "additional"}},
	} {
		for _, cmd := range [][]string{
			{"template", release, chartDir(t)},
			{"lint", "--strict", chartDir(t)},
		} {
			out, err := h.run(append(cmd, "--set", c.set)...)
			if err == nil {
				t.Errorf("helm %s --set %s succeeded, want the schema to refuse it:\n%s", cmd[0], c.set, out)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("helm %s --set %s: the error does not say %q:\n%s", cmd[0], c.set, w, out)
				}
			}
		}
	}
	// The values the chart ships pass (the refusals above are the schema's, not every value's).
	if out, err := h.run("template", release, chartDir(t), "--set", "replicas=3", "--set", "serviceMonitor.enabled=true",
		"--set", "shard.leaseDuration=1m30s", "--set", "shard.retryPeriod=500ms", "--set", "shard.renewDeadline="); err != nil {
		t.Errorf("helm template with valid values: %v\n%s", err, out)
	}
}
