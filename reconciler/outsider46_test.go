package reconciler_test

// Outside attacks on the tables of issue 46 (package tables fed through
// reconciler.Params.Tables), from the documentation only.

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/hive/script/scripttest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// o46Hive starts a hive with tables.Cell and one reconciler per name on one
// items table whose objects carry a status.Set; every Update of an object
// named in fail[name] fails. It returns the DB, the table and the tables.
func o46Hive(t *testing.T, fail map[string]map[string]bool, names ...string) (*statedb.DB, statedb.RWTable[*item], *tables.Tables) {
	t.Helper()
	var (
		db  *statedb.DB
		tbl statedb.RWTable[*item]
		tbs *tables.Tables
	)
	h := hive.New(statedb.Cell, job.Cell, tables.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, tt *tables.Tables) error {
				db, tbs = p.DB, tt
				var err error
				if tbl, err = statedb.NewTable(p.DB, "items", itemID); err != nil {
					return err
				}
				for _, name := range names {
					ops := newTarget().failIDs(slices.Collect(maps.Keys(fail[name]))...)
					_, err := reconciler.Register(p, tbl, (*item).clone,
						func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it },
						func(it *item) status.Status { return it.Statuses.Get(name) },
						ops, nil, reconciler.WithName(name), reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour))
					if err != nil {
						return err
					}
				}
				return nil
			})))
	startO46(t, h)
	return db, tbl, tbs
}

// startO46 starts h, to be stopped when the test ends.
func startO46(t *testing.T, h *hive.Hive) {
	t.Helper()
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, ctxFor(t, timeout)))
	t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
}

// RetryKey joins a reconciler's ID and an object's key with a space, so a
// name with a space could make two reconcilers' rows one ("test/x" with
// "y k", "test/x y" with "k"): Register refuses such a name.
func TestOutsider46NameWithSpaceIsRefused(t *testing.T) {
	for _, name := range []string{"x y", "x\ty", "x\ny", "x\x00"} {
		var regErr error
		h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
			cell.Module("test", "Test module",
				cell.ProvidePrivate(job.Registry.NewGroup),
				cell.Invoke(func(p reconciler.Params) error {
					tbl, err := statedb.NewTable(p.DB, "items", itemID)
					if err != nil {
						return err
					}
					_, regErr = reconciler.Register(p, tbl, (*item).clone, (*item).setStatus, (*item).getStatus, newTarget(), nil,
						reconciler.WithName(name), reconciler.WithMetrics(newKitMetrics()))
					return nil
				})))
		require.NoError(t, h.Populate(hivetest.Logger(t)))
		require.ErrorIs(t, regErr, reconciler.ErrInvalidConfig, "name %q", name)
		assert.Contains(t, regErr.Error(), "white space or a control character")
	}
}

// RetryInfo.Key is "the object's primary key, in hex if not printable":
// two failing objects of one reconciler, keyed "\x01" and "0x01", are two
// failing objects and must have two rows of their own.
func TestOutsider46HexKeysCollideWithPrintableKeys(t *testing.T) {
	bin := "\x01"
	fail := map[string]map[string]bool{"x": {bin: true, "0x01": true}}
	db, tbl, tbs := o46Hive(t, fail, "x")
	wtxn := db.WriteTxn(tbl)
	for _, id := range []string{bin, "0x01"} {
		_, _, err := tbl.Insert(wtxn, &item{ID: id, Value: "1", Statuses: status.NewSet()})
		require.NoError(t, err)
	}
	wtxn.Commit()
	waitUntil(t, "two failing objects", func() (bool, <-chan struct{}) {
		txn := db.ReadTxn()
		_, watch := tbs.Reconcilers().AllWatch(txn)
		a, _, ok := tbs.Reconcilers().Get(txn, tables.InfoByID.Query("test/x"))
		return ok && a.Retrying == 2, watch
	})
	var keys []string
	for r := range tbs.Retries().List(db.ReadTxn(), tables.RetryByReconciler.Query("test/x")) {
		keys = append(keys, r.Key)
	}
	assert.Len(t, keys, 2, "one row per failing object; got keys %q", keys)
}

// o46CountingWriter wraps the Writer that tables.Cell provides, as a user
// decorating it (for logs, say) would.
type o46CountingWriter struct {
	inner             tables.Writer
	writes, refreshes atomic.Int64
}

func (w *o46CountingWriter) Write(info *tables.Info, retries []tables.RetryInfo) {
	w.writes.Add(1)
	w.inner.Write(info, retries)
}

func (w *o46CountingWriter) Refreshed(id string, at time.Time) {
	w.refreshes.Add(1)
	w.inner.Refreshed(id, at)
}

// o46Module is a module (nested in "agent") with its own items table and an
// unnamed and a named reconciler on it; id "bad" fails.
func o46Module(name string) cell.Cell {
	return cell.Module(name, "Module "+name,
		cell.ProvidePrivate(job.Registry.NewGroup),
		cell.Invoke(func(p reconciler.Params) error {
			tbl, err := statedb.NewTable(p.DB, name+"-items", itemID)
			if err != nil {
				return err
			}
			for _, rn := range []string{"", "n"} {
				ops := newTarget()
				ops.failIDs("bad")
				get, set := (*item).getStatus, (*item).setStatus
				opts := []reconciler.Option{reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithMetrics(newKitMetrics())}
				if rn != "" {
					opts = append(opts, reconciler.WithName(rn))
					get = func(it *item) status.Status { return it.Statuses.Get(rn) }
					set = func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(rn, s); return it }
				}
				if _, err := reconciler.Register(p, tbl, (*item).clone, set, get, ops, nil, opts...); err != nil {
					return err
				}
			}
			wtxn := p.DB.WriteTxn(tbl)
			for _, id := range []string{"ok", "bad"} {
				if _, _, err := tbl.Insert(wtxn, &item{ID: id, Value: "1", Status: status.Pending(), Statuses: status.NewSet()}); err != nil {
					return err
				}
			}
			wtxn.Commit()
			return nil
		}))
}

// Several reconcilers in several modules share the tables of one
// tables.Cell, whose Writer a user decorates: each has its row, keyed
// metrics.Key(moduleID, name) (docs/testing.md), with its module and name,
// and its failing objects listed by RetryByReconciler; a stop marks every
// row stopped and a start of the same hive makes them current again.
func TestOutsider46SharedTablesDecoratedWriter(t *testing.T) {
	var (
		db    *statedb.DB
		infos statedb.Table[*tables.Info]
		rets  statedb.Table[*tables.RetryInfo]
		wrap  *o46CountingWriter
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
		cell.Module("agent", "Agent",
			cell.Decorate(func(w tables.Writer) tables.Writer {
				wrap = &o46CountingWriter{inner: w}
				return wrap
			},
				o46Module("ma"), o46Module("mb"),
			)),
		cell.Invoke(func(d *statedb.DB, i statedb.Table[*tables.Info], r statedb.Table[*tables.RetryInfo]) {
			db, infos, rets = d, i, r
		}))
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, ctxFor(t, timeout)))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			assert.NoError(t, h.Stop(log, context.Background()))
		}
	})

	ids := map[string][2]string{}
	for _, mod := range []string{"ma", "mb"} {
		mid := cell.FullModuleID{"agent", mod}
		for _, n := range []string{"", "n"} {
			ids[metrics.Key(mid, n)] = [2]string{mid.String(), n}
		}
	}
	allRows := func(state tables.State) func() (bool, <-chan struct{}) {
		return func() (bool, <-chan struct{}) {
			txn := db.ReadTxn()
			_, watch := infos.AllWatch(txn)
			for id := range ids {
				info, _, ok := infos.Get(txn, tables.InfoByID.Query(id))
				if !ok || info.State != state || (state == tables.StateDegraded && (info.Retrying != 1 || info.Objects != 2)) {
					return false, watch
				}
			}
			return true, watch
		}
	}
	waitUntil(t, "four degraded rows with one failing object each", allRows(tables.StateDegraded))
	txn := db.ReadTxn()
	assert.Equal(t, len(ids), infos.NumObjects(txn), "one row per reconciler")
	for id, mn := range ids {
		info, _, _ := infos.Get(txn, tables.InfoByID.Query(id))
		assert.Equal(t, mn[0], info.Module, id)
		assert.Equal(t, mn[1], info.Name, id)
		var keys []string
		for r := range rets.List(txn, tables.RetryByReconciler.Query(id)) {
			keys = append(keys, r.Key)
		}
		assert.Equal(t, []string{"bad"}, keys, "failing objects of %s", id)
		_, _, ok := rets.Get(txn, tables.RetryByKey.Query(tables.RetryKey(id, "bad")))
		assert.True(t, ok, "RetryByKey finds %s's row", id)
	}
	assert.Equal(t, len(ids), rets.NumObjects(txn))
	require.NotNil(t, wrap)
	assert.Positive(t, wrap.writes.Load(), "the decorated Writer is the one the reconcilers write through")

	stopCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	require.NoError(t, h.Stop(log, stopCtx))
	stopped = true
	txn = db.ReadTxn()
	for id := range ids {
		info, _, ok := infos.Get(txn, tables.InfoByID.Query(id))
		if assert.True(t, ok, id) {
			assert.Equal(t, tables.StateStopped, info.State, id)
		}
	}

	// The same hive again: the rows are current again, one failing
	// object each, and no row is left over or doubled.
	require.NoError(t, h.Start(log, ctxFor(t, timeout)))
	stopped = false
	waitUntil(t, "four degraded rows again after the start", allRows(tables.StateDegraded))
	txn = db.ReadTxn()
	assert.Equal(t, len(ids), infos.NumObjects(txn))
	assert.Equal(t, len(ids), rets.NumObjects(txn))
}

// Migration: "reconciler.Params.Tables is now a tables.Writer". Code that
// filled it with its own optional *Tables, as it did before (a nil
// *Tables: "Without it the reconciler keeps none"), still compiles; the
// nil *tables.Tables must still mean no tables, not a reconciler that
// fails on its first round. (The hive runs in a child process: a panic on
// a job's goroutine would end the whole test binary.)
func TestOutsider46NilTablesPointerMeansNoTables(t *testing.T) {
	if os.Getenv("OUTSIDER46_CHILD") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOutsider46NilTablesPointerMeansNoTables$", "-test.count=1")
		cmd.Env = append(os.Environ(), "OUTSIDER46_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			first := string(out)
			if i := strings.Index(first, "panic:"); i >= 0 {
				first = first[i:min(len(first), i+1500)]
			}
			t.Fatalf("the reconciler with a nil *tables.Tables as Params.Tables: %v\n%s", err, first)
		}
		return
	}
	type in struct {
		cell.In
		Tables *tables.Tables `optional:"true"`
	}
	ops := newTarget()
	var (
		db  *statedb.DB
		tbl statedb.RWTable[*item]
		rec reconciler.Reconciler[*item]
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, mine in) error {
				p.Tables = mine.Tables // absent: a nil *tables.Tables, as Params.Tables was before
				db = p.DB
				var err error
				if tbl, err = statedb.NewTable(p.DB, "items", itemID); err != nil {
					return err
				}
				rec, err = reconciler.Register(p, tbl, (*item).clone, (*item).setStatus, (*item).getStatus, ops, nil, reconciler.WithPruning(0))
				return err
			})))
	startO46(t, h)
	wtxn := db.WriteTxn(tbl)
	_, _, err := tbl.Insert(wtxn, &item{ID: "a", Value: "1", Status: status.Pending()})
	require.NoError(t, err)
	rev := tbl.Revision(wtxn)
	wtxn.Commit()
	_, _, err = rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
	require.NoError(t, err)
	obj, _, _ := tbl.Get(db.ReadTxn(), itemID.Query("a"))
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}

// "reconcilers": "one row per reconciler, keyed by module ID and name". A
// module that owns two tables and registers an unnamed reconciler for each
// has two reconcilers: either Register refuses the second (as it names
// nothing to tell them apart), or each has its own row and its own
// failing objects' rows. Two rows' worth of failures must not be told as
// one.
func TestOutsider46TwoUnnamedReconcilersInOneModule(t *testing.T) {
	var (
		t1, t2 statedb.RWTable[*item]
		regErr error
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
		cell.Module("test", "Test module",
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params) error {
				var err error
				if t1, err = statedb.NewTable(p.DB, "items1", itemID); err != nil {
					return err
				}
				if t2, err = statedb.NewTable(p.DB, "items2", itemID); err != nil {
					return err
				}
				opts := []reconciler.Option{reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithMetrics(newKitMetrics())}
				if _, err := reconciler.Register(p, t1, (*item).clone, (*item).setStatus, (*item).getStatus, newTarget().failIDs("k1"), nil, opts...); err != nil {
					return err
				}
				opts = []reconciler.Option{reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithMetrics(newKitMetrics())}
				_, regErr = reconciler.Register(p, t2, (*item).clone, (*item).setStatus, (*item).getStatus, newTarget().failIDs("k2"), nil, opts...)
				return nil
			})))
	startO46(t, h)
	// The second would share the first's row: Register refuses it.
	require.ErrorIs(t, regErr, reconciler.ErrInvalidConfig)
	assert.Contains(t, regErr.Error(), "its own WithName")
}

// TestOutsider46Scripts runs ../testdata/outsider46/*.txtar with the engine
// of TestScripts (the first line configures it, as there).
func TestOutsider46Scripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	scripttest.Test(t, ctx, newScriptEngine, nil, "../testdata/outsider46/*.txtar")
}
