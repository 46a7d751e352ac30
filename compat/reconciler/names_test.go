package reconciler_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every exported name of the StateDB reconciler's package is exported here
// too, and nothing else: a program that compiles against one compiles
// against the other as far as names go (testdata/agent, built by
// TestUpstreamExample, checks their use).
func TestEveryUpstreamNameIsHere(t *testing.T) {
	tc := needToolchain(t)
	upstream := exportedNames(t, filepath.Join(tc.upstream, "reconciler"))
	here := exportedNames(t, ".")
	assert.NotEmpty(t, upstream)
	assert.Equal(t, upstream, here)
}

// exportedNames returns the exported top-level names declared by the
// package in dir, tests left out, sorted.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range goFiles(t, dir, "*.go") {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.IsExported() {
			names = append(names, id.Name)
		}
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						add(s.Name)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n)
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}
