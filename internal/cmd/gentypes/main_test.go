package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFilesListTheBuildsTypes: the CRD's enum marker and the docs' marked places list exactly
// the registered provider types.
func TestFilesListTheBuildsTypes(t *testing.T) {
	stale, err := generate("../../..", names(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("%s do not list the build's provider types %v: run `make generate`", strings.Join(stale, ", "), names())
	}
}

// fixture is a module with two provider types a and b in packages p/a and p/b, each with its
// sections, and the files gentypes edits.
func fixture(t *testing.T) (root string, files map[string]string) {
	t.Helper()
	root = t.TempDir()
	files = map[string]string{
		"go.mod":      "module example.com/m\n",
		providersFile: "package providers\n\nimport (\n\t_ \"example.com/m/p/a\"\n\t_ \"example.com/m/p/b\"\n)\n",
		typesFile:     "package v1alpha1\n\ntype S struct {\n\t// +optional\n\t// +kubebuilder:validation:Enum=a;b\n\tType string `json:\"type\"`\n}\n",
	}
	for _, d := range docs {
		files[d] = "| TYPE | <!-- provider types -->`a`, `b`<!-- end provider types --> |\nkept\n"
	}
	for _, d := range sectionDocs {
		name := filepath.Base(d)
		files[d] += "# Doc\n\n<!-- provider type sections: see p/<type>/" + name + " -->\nstale\n<!-- end provider type sections -->\n\n## After\n"
		// b's section comes first in the imports' order: the doc follows the types' order.
		files["p/b/"+name] = "<!-- the b section -->\n\n### Type `b`\n\nB costs $1. [A's](../a/" + name + "), [the page](../../" + d + "#after), [docs](../../docs/other.md), [web](https://example.com/x.md).\n"
		files["p/a/"+name] = "## a\n\nA.\n"
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, files
}

// TestGenerateRewritesEveryPlace: a build with another list of types rewrites the enum, each
// list and each doc's sections, and only them.
func TestGenerateRewritesEveryPlace(t *testing.T) {
	root, files := fixture(t)
	written := []string{providersFile}
	for _, d := range sectionDocs {
		files["p/c/"+filepath.Base(d)] = "### Type `tcp`\n\nT.\n"
		written = append(written, "p/c/"+filepath.Base(d))
	}
	files[providersFile] = strings.Replace(files[providersFile], "\n)", "\n\t_ \"example.com/m/p/c\"\n)", 1)
	for _, name := range written {
		os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := generate(root, []string{"a", "b", "tcp"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{typesFile, "docs/crd.md", "docs/configuration.md", "docs/architecture.md", "docs/reasons.md", "docs/runbooks.md"}; !slices.Equal(stale, want) {
		t.Errorf("rewrote %v, want %v", stale, want)
	}
	got, _ := os.ReadFile(filepath.Join(root, typesFile))
	if !strings.Contains(string(got), "\t// +kubebuilder:validation:Enum=a;b;tcp\n\tType string `json:\"type\"`") {
		t.Errorf("types.go after generate:\n%s", got)
	}
	for _, d := range docs {
		got, _ := os.ReadFile(filepath.Join(root, d))
		if want := "| TYPE | <!-- provider types -->`a`, `b`, `tcp`<!-- end provider types --> |\nkept\n"; !strings.HasPrefix(string(got), want) {
			t.Errorf("%s after generate:\n%s\nwant it to start with\n%s", d, got, want)
		}
	}
	for _, d := range sectionDocs {
		name := filepath.Base(d)
		got, _ := os.ReadFile(filepath.Join(root, d))
		want := "# Doc\n\n<!-- provider type sections: see p/<type>/" + name + " -->\n" +
			"## a\n\nA.\n\n" +
			"### Type `b`\n\nB costs $1. [A's](../p/a/" + name + "), [the page](#after), [docs](other.md), [web](https://example.com/x.md).\n\n" +
			files["p/c/"+name] +
			"<!-- end provider type sections -->\n\n## After\n"
		if !strings.HasSuffix(string(got), want) {
			t.Errorf("%s after generate:\n%s\nwant it to end with\n%s", d, got, want)
		}
	}
	if stale, err := generate(root, []string{"a", "b", "tcp"}, false); err != nil || len(stale) > 0 {
		t.Errorf("a second run finds %v stale (%v), want none", stale, err)
	}
	os.WriteFile(filepath.Join(root, docs[0]), []byte("no marker\n"), 0o644)
	if _, err := generate(root, []string{"a", "b", "tcp"}, false); err == nil || !strings.Contains(err.Error(), docs[0]) {
		t.Errorf("a file without its marked place: error %v, want one naming %s", err, docs[0])
	}
}

// TestSectionProblems: a type's package without its section, a section whose heading names no
// registered type or the same type twice, and a registered type without a section are errors
// that name the file and say what to write.
func TestSectionProblems(t *testing.T) {
	for _, tc := range []struct {
		name, file, body string
		types            []string
		want             string
	}{
		{"missing", "p/b/reasons.md", "", []string{"a", "b"}, "p/b has no reasons.md: the section of docs/reasons.md for the type it registers"},
		{"no heading", "p/b/reasons.md", "text\n", []string{"a", "b"}, `p/b/reasons.md: the first line must be a heading that names the type (like "## b"), got "text"`},
		{"unknown type", "p/b/reasons.md", "## c\n", []string{"a", "b"}, `p/b/reasons.md: its heading names "c", which is not a registered provider type (a, b)`},
		{"twice", "p/b/reasons.md", "## a\n", []string{"a", "b"}, "p/b/reasons.md: a second section for type a"},
		{"unlisted type", "", "", []string{"a", "b", "c"}, "type c has no section for docs/reasons.md: none of the packages providers/providers.go imports has a reasons.md naming it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := fixture(t)
			switch {
			case tc.file != "" && tc.body == "":
				os.Remove(filepath.Join(root, tc.file))
			case tc.file != "":
				os.WriteFile(filepath.Join(root, tc.file), []byte(tc.body), 0o644)
			}
			_, err := generate(root, tc.types, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
