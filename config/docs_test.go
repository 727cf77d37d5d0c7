package config_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

const docsFile = "../docs/configuration.md"

// TestDocsExample: the complete example in docs/configuration.md is the repository's testdata/providers.yml, byte
// for byte, so the example users copy is the one the tests load.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	if !ok {
		t.Fatal("no ```yaml block in the docs")
	}
	block, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatal("the docs' first ```yaml block does not end")
	}
	if block != string(example) {
		t.Errorf("the docs' first yaml block differs from testdata/providers.yml; copy the file into the docs")
	}
	if _, err := config.Parse("docs/configuration.md", []byte(block)); err != nil {
		t.Errorf("the docs' example does not load: %v", err)
	}
}

// TestDocsYAMLBlocksLoad: every other yaml example of the docs is a valid providers file too.
func TestDocsYAMLBlocksLoad(t *testing.T) {
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(doc), "```yaml\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("want the example and at least one more yaml block, found %d", len(blocks))
	}
	for i, b := range blocks {
		b, _, _ = strings.Cut(b, "```")
		if _, err := config.Parse("docs/configuration.md", []byte(dedent(b))); err != nil {
			t.Errorf("yaml block %d of the docs does not load: %v", i+1, err)
		}
	}
}

// dedent removes the indentation a Markdown list item gives a code block.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestDocsFields: every field the loader accepts has a row in the docs' tables, and every default
// the loader applies is written there with its value.
func TestDocsFields(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, list := range [][]string{config.YAMLKeys[config.Config](), config.YAMLKeys[config.Provider](), config.YAMLKeys[kvm.Host]()} {
		for _, f := range list {
			if !strings.Contains(doc, "| `"+f+"` |") {
				t.Errorf("field %s has no table row in %s", f, docsFile)
			}
		}
	}
	// Each type's fields, in the section its package writes (checks/<type>/configuration.md).
	for _, typ := range checks.Registered() {
		for _, f := range typ.Block.Fields {
			if !strings.Contains(doc, "| `"+f+"` |") {
				t.Errorf("%s: field %s has no table row in %s: add it to the configuration.md of the type's package and run `make generate`", typ.Name, f, docsFile)
			}
		}
	}
	for _, v := range []string{kubernetes.DefaultLabelSelector, gcp.DefaultFilter, kubernetes.DefaultVersion, kubernetes.DefaultResource,
		kvm.DefaultSocket, strconv.Itoa(kvm.DefaultPort), strconv.Itoa(kvm.DefaultConcurrency),
		"1-" + strconv.Itoa(kvm.MaxConcurrency)} {
		if !strings.Contains(doc, "`"+v+"`") && !strings.Contains(doc, "("+v+")") {
			t.Errorf("default %q is not in %s", v, docsFile)
		}
	}
	for _, ty := range config.TypeNames() {
		if !strings.Contains(doc, "### Type `"+ty+"`") {
			t.Errorf("type %s has no section in %s: write configuration.md in the type's package and run `make generate` (docs/providers.md)", ty, docsFile)
		}
	}
	// The sample of errors in the docs is what the loader prints for testdata/invalid-many-errors.yml.
	_, err = parseTestdata(t, "invalid-many-errors.yml")
	for _, line := range strings.Split(err.Error(), "\n") {
		line = withTypesMarker(strings.Replace(line, "testdata/invalid-many-errors.yml", "providers.yml", 1))
		if strings.Contains(line, "labelSelector") || strings.Contains(line, "gcp.project:") ||
			strings.Contains(line, "kvm.port") || strings.Contains(line, "extra") {
			continue // the sample shows a selection
		}
		if !strings.Contains(doc, line+"\n") {
			t.Errorf("the docs' sample of errors lacks\n%s", line)
		}
	}
}
