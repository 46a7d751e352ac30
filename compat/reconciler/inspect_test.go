package reconciler_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/compat/reconciler"
	"github.com/converge-go/converge/tables"
)

// What docs/migration.md says converge-inspect needs after a switch:
// converge's tables.Cell in the hive, and StateDB's HTTP handler
// served. A reconciler registered through the compat package then has its
// row in the reconcilers table, which the handler serves.
func TestCompatReconcilerServesTheInspectTables(t *testing.T) {
	var (
		db    *statedb.DB
		table statedb.RWTable[*item]
		rec   reconciler.Reconciler[*item]
	)
	tgt := newRecorder()
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		tables.Cell, // the first line
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(d *statedb.DB, p reconciler.Params) (err error) {
				db = d
				if table, err = statedb.NewTable(d, "items", itemID); err != nil {
					return err
				}
				rec, err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, tgt, nil)
				return err
			}),
		),
	)
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })

	wtxn := db.WriteTxn(table)
	_, _, err := table.Insert(wtxn, &item{ID: "a", Status: reconciler.StatusPending()})
	require.NoError(t, err)
	rev := table.Revision(wtxn)
	wtxn.Commit()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err = rec.WaitUntilReconciled(ctx, rev)
	require.NoError(t, err)

	// The row is written at the end of a round: wait for it.
	infos, ok := db.GetTable(db.ReadTxn(), tables.ReconcilersTableName).(statedb.Table[*tables.Info])
	require.True(t, ok, "tables.Cell provides the %s table", tables.ReconcilersTableName)
	for {
		row, _, watch, found := infos.GetWatch(db.ReadTxn(), tables.InfoByID.Query("test"))
		if found && row.Objects == 1 {
			break
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatal("the compat reconciler wrote no row in the reconcilers table")
		}
	}

	// The second: serve the handler (converge-inspect --url .../statedb).
	mux := http.NewServeMux()
	mux.Handle("/statedb/", http.StripPrefix("/statedb", db.HTTPHandler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/statedb/dump/" + tables.ReconcilersTableName)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"module":"test"`)
}
