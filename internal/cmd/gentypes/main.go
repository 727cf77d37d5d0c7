// Command gentypes writes the list of the build's provider types (the registry, filled by the
// imports of package providers) where files other than Go code must spell it out: the
// ProviderHealth CRD's enum of status.type (the kubebuilder marker in
// crdwriter/v1alpha1/types.go, which controller-gen then turns into the CRD) and the marked
// places of the docs. `make generate` runs it; with -check it changes nothing and fails, naming
// the files, when one is not up to date (a test runs it so).
//
// A marked place of a Markdown file is the text between <!-- provider types --> and
// <!-- end provider types -->: the types, each in backticks, separated by commas.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

// typesFile is the Go file whose enum marker lists the types, relative to the module root.
const typesFile = "crdwriter/v1alpha1/types.go"

// docs are the Markdown files with marked places, relative to the module root.
var docs = []string{"docs/crd.md", "docs/configuration.md", "docs/architecture.md"}

var (
	enumMarker = regexp.MustCompile(`(?m)^(\t// \+kubebuilder:validation:Enum=).*\n(\tType string )`)
	docMarker  = regexp.MustCompile(`(<!-- provider types -->).*?(<!-- end provider types -->)`)
)

func main() {
	root := flag.String("root", ".", "the module's root directory")
	check := flag.Bool("check", false, "change nothing; fail when a file is not up to date")
	flag.Parse()
	stale, err := generate(*root, names(), !*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gentypes:", err)
		os.Exit(1)
	}
	if *check && len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "gentypes: %s do not list the build's provider types; run `make generate`\n", strings.Join(stale, ", "))
		os.Exit(1)
	}
}

// names are the registered provider types, sorted.
func names() []string {
	var ns []string
	for _, t := range checks.Registered() {
		ns = append(ns, string(t.Name))
	}
	return ns
}

// generate brings every file under root up to date with types, writing them when write is set,
// and returns the files that were not.
func generate(root string, types []string, write bool) (stale []string, err error) {
	if len(types) == 0 {
		return nil, fmt.Errorf("no provider type is registered")
	}
	enum := "${1}" + strings.Join(types, ";") + "\n${2}"
	quoted := make([]string, len(types))
	for i, t := range types {
		quoted[i] = "`" + t + "`"
	}
	list := "${1}" + strings.Join(quoted, ", ") + "${2}"
	edits := map[string]func([]byte) ([]byte, int){
		typesFile: func(b []byte) ([]byte, int) {
			return enumMarker.ReplaceAll(b, []byte(enum)), len(enumMarker.FindAll(b, -1))
		},
	}
	for _, d := range docs {
		edits[d] = func(b []byte) ([]byte, int) {
			return docMarker.ReplaceAll(b, []byte(list)), len(docMarker.FindAll(b, -1))
		}
	}
	for _, name := range append([]string{typesFile}, docs...) {
		path := filepath.Join(root, name)
		old, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		updated, n := edits[name](old)
		if n == 0 {
			return nil, fmt.Errorf("%s has no marked place for the provider types", path)
		}
		if bytes.Equal(old, updated) {
			continue
		}
		stale = append(stale, name)
		if write {
			if err := os.WriteFile(path, updated, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return stale, nil
}
