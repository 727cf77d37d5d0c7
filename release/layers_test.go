package release

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The module's path, as go list names its packages.
const modulePath = "github.com/provider-health-exporter/provider-health-exporter"

// layering is the allowed layering, as docs/architecture.md writes it (its fenced blocks
// "layers", "support" and "no-k8s").
type layering struct {
	// layers lists the patterns of each layer, the highest first.
	layers [][]string
	// support are the patterns of the packages that may import any layer.
	support []string
	// noK8s are the packages that import no k8s.io package, directly or not.
	noK8s []string
}

// readLayering reads the fenced blocks of docs/architecture.md.
func readLayering(t *testing.T) layering {
	t.Helper()
	const doc = "docs/architecture.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][][]string{}
	var in string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case in == "" && strings.HasPrefix(line, "```") && slices.Contains([]string{"layers", "support", "no-k8s"}, line[3:]):
			in = line[3:]
			if _, dup := blocks[in]; dup {
				t.Fatalf("%s:%d: a second ```%s block: the layering is written once", doc, n, in)
			}
			blocks[in] = [][]string{}
		case in != "" && line == "```":
			in = ""
		case in != "" && line != "":
			blocks[in] = append(blocks[in], strings.Fields(line))
		}
	}
	for _, name := range []string{"layers", "support", "no-k8s"} {
		if len(blocks[name]) == 0 {
			t.Fatalf("%s has no ```%s block (the allowed layering, see its section Layers)", doc, name)
		}
	}
	return layering{layers: blocks["layers"], support: slices.Concat(blocks["support"]...), noK8s: slices.Concat(blocks["no-k8s"]...)}
}

// matches reports whether package pkg (relative to the module: "." for its root) matches
// pattern: the path itself, "dir/..." (dir and every package under it) or "dir/*" (the
// packages directly under dir).
func matches(pattern, pkg string) bool {
	switch {
	case strings.HasSuffix(pattern, "/..."):
		dir := strings.TrimSuffix(pattern, "/...")
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	case strings.HasSuffix(pattern, "/*"):
		dir := strings.TrimSuffix(pattern, "*")
		return strings.HasPrefix(pkg, dir) && !strings.Contains(pkg[len(dir):], "/")
	}
	return pattern == pkg
}

// place returns the layer of pkg (0 the highest), -1 for a support package, or an error when
// no line names it. An exact name wins over a pattern.
func (l layering) place(pkg string) (int, error) {
	if slices.ContainsFunc(l.support, func(p string) bool { return matches(p, pkg) }) {
		return -1, nil
	}
	for i, layer := range l.layers {
		if slices.Contains(layer, pkg) {
			return i, nil
		}
	}
	for i, layer := range l.layers {
		if slices.ContainsFunc(layer, func(p string) bool { return matches(p, pkg) }) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("package %s is in no layer: add it to docs/architecture.md's ```layers block (or to ```support)", pkg)
}

// goPackage is what go list says of one package.
type goPackage struct {
	path    string
	imports []string
	// code is false for a package of test files only.
	code bool
}

// listPackages lists the module's packages and, with deps, everything they import.
func listPackages(t *testing.T) map[string]goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-deps", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{len .GoFiles}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]goPackage{}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			t.Fatalf("go list printed %q", line)
		}
		p := goPackage{path: f[0], code: f[2] != "0"}
		if f[1] != "" {
			p.imports = strings.Split(f[1], ",")
		}
		pkgs[p.path] = p
	}
	return pkgs
}

// rel is the module package path as the layering names it ("." for the module's root), or ""
// for a package of another module.
func rel(path string) string {
	switch {
	case path == modulePath:
		return "."
	case strings.HasPrefix(path, modulePath+"/"):
		return strings.TrimPrefix(path, modulePath+"/")
	}
	return ""
}

// TestLayers: every package of the module imports only packages of the layers below its own
// (docs/architecture.md, section Layers); no layer imports a support package; the packages
// marked no-k8s import no k8s.io package, directly or not.
func TestLayers(t *testing.T) {
	l := readLayering(t)
	pkgs := listPackages(t)
	for _, p := range pkgs {
		from := rel(p.path)
		if from == "" || !p.code {
			continue
		}
		layer, err := l.place(from)
		if err != nil {
			t.Error(err)
			continue
		}
		if layer < 0 {
			continue
		}
		for _, imp := range p.imports {
			to := rel(imp)
			if to == "" {
				continue
			}
			switch under, err := l.place(to); {
			case err != nil:
				t.Error(err)
			case under < 0:
				t.Errorf("%s imports %s, a package of the tests' support: no layer may (docs/architecture.md, Layers)", from, to)
			case under <= layer:
				t.Errorf("%s (layer %d from the top) imports %s (layer %d): a package imports only the layers below its own (docs/architecture.md, Layers)",
					from, layer+1, to, under+1)
			}
		}
	}
	for _, name := range l.noK8s {
		path := modulePath + "/" + name
		if _, ok := pkgs[path]; !ok {
			t.Errorf("no-k8s names %s, which go list does not know", name)
			continue
		}
		if chain := importChain(pkgs, path, func(p string) bool { return strings.HasPrefix(p, "k8s.io/") }); chain != nil {
			t.Errorf("%s imports a Kubernetes package: %s (docs/architecture.md, Layers: no-k8s)", name, strings.Join(chain, " -> "))
		}
	}
}

// importChain returns a path of imports from package from to a package for which bad holds,
// or nil when there is none.
func importChain(pkgs map[string]goPackage, from string, bad func(string) bool) []string {
	seen := map[string]bool{}
	var walk func(p string) []string
	walk = func(p string) []string {
		if bad(p) {
			return []string{p}
		}
		if seen[p] {
			return nil
		}
		seen[p] = true
		for _, imp := range pkgs[p].imports {
			if c := walk(imp); c != nil {
				return append([]string{p}, c...)
			}
		}
		return nil
	}
	return walk(from)
}

// TestLayersMatch: the patterns of the layering mean what docs/architecture.md says.
func TestLayersMatch(t *testing.T) {
	l := layering{layers: [][]string{{"a"}, {"b/*"}, {"b", "b/c"}}, support: []string{"s/..."}}
	for pkg, want := range map[string]int{"a": 0, "b/x": 1, "b": 2, "b/c": 2, "s": -1, "s/t/u": -1} {
		if got, err := l.place(pkg); err != nil || got != want {
			t.Errorf("place(%s) = %d, %v; want %d", pkg, got, err, want)
		}
	}
	for _, pkg := range []string{"b/x/y", "c", "sx"} {
		if _, err := l.place(pkg); err == nil {
			t.Errorf("place(%s): no error, want one (it is in no layer)", pkg)
		}
	}
}
