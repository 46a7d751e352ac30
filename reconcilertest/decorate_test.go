package reconcilertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// routesModule stands for an agent's production module: it provides its
// operations and its reconciler, registered with what the hive gives it.
var routesModule = cell.Module("routes", "Routes",
	cell.Provide(job.Registry.NewGroup),
	cell.Provide(newRouteTable),
	cell.Provide(func() reconciler.Operations[*Route] { return reconcilertest.NewTarget(routeKey, routeVia) }),
	cell.Provide(func(p reconciler.Params, routes statedb.RWTable[*Route], ops reconciler.Operations[*Route]) (reconciler.Reconciler[*Route], error) {
		return reconciler.Register(p, routes, (*Route).Clone, (*Route).SetStatus, (*Route).GetStatus, ops, nil)
	}),
	cell.Invoke(func(reconciler.Reconciler[*Route]) {}), // registered even if nothing asks for it
)

// A test wraps a production module's operations in FaultyOps with
// cell.Decorate, leaving the module as it ships: the fault reaches the
// module's own reconciler, whose status says so. The test takes the
// Reconciler the module provides; its module ID is the one the module
// gives cell.Module.
func TestFaultsInAProductionModule(t *testing.T) {
	var faults *reconcilertest.FaultyOps[*Route]
	var db *statedb.DB
	var routes statedb.RWTable[*Route]
	var rec reconciler.Reconciler[*Route]
	moduleID := cell.FullModuleID{"routes"} // nested modules: {"agent", "routes"}
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
		cell.Decorate(
			func(ops reconciler.Operations[*Route]) reconciler.Operations[*Route] {
				faults = reconcilertest.NewFaultyOps(routeKey, ops, nil)
				return faults
			},
			routesModule,
			cell.Invoke(func(d *statedb.DB, r statedb.RWTable[*Route], rc reconciler.Reconciler[*Route]) {
				db, routes, rec = d, r, rc
			}),
		))
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })

	require.NoError(t, faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeTerminal, Key: "10.0.0.0/8"}))
	wtxn := db.WriteTxn(routes)
	_, _, err := routes.Insert(wtxn, &Route{Prefix: "10.0.0.0/8", Via: "eth0", Status: status.Pending()})
	require.NoError(t, err)
	wtxn.Commit()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, _ := routes.PrimaryIndexer().QueryFromObject(&Route{Prefix: "10.0.0.0/8"})
	_, err = reconciler.WaitForObject(ctx, db, routes, q, (*Route).GetStatus)
	require.ErrorIs(t, err, reconciler.ErrObjectFailed, "the injected terminal fault failed the object")
	var updates []reconcilertest.Call
	for _, c := range faults.Calls() {
		if c.Op == reconcilertest.OpUpdate {
			updates = append(updates, c)
		}
	}
	require.Len(t, updates, 1, "a terminal error is not retried")
	require.ErrorIs(t, updates[0].Err, reconcilertest.ErrInjected)

	// The Reconciler waits; the module ID names its row of the tables.
	_, _, err = rec.WaitUntilReconciled(ctx, routes.Revision(db.ReadTxn()))
	require.NoError(t, err)
	infos := db.GetTable(db.ReadTxn(), tables.ReconcilersTableName).(statedb.Table[*tables.Info])
	for {
		row, _, watch, found := infos.GetWatch(db.ReadTxn(), tables.InfoByID.Query(metrics.Key(moduleID, "")))
		if found && row.Failed > 0 {
			break
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatalf("no row %q with the failure in the reconcilers table", metrics.Key(moduleID, ""))
		}
	}
}
