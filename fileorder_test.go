package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readingOrder names the packages whose files read from the top down: a function or method is
// called only from above it in its own file, and a function, method, variable or constant is
// used only in its own file or in files higher in the package's file order (docs/architecture.md,
// "Reading a package"). Types are shared vocabulary and exempt, as are interface methods; a
// file's constants and variables come first in it, as everywhere in Go.
var readingOrder = map[string][]string{
	"crdwriter": {
		"writer.go", "campaign.go", "session.go", "sync.go", "write.go", "rejections.go", "compare.go",
		"ownership.go", "status.go", "report.go", "events.go", "metrics.go", "lease.go", "leaselock.go",
		"client.go", "errors.go",
	},
}

// TestReadingOrder: in the packages of readingOrder, references flow downward, in a file and
// across files, and the order names each production file once.
func TestReadingOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks packages with go list's export data")
	}
	for pkg, order := range readingOrder {
		t.Run(pkg, func(t *testing.T) {
			refs, files, err := packageRefs("./" + pkg)
			if err != nil {
				t.Fatal(err)
			}
			rank := map[string]int{}
			for i, f := range order {
				rank[f] = i
			}
			for _, f := range files {
				if _, ok := rank[f]; !ok {
					t.Errorf("%s/%s is not in readingOrder[%q]: place it in the file order", pkg, f, pkg)
				}
			}
			for f := range rank {
				if !slices.Contains(files, f) {
					t.Errorf("readingOrder[%q] names %s, which the package does not have", pkg, f)
				}
			}
			for _, r := range refs {
				switch {
				case r.fromFile == r.toFile && (!r.call || r.fromPos < r.toPos):
				case r.fromFile == r.toFile:
					t.Errorf("%s: uses %s, declared above it at %s: the user goes above what it uses", r.at, r.name, r.decl)
				case rank[r.fromFile] > rank[r.toFile]:
					t.Errorf("%s: uses %s of %s, a file above its own in the package's order %v", r.at, r.name, r.toFile, order)
				}
			}
		})
	}
}

// ref is one use of a package-level function, method, variable or constant in another
// top-level declaration than its own.
type ref struct {
	name             string
	at, decl         token.Position
	fromFile, toFile string
	fromPos, toPos   int  // the offsets of the using and the used top-level declarations
	call             bool // the used object is a function or a method
}

// packageRefs type-checks the production files of a package of the module against the export
// data go list gives of its imports, and returns its references between top-level
// declarations and the base names of its files.
func packageRefs(pattern string) ([]ref, []string, error) {
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export,Dir,GoFiles,Standard", pattern).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, nil, fmt.Errorf("go list: %w", err)
	}
	type listed struct {
		ImportPath, Export, Dir string
		GoFiles                 []string
	}
	exports := map[string]string{}
	var target listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, err
		}
		exports[p.ImportPath] = p.Export
		target = p // -deps lists the named package last
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range target.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(target.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: imp}).Check(target.ImportPath, fset, files, info)
	if err != nil {
		return nil, nil, err
	}
	// The top-level declaration each object belongs to, by its position.
	declOf := map[token.Pos]token.Pos{}
	for _, f := range files {
		for _, d := range f.Decls {
			ast.Inspect(d, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					declOf[id.Pos()] = d.Pos()
				}
				return true
			})
		}
	}
	var refs []ref
	for _, f := range files {
		for _, d := range f.Decls {
			var recv ast.Node
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				recv = fd.Recv
			}
			ast.Inspect(d, func(n ast.Node) bool {
				if n == recv && recv != nil {
					return false
				}
				id, ok := n.(*ast.Ident)
				if !ok {
					return true
				}
				obj := info.Uses[id]
				if obj == nil || obj.Pkg() != pkg || !used(obj, pkg) {
					return true
				}
				to, ok := declOf[obj.Pos()]
				if !ok || to == d.Pos() {
					return true // declared in a function, or a use in its own declaration
				}
				at, decl := fset.Position(id.Pos()), fset.Position(obj.Pos())
				refs = append(refs, ref{
					name: obj.Name(), at: at, decl: decl,
					fromFile: filepath.Base(at.Filename), toFile: filepath.Base(decl.Filename),
					fromPos: fset.Position(d.Pos()).Offset, toPos: fset.Position(to).Offset,
				})
				_, refs[len(refs)-1].call = obj.(*types.Func)
				return true
			})
		}
	}
	var names []string
	for _, f := range target.GoFiles {
		names = append(names, filepath.Base(f))
	}
	return refs, names, nil
}

// used reports whether a use of obj counts for the reading order: package-level functions,
// variables and constants, and methods of the package's concrete types.
func used(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Func:
		sig := o.Signature()
		if sig.Recv() == nil {
			return o.Parent() == pkg.Scope()
		}
		_, iface := sig.Recv().Type().Underlying().(*types.Interface)
		return !iface
	case *types.Var:
		return !o.IsField() && o.Parent() == pkg.Scope()
	case *types.Const:
		return o.Parent() == pkg.Scope()
	}
	return false
}
