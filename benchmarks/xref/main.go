// Command xref lists the pairs of files of one Go package that refer to
// each other: each uses a name the other declares (a top-level name, a
// method or a struct field), resolved with go/types. It is the measure of
// issue 46's "no two files refer to each other both ways". It lives in
// the benchmarks module, so that golang.org/x/tools stays out of
// converge's graph.
//
//	go run ./benchmarks/xref ./reconciler
//	XREF_V=1 go run ./benchmarks/xref ./reconciler   # and the names each way
//
// It reads only the package's files and writes nothing; it exits with
// status 1 if it found a pair, so that .ci/run fails on one.
package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Dir: os.Args[1]}
	pkgs, err := packages.Load(cfg, "./")
	if len(pkgs) == 0 {
		fmt.Println("no packages", err)
		os.Exit(1)
	}
	for _, e := range pkgs[0].Errors {
		fmt.Println("E", e)
	}
	if err != nil {
		panic(err)
	}
	p := pkgs[0]
	declFile := map[types.Object]string{}
	for i, f := range p.Syntax {
		name := filepath.Base(p.CompiledGoFiles[i])
		for id, obj := range p.TypesInfo.Defs {
			if obj == nil || id.Pos() < f.Pos() || id.Pos() > f.End() {
				continue
			}
			if obj.Parent() == p.Types.Scope() {
				declFile[obj] = name
			} else if fn, ok := obj.(*types.Func); ok && fn.Type().(*types.Signature).Recv() != nil {
				declFile[obj] = name
			} else if v, ok := obj.(*types.Var); ok && v.IsField() {
				declFile[obj] = name
			}
		}
	}
	refs := map[string]map[string]bool{}
	detail := map[string][]string{}
	for i, f := range p.Syntax {
		name := filepath.Base(p.CompiledGoFiles[i])
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := p.TypesInfo.Uses[id]
			if obj == nil {
				return true
			}
			if o, ok := obj.(*types.Func); ok {
				obj = o.Origin()
			}
			if o, ok := obj.(*types.Var); ok {
				obj = o.Origin()
			}
			if d, ok := declFile[obj]; ok && d != name {
				if refs[name] == nil {
					refs[name] = map[string]bool{}
				}
				refs[name][d] = true
				if os.Getenv("XREF_V") != "" {
					detail[name+" -> "+d] = append(detail[name+" -> "+d], id.Name)
				}
			}
			return true
		})
	}
	var pairs []string
	for a, m := range refs {
		for b := range m {
			if a < b && refs[b][a] {
				pairs = append(pairs, a+" <-> "+b)
				if os.Getenv("XREF_V") != "" {
					pairs = append(pairs, "   "+a+" -> "+b+": "+uniq(detail[a+" -> "+b]), "   "+b+" -> "+a+": "+uniq(detail[b+" -> "+a]))
				}
			}
		}
	}
	sort.Strings(pairs)
	fmt.Println(strings.Join(pairs, "\n"))
	n := 0
	for _, p := range pairs {
		if !strings.HasPrefix(p, " ") {
			n++
		}
	}
	fmt.Println(n, "pairs")
	if n > 0 {
		os.Exit(1) // for CI: the package's files must not refer to each other both ways
	}
}

func uniq(s []string) string {
	m := map[string]bool{}
	var out []string
	for _, x := range s {
		if !m[x] {
			m[x] = true
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
