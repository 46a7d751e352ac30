package tables_test

import (
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/tables"
)

// A reconciler writes its row and the rows of its failing objects after a
// round, through the Writer that reconciler.Params takes; readers query the
// tables as any other. In a hive, tables.Cell does what New does here, and
// reconciler.Register does the writing.
func Example() {
	db := statedb.New()
	t, err := tables.New(db)
	if err != nil {
		panic(err)
	}
	var w tables.Writer = t
	show := func() {
		txn := db.ReadTxn()
		info, _, _ := t.Reconcilers().Get(txn, tables.InfoByID.Query("agent.routes"))
		fmt.Printf("%s: %s, %d failing\n", info.ID, info.State, info.Retrying)
		for r := range t.Retries().List(txn, tables.RetryByReconciler.Query("agent.routes")) {
			fmt.Printf("  %s: %d attempt(s): %s\n", r.Key, r.Attempts, r.LastError)
		}
	}

	// A round in which one of two objects failed.
	w.Write(&tables.Info{ID: "agent.routes", Module: "agent.routes", State: tables.StateDegraded, Objects: 2, Succeeded: 1, Failed: 1, Retrying: 1},
		[]tables.RetryInfo{{Reconciler: "agent.routes", Key: "10.0.0.0/8", Attempts: 1, FirstFailed: time.Now(), LastError: "no such device"}})
	show()

	// Its retry succeeded: a row with zero Attempts removes the object's.
	w.Write(&tables.Info{ID: "agent.routes", Module: "agent.routes", State: tables.StateRunning, Objects: 2, Succeeded: 2, Failed: 1},
		[]tables.RetryInfo{{Reconciler: "agent.routes", Key: "10.0.0.0/8"}})
	show()

	// Output:
	// agent.routes: degraded, 1 failing
	//   10.0.0.0/8: 1 attempt(s): no such device
	// agent.routes: running, 0 failing
}
