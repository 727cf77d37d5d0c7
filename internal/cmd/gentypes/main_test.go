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

// TestGenerateRewritesEveryPlace: a build with another list of types rewrites the enum and each
// marked place, and only them.
func TestGenerateRewritesEveryPlace(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		typesFile: "package v1alpha1\n\ntype S struct {\n\t// +optional\n\t// +kubebuilder:validation:Enum=a;b\n\tType string `json:\"type\"`\n}\n",
	}
	for _, d := range docs {
		files[d] = "| TYPE | <!-- provider types -->`a`, `b`<!-- end provider types --> |\nkept\n"
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := generate(root, []string{"a", "b", "tcp"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]string{typesFile}, docs...); !slices.Equal(stale, want) {
		t.Errorf("rewrote %v, want %v", stale, want)
	}
	got, _ := os.ReadFile(filepath.Join(root, typesFile))
	if !strings.Contains(string(got), "\t// +kubebuilder:validation:Enum=a;b;tcp\n\tType string `json:\"type\"`") {
		t.Errorf("types.go after generate:\n%s", got)
	}
	for _, d := range docs {
		got, _ := os.ReadFile(filepath.Join(root, d))
		if want := "| TYPE | <!-- provider types -->`a`, `b`, `tcp`<!-- end provider types --> |\nkept\n"; string(got) != want {
			t.Errorf("%s after generate:\n%s\nwant\n%s", d, got, want)
		}
	}
	if stale, err := generate(root, []string{"a", "b", "tcp"}, false); err != nil || len(stale) > 0 {
		t.Errorf("a second run finds %v stale (%v), want none", stale, err)
	}
	os.WriteFile(filepath.Join(root, docs[0]), []byte("no marker\n"), 0o644)
	if _, err := generate(root, []string{"a"}, false); err == nil || !strings.Contains(err.Error(), docs[0]) {
		t.Errorf("a file without its marked place: error %v, want one naming %s", err, docs[0])
	}
}
