package tables_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/tables"
)

// "A row is immutable once in the table: readers may share it between
// goroutines but must not modify it." A reader holding a row while the
// refresh job calls Refreshed, and while the next round is written, sees
// the row it read, unchanged (and, under -race, unraced).
func TestOutsider46RowsStayImmutable(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	tb.Write(&tables.Info{ID: "m/x", Module: "m", Name: "x", State: tables.StateRunning, Objects: 1}, nil)
	row, _, found := tb.Reconcilers().Get(db.ReadTxn(), tables.InfoByID.Query("m/x"))
	require.True(t, found)
	snap := *row

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 200 {
			tb.Refreshed("m/x", time.Unix(1700000000+int64(i), 0))
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 200 {
			tb.Write(&tables.Info{ID: "m/x", Module: "m", Name: "x", State: tables.StateRunning, Objects: 2 + i}, nil)
		}
	}()
	for range 200 {
		_ = row.LastRefresh.IsZero() // a reader reading its row as others write
		_ = row.Objects
	}
	wg.Wait()
	assert.Equal(t, snap, *row, "the row a reader holds changed")
	last, _, _ := tb.Reconcilers().Get(db.ReadTxn(), tables.InfoByID.Query("m/x"))
	assert.Equal(t, 201, last.Objects)
	assert.Equal(t, time.Unix(1700000199, 0), last.LastRefresh, "the last refresh is kept by later Writes")
}

// Write "does not keep retries": a caller reusing its buffer after Write
// returns does not change the stored rows.
func TestOutsider46WriteDoesNotKeepRetries(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	buf := []tables.RetryInfo{{Reconciler: "m", Key: "k", Attempts: 1, LastError: "first"}}
	tb.Write(&tables.Info{ID: "m", Module: "m", State: tables.StateDegraded, Retrying: 1}, buf)
	buf[0].Attempts, buf[0].LastError, buf[0].Key = 7, "scribbled", "other"
	r, _, found := tb.Retries().Get(db.ReadTxn(), tables.RetryByKey.Query(tables.RetryKey("m", "k")))
	require.True(t, found)
	assert.Equal(t, 1, r.Attempts)
	assert.Equal(t, "first", r.LastError)
	assert.Equal(t, "k", r.Key)
	// A removal of a row that does not exist is harmless.
	tb.Write(nil, []tables.RetryInfo{{Reconciler: "m", Key: "never"}})
	assert.Equal(t, 1, tb.Retries().NumObjects(db.ReadTxn()))
}

// The StateDB HTTP handler serves both tables, and statedb's RemoteTable
// reads them back as they were written (what converge-inspect relies on).
func TestOutsider46HTTPHandlerRoundTrip(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	info := tables.Info{
		ID: "agent.routes/r", Module: "agent.routes", Name: "r", State: tables.StateDegraded,
		Objects: 3, Succeeded: 10, Failed: 2, FailuresSinceSuccess: 1, LastError: "disk full", LastErrorAt: at,
		Retrying: 1, InFlight: 1, Workers: 4, BusyWorkers: 1, OldestPending: at, LastPrune: at,
		LastPruneDuration: 375 * time.Microsecond, LastPruneError: "p", DriftRepaired: 3,
		TargetFailingSince: at, TargetError: "down", BreakerOpenings: 2,
	}
	in := info
	retry := tables.RetryInfo{Reconciler: info.ID, Key: "10.0.0.0/8", Delete: true, Attempts: 2, FirstFailed: at, NextAttempt: at.Add(time.Second), LastError: "x"}
	tb.Write(&in, []tables.RetryInfo{retry})
	tb.Refreshed(info.ID, at)
	info.LastRefresh = at

	srv := httptest.NewServer(db.HTTPHandler())
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	infos := statedb.NewRemoteTable[*tables.Info](base, tables.ReconcilersTableName)
	seq, errs := infos.Get(ctx, tables.InfoByID.Query(info.ID))
	var got []tables.Info
	for obj := range seq {
		got = append(got, *obj)
	}
	require.NoError(t, <-errs)
	require.Len(t, got, 1)
	assert.Equal(t, info, got[0])

	retries := statedb.NewRemoteTable[*tables.RetryInfo](base, tables.RetriesTableName)
	rseq, rerrs := retries.Get(ctx, tables.RetryByReconciler.Query(info.ID))
	var rgot []tables.RetryInfo
	for obj := range rseq {
		rgot = append(rgot, *obj)
	}
	require.NoError(t, <-rerrs)
	assert.Equal(t, []tables.RetryInfo{retry}, rgot)
}

// Rows round-trip through JSON (Info has UnmarshalJSON for what MarshalJSON
// writes) and through YAML, which Info encodes with MarshalYAML.
func TestOutsider46EncodingsRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	info := tables.Info{ID: "m/x", Module: "m", Name: "x", State: tables.StateDegraded, LastErrorAt: at, LastPruneDuration: 2 * time.Second, Objects: 1}
	data, err := json.Marshal(&info) // as a pointer, as the handler has it
	require.NoError(t, err)
	var back tables.Info
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, info, back)

	y, err := yaml.Marshal(&info)
	require.NoError(t, err)
	var yback tables.Info
	if assert.NoError(t, yaml.Unmarshal(y, &yback), "YAML of %q", y) {
		assert.Equal(t, info, yback)
	}

	retry := tables.RetryInfo{Reconciler: "m/x", Key: "k", Attempts: 1, FirstFailed: at, LastError: "e"}
	ry, err := yaml.Marshal(&retry)
	require.NoError(t, err)
	var rback tables.RetryInfo
	require.NoError(t, yaml.Unmarshal(ry, &rback))
	assert.Equal(t, retry, rback)
}

// Readers of StateDB tables commonly wait for a table to be initialized
// before trusting it; the tables New registers are initialized (nothing
// fills them at start but the reconcilers' rounds).
func TestOutsider46TablesInitialized(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	txn := db.ReadTxn()
	for _, tbl := range []statedb.TableMeta{tb.Reconcilers(), tb.Retries()} {
		init, watch := tbl.(interface {
			Initialized(statedb.ReadTxn) (bool, <-chan struct{})
		}).Initialized(txn)
		if !init {
			select {
			case <-watch:
			case <-time.After(5 * time.Second):
				t.Errorf("table %s never initialized", tbl.Name())
			}
		}
	}
	assert.Equal(t, tables.ReconcilersTableName, tb.Reconcilers().Name())
	assert.Equal(t, tables.RetriesTableName, tb.Retries().Name())
}

// The StateDB handler's /changes streams both tables (converge-inspect
// --watch): a retry row written then removed arrives as an insert, then a
// delete, and the reconciler's row changes arrive with their figures.
func TestOutsider46HTTPChangesStream(t *testing.T) {
	db := statedb.New()
	tb, err := tables.New(db)
	require.NoError(t, err)
	srv := httptest.NewServer(db.HTTPHandler())
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	seq, errs := statedb.NewRemoteTable[*tables.RetryInfo](base, tables.RetriesTableName).Changes(ctx)
	iseq, ierrs := statedb.NewRemoteTable[*tables.Info](base, tables.ReconcilersTableName).Changes(ctx)
	type ev struct {
		deleted bool
		key     string
		n       int
	}
	got, igot := make(chan ev, 16), make(chan ev, 16)
	go func() {
		for c := range seq {
			got <- ev{c.Deleted, c.Object.Key, c.Object.Attempts}
		}
	}()
	go func() {
		for c := range iseq {
			igot <- ev{c.Deleted, c.Object.ID, c.Object.Retrying}
		}
	}()
	next := func(ch chan ev, what string) ev {
		select {
		case e := <-ch:
			return e
		case <-ctx.Done():
			t.Fatalf("no %s change: %v %v", what, len(errs), len(ierrs))
			return ev{}
		}
	}
	// (StateDB coalesces changes a reader has not yet seen: each step waits
	// for the last to arrive.)
	tb.Write(&tables.Info{ID: "m", Module: "m", State: tables.StateDegraded, Retrying: 1},
		[]tables.RetryInfo{{Reconciler: "m", Key: "k", Attempts: 3, LastError: "e"}})
	assert.Equal(t, ev{false, "k", 3}, next(got, "retry insert"))
	assert.Equal(t, ev{false, "m", 1}, next(igot, "first row"))
	tb.Write(&tables.Info{ID: "m", Module: "m", State: tables.StateRunning}, []tables.RetryInfo{{Reconciler: "m", Key: "k"}})
	e := next(got, "retry delete")
	assert.True(t, e.deleted)
	assert.Equal(t, "k", e.key)
	assert.Equal(t, ev{false, "m", 0}, next(igot, "second row"))
	cancel()
}

// Every name CHANGELOG.md's migration lists exists in package tables, with
// the values the old ones had.
func TestOutsider46MigrationNames(t *testing.T) {
	var (
		_ = tables.Cell
		_ *tables.Tables
		_ tables.Info
		_ tables.RetryInfo
		_ tables.Writer = (*tables.Tables)(nil)
		_               = tables.InfoByID
		_               = tables.RetryByKey
		_               = tables.RetryByReconciler
	)
	assert.Equal(t, []tables.State{"running", "degraded", "paused", "stopped", "waiting"},
		[]tables.State{tables.StateRunning, tables.StateDegraded, tables.StatePaused, tables.StateStopped, tables.StateWaiting})
	assert.Equal(t, "reconcilers", tables.ReconcilersTableName)
	assert.Equal(t, "reconciler-retries", tables.RetriesTableName)
	assert.Equal(t, "m/x k", tables.RetryKey("m/x", "k"))
	assert.Equal(t, "id", tables.InfoByID.Name)
	assert.Equal(t, "key", tables.RetryByKey.Name)
	assert.Equal(t, "reconciler", tables.RetryByReconciler.Name)
}
