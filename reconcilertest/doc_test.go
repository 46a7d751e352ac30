package reconcilertest_test

import (
	"context"
	"maps"
	"testing"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script"
	"github.com/cilium/hive/script/scripttest"
	"github.com/cilium/statedb"
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
			cell.Module("routes", "Routes", cell.Provide(job.Registry.NewGroup),
				cell.Invoke(func(p reconciler.Params, health *cell.SimpleHealth) error {
					routes, err := newRouteTable(p.DB)
					if err != nil {
						return err
					}
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
