package reconciler_test

// The rows the reconciler keeps in the tables (package tables, fed through
// reconciler.Params.Tables): what a Writer is given and when, the rows of
// several reconcilers, and how rows agree; scripts: testdata/rows_*.txtar.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// startRowsHive starts h, to be stopped when the test ends.
func startRowsHive(t *testing.T, h *hive.Hive) {
	t.Helper()
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, ctxFor(t, timeout)))
	t.Cleanup(func() { assert.NoError(t, h.Stop(log, context.Background())) })
}

// RetryInfo.Key is "the object's primary key, in hex if not printable":
// two failing objects of one reconciler, keyed "\x01" and "0x01", are two
// failing objects and must have two rows of their own.
func TestRetryRowsOfHexAndPrintableKeysAreDistinct(t *testing.T) {
	bin := "\x01"
	tg := newTarget().failIDs(bin, "0x01")
	f := startFixture(t, tg, &with{tables: true}, reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(kititems("1", bin, "0x01")...)
	f.waitInfo("two failing objects", func(i *tables.Info) bool { return i.Retrying == 2 })
	var keys []string
	for r := range f.tables.Retries().List(f.db.ReadTxn(), tables.RetryByReconciler.Query("test")) {
		keys = append(keys, r.Key)
	}
	assert.Len(t, keys, 2, "one row per failing object; got keys %q", keys)
}

// countingWriter wraps the Writer that tables.Cell provides, as a user
// decorating it (for logs, say) would.
type countingWriter struct {
	inner             tables.Writer
	writes, refreshes atomic.Int64
}

func (w *countingWriter) Write(info *tables.Info, retries []tables.RetryInfo) {
	w.writes.Add(1)
	w.inner.Write(info, retries)
}

func (w *countingWriter) Refreshed(id string, at time.Time) {
	w.refreshes.Add(1)
	w.inner.Refreshed(id, at)
}

// rowsModule is a module (nested in "agent") with its own items table and an
// unnamed and a named reconciler on it; id "bad" fails.
func rowsModule(name string) cell.Cell {
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
func TestRowsOfReconcilersSharingADecoratedWriter(t *testing.T) {
	var (
		db    *statedb.DB
		infos statedb.Table[*tables.Info]
		rets  statedb.Table[*tables.RetryInfo]
		wrap  *countingWriter
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
		cell.Module("agent", "Agent",
			cell.Decorate(func(w tables.Writer) tables.Writer {
				wrap = &countingWriter{inner: w}
				return wrap
			},
				rowsModule("ma"), rowsModule("mb"),
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
func TestNilTablesPointerKeepsNoTables(t *testing.T) {
	if os.Getenv("NIL_TABLES_CHILD") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNilTablesPointerKeepsNoTables$", "-test.count=1")
		cmd.Env = append(os.Environ(), "NIL_TABLES_CHILD=1")
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
	startRowsHive(t, h)
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
func TestSecondUnnamedReconcilerOfAModuleIsRefused(t *testing.T) {
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
	startRowsHive(t, h)
	// The second would share the first's row: Register refuses it.
	require.ErrorIs(t, regErr, reconciler.ErrInvalidConfig)
	assert.Contains(t, regErr.Error(), "its own WithName")
}

// userWrite is one call of Write as a user's Writer saw it.
type userWrite struct {
	info    *tables.Info // kept, as Write may
	snap    tables.Info  // what it said when given
	retries []tables.RetryInfo
}

// userWriter is a user's own tables.Writer: it keeps every info it is given
// (Write "keeps info and may modify it"), copies the retries, and, when
// scribble is set, modifies the kept info afterwards, from Refreshed's
// goroutine as Tables does with LastRefresh, and in Write itself.
type userWriter struct {
	scribble bool

	mu        sync.Mutex
	writes    []userWrite
	refreshed int
	refIDs    map[string]int
	changed   chan struct{}
}

func newUserWriter(scribble bool) *userWriter {
	return &userWriter{scribble: scribble, changed: make(chan struct{})}
}

func (w *userWriter) Write(info *tables.Info, retries []tables.RetryInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr := userWrite{info: info, retries: append([]tables.RetryInfo(nil), retries...)}
	if info != nil {
		wr.snap = *info
	}
	w.writes = append(w.writes, wr)
	if w.scribble && info != nil {
		// A Writer may modify what it keeps: it is its row now.
		info.LastRefresh = time.Unix(1, 0)
		info.Objects = -1000
		info.Succeeded = 1 << 40
		info.State = "scribbled"
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *userWriter) Refreshed(id string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refreshed++
	if w.refIDs == nil {
		w.refIDs = map[string]int{}
	}
	w.refIDs[id]++
	for i := len(w.writes) - 1; i >= 0; i-- {
		if inf := w.writes[i].info; inf != nil && inf.ID == id {
			inf.LastRefresh = at // the row it keeps, as Tables does
			break
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *userWriter) get() ([]userWrite, int, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]userWrite(nil), w.writes...), w.refreshed, w.changed
}

// last returns the last info written.
func (w *userWriter) last() (tables.Info, bool) {
	ws, _, _ := w.get()
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].info != nil {
			return ws[i].snap, true
		}
	}
	return tables.Info{}, false
}

func (w *userWriter) waitLast(t *testing.T, what string, cond func(tables.Info) bool) tables.Info {
	t.Helper()
	var got tables.Info
	waitUntil(t, what, func() (bool, <-chan struct{}) {
		_, _, ch := w.get()
		var ok bool
		got, ok = w.last()
		return ok && cond(got), ch
	})
	return got
}

// withWriter is a fixture whose hive has wr as its tables.Writer.
func withWriter(wr tables.Writer) *with {
	return &with{first: []cell.Cell{cell.Provide(func() tables.Writer { return wr })}}
}

func writerFixture(t *testing.T, wr tables.Writer, km *kitmetrics, ops *target, opts ...reconciler.Option) *fixture {
	return startFixture(t, ops, withWriter(wr),
		append([]reconciler.Option{reconciler.WithMetrics(km), reconciler.WithPruning(0), reconciler.WithRetry(5*time.Millisecond, 20*time.Millisecond)}, opts...)...)
}

// runRowsWorkload makes objects succeed, fail, recover, change and go.
func runRowsWorkload(t *testing.T, f *fixture, ops *target, wr *userWriter) {
	ops.failIDs("bad", "worse")
	f.upsert(kititems("1", "a", "b", "bad", "worse")...)
	wr.waitLast(t, "two objects retrying", func(i tables.Info) bool { return i.Retrying == 2 && i.Objects == 4 })
	f.upsert(kititems("2", "a", "worse")...)
	f.remove("b")
	ops.recover()
	f.caughtUp()
	wr.waitLast(t, "nothing retrying", func(i tables.Info) bool { return i.Retrying == 0 && i.Objects == 3 })
}

// A user's Writer keeps the info it is given, and may modify it; the
// reconciler must hand it a value it will not touch again, and must not
// take its figures back from it: every Write's info is a fresh value, unchanged
// by the reconciler after Write returned, and the figures the reconciler
// writes stay right although the Writer scribbled on what it kept.
func TestWriterOwnsTheInfoItIsGiven(t *testing.T) {
	for _, scribble := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "scribble"}[scribble], func(t *testing.T) {
			wr, km, ops := newUserWriter(scribble), newKitMetrics(), newTarget()
			f := writerFixture(t, wr, km, ops, reconciler.WithRefreshing(10*time.Millisecond, nil))
			runRowsWorkload(t, f, ops, wr)
			// Wait for refreshes to run, so Refreshed modified kept rows.
			waitUntil(t, "two refresh sweeps", func() (bool, <-chan struct{}) {
				_, n, ch := wr.get()
				return n >= 2, ch
			})
			f.stop()
			wr.mu.Lock()
			assert.Equal(t, []string{"test"}, slices.Collect(maps.Keys(wr.refIDs)), "Refreshed is given the row's ID")
			wr.mu.Unlock()

			ws, _, _ := wr.get()
			seen := map[*tables.Info]int{}
			var prev *tables.Info
			for i, w := range ws {
				if w.info == nil {
					continue
				}
				if j, dup := seen[w.info]; dup {
					t.Errorf("write %d passed the info of write %d again: the reconciler reuses what the Writer keeps", i, j)
				}
				seen[w.info] = i
				if !scribble {
					got := *w.info
					got.LastRefresh = w.snap.LastRefresh // the Writer's own change
					assert.Equal(t, w.snap, got, "write %d's info changed after Write returned", i)
				}
				assert.Equal(t, "test", w.snap.ID)
				assert.GreaterOrEqual(t, w.snap.Objects, 0, "write %d: Objects", i)
				assert.Less(t, w.snap.Succeeded, uint64(1000), "write %d: Succeeded taken from the Writer's scribble?", i)
				assert.NotEqual(t, tables.State("scribbled"), w.snap.State, "write %d", i)
				if prev != nil {
					a, b := *prev, w.snap
					a.LastRefresh, b.LastRefresh = time.Time{}, time.Time{}
					assert.NotEqual(t, a, b, "write %d: no figure changed since the last row written", i)
				}
				p := w.snap
				prev = &p
			}
			last, ok := wr.last()
			require.True(t, ok)
			assert.Equal(t, tables.StateStopped, last.State)
			assert.Equal(t, 3, last.Objects)
			assert.Equal(t, 0, last.Retrying)
		})
	}
}

// "A reconciler calls Write at most once per round, and only when a figure
// of its row changed or failures of its objects did ... none while idle";
// "it writes retry rows only for objects whose failures changed in the
// round". An object waiting an hour for its retry is not written again
// while others come and go; every Write names an object at most once; a
// success removes its row (zero Attempts); an idle reconciler writes
// nothing.
func TestWritesOncePerRoundOnlyWhatChanged(t *testing.T) {
	for _, v := range variants {
		t.Run(v.String(), func(t *testing.T) { testWritesPerRound(t, v) })
	}
}

func testWritesPerRound(t *testing.T, v variant) {
	wr, km, ops := newUserWriter(false), newKitMetrics(), newTarget()
	ops.failIDs("bad")
	f := v.start(t, ops, withWriter(wr),
		reconciler.WithMetrics(km), reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(kititems("1", "a", "bad")...)
	wr.waitLast(t, "bad retrying", func(i tables.Info) bool { return i.Retrying == 1 && i.InFlight == 0 && i.BusyWorkers == 0 })
	f.caughtUp()
	assertIdle(t, wr, "with an object waiting an hour for its retry")
	ws, _, _ := wr.get()
	first := len(ws)
	for i, id := range []string{"c", "d", "e", "f", "g"} {
		f.upsert(kititems("1", id)...)
		f.caughtUp()
		wr.waitLast(t, "objects counted", func(inf tables.Info) bool { return inf.Objects == 3+i })
	}
	ops.recover()
	f.upsert(kititems("2", "bad")...)
	wr.waitLast(t, "bad recovered", func(i tables.Info) bool { return i.Retrying == 0 })
	f.caughtUp()

	ws, _, _ = wr.get()
	km.mu.Lock()
	rounds := km.rounds
	km.mu.Unlock()
	assert.LessOrEqual(t, len(ws), rounds, "at most one Write per round")
	var removed bool
	for i, w := range ws {
		keys := map[string]bool{}
		for _, r := range w.retries {
			assert.False(t, keys[r.Key], "write %d names %s twice", i, r.Key)
			keys[r.Key] = true
			assert.Equal(t, "test", r.Reconciler)
			if r.Key == "bad" && i >= first && i < len(ws) && r.Attempts > 0 {
				// Only the change to version 2 (attempts restart) may
				// write it again; it succeeded, so none may.
				t.Errorf("write %d rewrites bad's retry (attempts %d) though its failure did not change", i, r.Attempts)
			}
			if r.Key == "bad" && r.Attempts == 0 {
				removed = true
			}
			assert.NotEqual(t, "a", r.Key, "a never failed")
		}
		if w.info == nil && len(w.retries) == 0 {
			t.Errorf("write %d writes nothing", i)
		}
	}
	assert.True(t, removed, "bad's success removes its row with a zero-Attempts entry")

	assertIdle(t, wr, "with nothing failing")
}

// assertIdle checks that nothing is written for a while. (An
// observation window, not a synchronisation: nothing is expected to
// happen.)
func assertIdle(t *testing.T, wr *userWriter, what string) {
	t.Helper()
	before, _, ch := wr.get()
	select {
	case <-ch:
		after, _, _ := wr.get()
		last := after[len(after)-1]
		t.Errorf("an idle reconciler (%s) wrote: %d writes after %d; the last: info %+v, retries %+v", what, len(after), len(before), last.snap, last.retries)
	case <-time.After(300 * time.Millisecond):
	}
}

// The reconciler writes its row and its failing objects' rows "in one
// transaction" (Writer.Write): no reader ever sees a row whose Retrying
// differs from the number of that reconciler's rows in reconciler-retries,
// while objects fail, recover, change and go, with one worker or four.
func TestRowAndRetryRowsAgreeInEverySnapshot(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		ops := newTarget()
		ops.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool {
			return op == reconcilertest.OpUpdate && strings.HasPrefix(it.Value, "bad") || op == reconcilertest.OpDelete && it.ID == "o2"
		})
		f := v.start(t, ops, &with{tables: true},
			reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var bad atomic.Value
		// check reads one snapshot and returns its watch channels.
		check := func() (bool, <-chan struct{}, <-chan struct{}) {
			txn := f.db.ReadTxn()
			_, watch := f.tables.Retries().AllWatch(txn)
			_, watch2 := f.tables.Reconcilers().AllWatch(txn)
			info, _, ok := f.tables.Reconcilers().Get(txn, tables.InfoByID.Query("test"))
			if !ok {
				return false, watch, watch2
			}
			rows := 0
			for range f.tables.Retries().List(txn, tables.RetryByReconciler.Query("test")) {
				rows++
			}
			if rows != info.Retrying && bad.Load() == nil {
				bad.Store(fmt.Sprintf("Retrying %d with %d retry rows (state %s)", info.Retrying, rows, info.State))
			}
			return true, watch, watch2
		}
		checked := make(chan int, 1)
		go func() {
			n := 0
			defer func() { checked <- n }()
			for ctx.Err() == nil {
				ok, watch, watch2 := check()
				if ok {
					n++
				}
				select {
				case <-watch:
				case <-watch2:
				case <-ctx.Done():
				}
			}
		}()
		for round := range 30 {
			var objs []*item
			for i := range 10 {
				v := "ok"
				if (i+round)%3 == 0 {
					v = "bad"
				}
				objs = append(objs, &item{ID: fmt.Sprint("o", i), Value: fmt.Sprint(v, round)})
			}
			f.upsert(objs...)
			if round%5 == 4 {
				f.remove("o1", "o2", "o3")
			}
		}
		ops.recover()
		f.upsert(kititems("final", "o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9")...)
		f.caughtUp()
		f.waitInfo("nothing failing", func(i *tables.Info) bool { return i.Retrying == 0 && i.Objects == 10 })
		cancel()
		n := recv(t, checked, "the reader to end")
		t.Logf("%d snapshots checked", n)
		ok, _, _ := check()
		assert.True(t, ok)
		if b := bad.Load(); b != nil {
			t.Errorf("a snapshot disagrees: %s", b)
		}
		assert.Zero(t, f.tables.Retries().NumObjects(f.db.ReadTxn()))
	})
}

// A paused reconciler starts nothing; its row says paused. With nothing
// changing in the table it is idle, and writes nothing, though an object's
// retries (every few milliseconds) fall due while it is paused.
func TestPausedReconcilerWritesNothing(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		wr, km, ops := newUserWriter(false), newKitMetrics(), newTarget()
		ops.failIDs("bad")
		f := v.start(t, ops, withWriter(wr),
			reconciler.WithMetrics(km), reconciler.WithRetry(2*time.Millisecond, 5*time.Millisecond), reconciler.WithRetryJitter(0))
		f.upsert(kititems("1", "a", "bad")...)
		wr.waitLast(t, "bad retrying", func(i tables.Info) bool { return i.Retrying == 1 && i.Failed >= 2 })
		f.rec.Pause()
		// Work handed to the workers as Pause came waits for Resume,
		// counted in flight; no worker runs one.
		wr.waitLast(t, "paused, no worker busy", func(i tables.Info) bool {
			return i.State == tables.StatePaused && i.BusyWorkers == 0
		})
		calls := ops.calls.Load()
		assertIdle(t, wr, "paused")
		assert.Equal(t, calls, ops.calls.Load(), "a paused reconciler started operations")
		f.rec.Resume()
		last := wr.waitLast(t, "running again", func(i tables.Info) bool { return i.State != tables.StatePaused })
		assert.Equal(t, tables.StateDegraded, last.State)
	})
}

// A retry row is removed when the object "changes or is deleted": also when
// the change or the delete comes while the object's retry runs, and that
// retry fails.
func TestRetryRowGoesWhenChangedDuringItsRetry(t *testing.T) {
	for _, v := range variants {
		for _, how := range []string{"delete", "change"} {
			t.Run(v.String()+","+how, func(t *testing.T) {
				ops := newTarget()
				ops.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool {
					return op == reconcilertest.OpUpdate && it.ID == "c" && it.Value == "1"
				})
				f := v.start(t, ops, &with{tables: true}, reconciler.WithRetry(20*time.Millisecond, 20*time.Millisecond))
				f.upsert(kititems("1", "a", "c")...)
				f.waitInfo("c failing", func(i *tables.Info) bool { return i.Retrying == 1 })
				entered, release := ops.holdUpdates(func(it *item) bool { return it.ID == "c" && it.Value == "1" })
				recv(t, entered, "c's retry to start")
				if how == "delete" {
					f.remove("c")
				} else {
					f.upsert(kititems("2", "c")...)
				}
				close(release)
				f.caughtUp()
				f.waitInfo("nothing failing", func(i *tables.Info) bool { return i.Retrying == 0 && i.InFlight == 0 })
				f.waitTable("c's retry row to go", func(txn statedb.ReadTxn) bool {
					_, _, found := f.tables.Retries().Get(txn, tables.RetryByKey.Query(tables.RetryKey("test", "c")))
					return !found
				})
				assert.Zero(t, f.tables.Retries().NumObjects(f.db.ReadTxn()))
			})
		}
	}
}

// RetryInfo.NextAttempt is "zero while an attempt runs" (db/show:
// "running"). With workers, a retry held in flight is handed out in one
// round and the round ends: its row says running, and the reconcilers row
// counts it in flight.
func TestRetryRowSaysRunningWhileInFlight(t *testing.T) {
	forVariants(t, []variant{{4, false}, {4, true}}, func(t *testing.T, v variant) {
		ops := newTarget()
		ops.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool { return op == reconcilertest.OpUpdate && it.ID == "c" })
		f := v.start(t, ops, &with{tables: true}, reconciler.WithRetry(20*time.Millisecond, 20*time.Millisecond))
		f.upsert(kititems("1", "a", "c")...)
		f.waitInfo("c failing", func(i *tables.Info) bool { return i.Retrying == 1 })
		entered, release := ops.holdUpdates(func(it *item) bool { return it.ID == "c" })
		defer close(release)
		recv(t, entered, "c's retry to start")
		// Another change makes another round, after the one that handed
		// out the retry, if that one wrote nothing.
		f.upsert(kititems("2", "a")...)
		f.waitKind("a", status.KindDone)
		var row *tables.RetryInfo
		f.waitInfo("the held retry in flight", func(i *tables.Info) bool { return i.InFlight >= 1 })
		row, _, found := f.tables.Retries().Get(f.db.ReadTxn(), tables.RetryByKey.Query(tables.RetryKey("test", "c")))
		require.True(t, found)
		assert.True(t, row.NextAttempt.IsZero(), "NextAttempt %v while the attempt runs (row %v)", row.NextAttempt, row.TableRow())
	})
}

// StateStopped: "its job is not running". Stopping the hive while
// operations are in flight (and refreshes run), the last row written says
// stopped, and nothing is written once Stop has returned.
func TestStoppedIsTheLastWrite(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		wr, km, ops := newUserWriter(false), newKitMetrics(), newTarget()
		entered, _ := ops.holdUpdates(func(it *item) bool { return it.ID == "held" }) // until the stop cancels it
		f := v.start(t, ops, withWriter(wr),
			reconciler.WithMetrics(km), reconciler.WithRefreshing(10*time.Millisecond, nil))
		f.upsert(kititems("1", "a", "b", "held")...)
		recv(t, entered, "held's update to start")
		f.stop()
		after, refreshed, _ := wr.get()
		last, ok := wr.last()
		require.True(t, ok)
		assert.Equal(t, tables.StateStopped, last.State, "the last row written")
		assert.Zero(t, last.InFlight, "stopped: nothing in flight")
		// Nothing more comes (an observation window, not a synchronisation).
		_, _, ch := wr.get()
		select {
		case <-ch:
			later, r2, _ := wr.get()
			t.Errorf("written after Stop returned: %d writes after %d, %d refreshes after %d", len(later), len(after), r2, refreshed)
		case <-time.After(200 * time.Millisecond):
		}
	})
}

// serialWriter records whether two Writes ever overlapped: "A
// reconciler calls Write from its reconcile job" (one goroutine), so a
// Writer may take Writes to come one at a time; only Refreshed comes
// concurrently, from the refresh job.
type serialWriter struct {
	active, overlaps, writes atomic.Int64
	last                     atomic.Value  // tables.State
	reached                  chan struct{} // closed at the 30th Write
	once                     sync.Once
}

func (w *serialWriter) Write(info *tables.Info, _ []tables.RetryInfo) {
	if w.active.Add(1) > 1 {
		w.overlaps.Add(1)
	}
	for range 200 {
		runtime.Gosched() // widen the window in which another Write would overlap
	}
	if info != nil {
		w.last.Store(info.State)
	}
	if w.writes.Add(1) == 30 {
		w.once.Do(func() { close(w.reached) })
	}
	w.active.Add(-1)
}

func (w *serialWriter) Refreshed(string, time.Time) {}

func TestWritesComeOneAtATime(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		wr, ops := &serialWriter{reached: make(chan struct{})}, newTarget()
		ops.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool { return strings.HasPrefix(it.ID, "bad") })
		f := v.start(t, ops, withWriter(wr),
			reconciler.WithRetry(time.Millisecond, 2*time.Millisecond), reconciler.WithRefreshing(5*time.Millisecond, nil))
		for i := range 20 {
			f.upsert(kititems(fmt.Sprint(i), "a", "b", "bad1", "bad2")...)
		}
		recv(t, wr.reached, "30 writes")
		f.stop()
		assert.Zero(t, wr.overlaps.Load(), "Writes overlapped")
		assert.Equal(t, tables.StateStopped, wr.last.Load())
	})
}
