// Command gentypes writes what files other than Go code must say about the build's provider
// types (the registry, filled by the imports of package providers): the ProviderHealth CRD's
// enum of status.type (the kubebuilder marker in crdwriter/v1alpha1/types.go, which
// controller-gen then turns into the CRD), the docs' lists of the types, the docs' sections
// that each type writes in its own package, and the Helm chart's and deploy/'s pieces of each
// type's credentials Secret, from its package's credentials.yaml (credentials.go). `make
// generate` runs it; with -check it changes nothing and fails, naming the files, when one is
// not up to date (a test runs it so).
//
// A list is the text between <!-- provider types --> and <!-- end provider types -->: the
// types, each in backticks, separated by commas.
//
// A type's sections are Markdown files in its package's directory named after the doc they go
// into: checks/kvm/reasons.md is the kvm section of docs/reasons.md. Each starts with a heading
// that names the type (after any leading HTML comment, which is left out); its relative links
// are written from the package's directory, so they work where it is, and are rewritten for
// the doc. They go, in the order of the types' names, between the doc's
// <!-- provider type sections ... --> and <!-- end provider type sections --> lines.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

// typesFile is the Go file whose enum marker lists the types, relative to the module root.
const typesFile = "crdwriter/v1alpha1/types.go"

// docs are the Markdown files with lists of the types, relative to the module root.
var docs = []string{"docs/crd.md", "docs/configuration.md", "docs/architecture.md"}

// sectionDocs are the Markdown files with the types' own sections, relative to the module root.
var sectionDocs = []string{"docs/reasons.md", "docs/configuration.md", "docs/runbooks.md"}

// providersFile is the one list of the build's types: its imports are the types' packages.
const providersFile = "providers/providers.go"

var (
	enumMarker    = regexp.MustCompile(`(?m)^(\t// \+kubebuilder:validation:Enum=).*\n(\tType string )`)
	docMarker     = regexp.MustCompile(`(<!-- provider types -->).*?(<!-- end provider types -->)`)
	sectionMarker = regexp.MustCompile(`(?s)(<!-- provider type sections[^\n]*-->\n).*?\n?(<!-- end provider type sections -->)`)
	// sectionHeading is a section's first heading: "## kvm" or "### Type `kvm`".
	sectionHeading = regexp.MustCompile("^#+ (?:Type )?`?([a-z][a-z0-9-]*)`?$")
	mdLink         = regexp.MustCompile(`\]\(([^()\s]+)\)`)
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
	type edit func([]byte) ([]byte, error)
	marked := func(re *regexp.Regexp, repl []byte, what string) edit {
		return func(b []byte) ([]byte, error) {
			if !re.Match(b) {
				return nil, fmt.Errorf("has no marked place for %s", what)
			}
			return re.ReplaceAll(b, repl), nil
		}
	}
	edits := map[string][]edit{typesFile: {marked(enumMarker, []byte(enum), "the provider types")}}
	files := []string{typesFile}
	add := func(name string, e edit) {
		if _, ok := edits[name]; !ok {
			files = append(files, name)
		}
		edits[name] = append(edits[name], e)
	}
	for _, d := range docs {
		add(d, marked(docMarker, []byte(list), "the provider types"))
	}
	dirs, err := typeDirs(root)
	if err != nil {
		return nil, err
	}
	for _, d := range sectionDocs {
		body, err := sections(root, d, dirs, types)
		if err != nil {
			return nil, err
		}
		// ReplaceAll expands $ in the replacement: the sections go in literally.
		repl := bytes.ReplaceAll(body, []byte("$"), []byte("$$"))
		add(d, marked(sectionMarker, append(append([]byte("${1}"), repl...), "${2}"...), "the provider types' sections"))
	}
	creds, err := loadCredentials(root, dirs, types)
	if err != nil {
		return nil, err
	}
	typesYAML, err := chartTypes(creds)
	if err != nil {
		return nil, err
	}
	add(chartTypesFile, func([]byte) ([]byte, error) { return typesYAML, nil })
	add(chartValuesFile, chartValues(creds))
	add(chartSchemaFile, chartSchema(creds, types))
	add(deploymentFile, deployment(creds))
	add(deployDoc, deployTable(creds))
	for _, name := range files {
		path := filepath.Join(root, name)
		old, err := os.ReadFile(path)
		if err != nil && !(name == chartTypesFile && errors.Is(err, os.ErrNotExist)) {
			return nil, err
		}
		updated := old
		for _, e := range edits[name] {
			if updated, err = e(updated); err != nil {
				return nil, fmt.Errorf("%s %w", path, err)
			}
		}
		if bytes.Equal(old, updated) {
			continue
		}
		stale = append(stale, name)
		if write {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(path, updated, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return stale, nil
}

// typeDirs are the directories, relative to root, of the packages providersFile imports.
func typeDirs(root string) ([]string, error) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(mod)
	if m == nil {
		return nil, fmt.Errorf("%s: no module line", filepath.Join(root, "go.mod"))
	}
	path := filepath.Join(root, providersFile)
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		dir, ok := strings.CutPrefix(p, string(m[1])+"/")
		if !ok {
			return nil, fmt.Errorf("%s imports %s, which is not in module %s: its sections cannot be found", path, p, m[1])
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// sections are the types' sections of doc (relative to root), from the packages in dirs, in
// the order of types; each type must have exactly one.
func sections(root, doc string, dirs, types []string) ([]byte, error) {
	name := filepath.Base(doc)
	byType := map[string][]byte{}
	for _, dir := range dirs {
		file := filepath.Join(dir, name)
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("%s has no %s: the section of %s for the type it registers (docs/providers.md)", dir, name, doc)
			}
			return nil, err
		}
		body := strings.TrimSpace(string(b))
		for strings.HasPrefix(body, "<!--") {
			end := strings.Index(body, "-->")
			if end < 0 {
				return nil, fmt.Errorf("%s: an HTML comment that does not end", file)
			}
			body = strings.TrimSpace(body[end+len("-->"):])
		}
		first, _, _ := strings.Cut(body, "\n")
		h := sectionHeading.FindStringSubmatch(first)
		switch {
		case h == nil:
			return nil, fmt.Errorf("%s: the first line must be a heading that names the type (like %q), got %q", file, "## "+filepath.Base(dir), first)
		case !slices.Contains(types, h[1]):
			return nil, fmt.Errorf("%s: its heading names %q, which is not a registered provider type (%s)", file, h[1], strings.Join(types, ", "))
		case byType[h[1]] != nil:
			return nil, fmt.Errorf("%s: a second section for type %s", file, h[1])
		}
		byType[h[1]] = []byte(rebase(body, dir, doc))
	}
	var out [][]byte
	for _, t := range types {
		b, ok := byType[t]
		if !ok {
			return nil, fmt.Errorf("type %s has no section for %s: none of the packages %s imports has a %s naming it", t, doc, providersFile, name)
		}
		out = append(out, b)
	}
	return append(bytes.Join(out, []byte("\n\n")), '\n'), nil
}

// rebase rewrites the relative links of text, written from directory dir, for the Markdown file
// doc (both relative to the module root); a link to doc itself keeps only its anchor.
func rebase(text, dir, doc string) string {
	return mdLink.ReplaceAllStringFunc(text, func(m string) string {
		target := m[2 : len(m)-1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "/") || strings.HasPrefix(target, "mailto:") {
			return m
		}
		file, anchor, hasAnchor := strings.Cut(target, "#")
		abs := filepath.Join(dir, filepath.FromSlash(file))
		if abs == filepath.Clean(doc) && hasAnchor {
			return "](#" + anchor + ")"
		}
		rel, err := filepath.Rel(filepath.Dir(doc), abs)
		if err != nil {
			return m
		}
		rel = filepath.ToSlash(rel)
		if hasAnchor {
			rel += "#" + anchor
		}
		return "](" + rel + ")"
	})
}
