package reconcilertest_test

import (
	"context"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script"
	"github.com/cilium/hive/script/scripttest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// TestRouteScripts is the script test of the package documentation,
// verbatim but for the testdata directory, so that it stays correct.
func TestRouteScripts(t *testing.T) {
	scripttest.Test(t, context.Background(), func(t testing.TB, args []string) *script.Engine {
		reg := reconcilertest.NewRegistry()
		target := reconcilertest.NewTarget(routeKey, routeVia)
		ops := reconcilertest.NewFaultyOps(routeKey, target, nil)
		h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
			cell.Module("routes", "Routes", cell.Provide(job.Registry.NewGroup), cell.ProvidePrivate(newRouteTable),
				cell.Invoke(func(p reconciler.Params, routes statedb.RWTable[*Route], health *cell.SimpleHealth) error {
					r, err := reconciler.Register(p, routes, (*Route).Clone, (*Route).SetStatus, (*Route).GetStatus, ops, nil)
					if err != nil {
						return err
					}
					return reconcilertest.Add(reg, reconcilertest.Subject[*Route]{
						DB: p.DB, Table: routes, Reconciler: r, GetStatus: (*Route).GetStatus,
						Target: target, Faults: ops, Health: health,
					})
				})))
		log := hivetest.Logger(t)
		cmds, err := h.ScriptCommands(log)
		require.NoError(t, err)
		maps.Insert(cmds, maps.All(script.DefaultCmds()))
		maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(reg)))
		t.Cleanup(func() { h.Stop(log, context.Background()) })
		return &script.Engine{Cmds: cmds}
	}, nil, "testdata/routes/*.txtar")
}

// TestDocumentedExample checks that the script test shown in the package
// documentation and in docs/testing.md is
// TestRouteScripts and testdata/routes/retry.txtar, but for the testdata
// directory, and that both list exactly the commands ScriptCommands has.
func TestDocumentedExample(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	src := read("doc_test.go")
	start := strings.Index(src, "func TestRouteScripts(")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(src[start:], "\n}\n")
	require.Greater(t, end, 0)
	testFunc := strings.Replace(src[start:start+end+3], `"testdata/routes/*.txtar"`, `"testdata/*.txtar"`, 1)
	script := read("testdata/routes/retry.txtar")
	commands := slices.Sorted(maps.Keys(reconcilertest.ScriptCommands(reconcilertest.NewRegistry())))
	listed := func(text string) []string {
		names := regexp.MustCompile(`(?m)^\s*((?:reconciler|sets)/[a-z/-]+)\s`).FindAllStringSubmatch(text, -1)
		var out []string
		for _, n := range names {
			out = append(out, n[1])
		}
		return slices.Compact(slices.Sorted(slices.Values(out)))
	}

	t.Run("package documentation", func(t *testing.T) {
		var blocks []string // the indented blocks of doc.go's comment
		var cur strings.Builder
		for _, line := range strings.Split(read("doc.go"), "\n") {
			if code, ok := strings.CutPrefix(line, "//\t"); ok {
				cur.WriteString(code + "\n")
				continue
			}
			if cur.Len() > 0 {
				blocks = append(blocks, cur.String())
				cur.Reset()
			}
		}
		require.GreaterOrEqual(t, len(blocks), 3)
		assert.Equal(t, testFunc, blocks[0])
		assert.Equal(t, script, blocks[1])
		assert.Equal(t, commands, listed(blocks[2]))
	})

	t.Run("docs/testing.md", func(t *testing.T) {
		section := read("../docs/testing.md")
		fences := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(section, -1)
		require.GreaterOrEqual(t, len(fences), 3, "the test, the script and the commands come first")
		assert.Equal(t, testFunc, fences[0][1])
		assert.Equal(t, script, fences[1][1])
		assert.Equal(t, commands, listed(fences[2][1]))
		assert.Less(t, strings.Count(fences[0][1]+fences[1][1], "\n"), 40, "the example is under 40 lines")
	})
}
