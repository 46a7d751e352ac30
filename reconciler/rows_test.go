package reconciler_test

// The rows the reconciler keeps in the tables (package tables, fed through
// reconciler.Params.Tables): what a Writer is given and when, the rows of
// several reconcilers, and how rows agree; scripts: testdata/rows_*.txtar.

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
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

// RetryInfo.Key is "the object's primary key, in hex if not printable":
// two failing objects of one reconciler, keyed "\x01" and "0x01", are two
// failing objects and must have two rows of their own.
func TestRetryRowsOfHexAndPrintableKeysAreDistinct(t *testing.T) {
	f := startFixture(t, newTarget().failIDs("\x01", "0x01"), &with{tables: true},
		reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(kititems("1", "\x01", "0x01")...)
	f.waitInfo("two failing objects", func(i *tables.Info) bool { return i.Retrying == 2 })
	assert.Len(t, f.retryRows(), 2, "one row per failing object; got %v", f.retryRows())
}

// countingWriter wraps the Writer that tables.Cell provides, as a user
// decorating it (for logs, say) would.
type countingWriter struct {
	tables.Writer
	writes atomic.Int64
}

func (w *countingWriter) Write(info *tables.Info, retries []tables.RetryInfo) {
	w.writes.Add(1)
	w.Writer.Write(info, retries)
}

// rowsModule is a module (nested in "agent") with its own items table and an
// unnamed and a named reconciler on it; id "bad" fails.
func rowsModule(name string) cell.Cell {
	return cell.Module(name, "Module "+name, cell.ProvidePrivate(job.Registry.NewGroup),
		cell.Invoke(func(p reconciler.Params) error {
			tbl, err := statedb.NewTable(p.DB, name+"-items", itemID)
			if err != nil {
				return err
			}
			for _, rn := range []string{"", "n"} {
				get, set := (*item).getStatus, (*item).setStatus
				opts := []reconciler.Option{reconciler.WithPruning(0), reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithMetrics(newKitMetrics())}
				if rn != "" {
					get, set = statusOf(rn)
					opts = append(opts, reconciler.WithName(rn))
				}
				if _, err := reconciler.Register(p, tbl, (*item).clone, set, get, newTarget().failIDs("bad"), nil, opts...); err != nil {
					return err
				}
			}
			wtxn := p.DB.WriteTxn(tbl)
			defer wtxn.Commit()
			for _, id := range []string{"ok", "bad"} {
				if _, _, err := tbl.Insert(wtxn, &item{ID: id, Value: "1", Status: status.Pending(), Statuses: status.NewSet()}); err != nil {
					return err
				}
			}
			return nil
		}))
}

// Several reconcilers in several modules share the tables of one
// tables.Cell, whose Writer a user decorates: each has its row, keyed
// metrics.Key(moduleID, name) (docs/testing.md), with its module and name,
// and its failing objects listed by RetryByReconciler; a stop marks every
// row stopped and a start of the same hive makes them current again, with
// no row left over or doubled.
func TestRowsOfReconcilersSharingADecoratedWriter(t *testing.T) {
	var wrap *countingWriter
	f := startFixture(t, newTarget(), &with{tables: true, last: []cell.Cell{cell.Module("agent", "Agent",
		cell.Decorate(func(w tables.Writer) tables.Writer { wrap = &countingWriter{Writer: w}; return wrap },
			rowsModule("ma"), rowsModule("mb")))}})
	infos, rets := f.tables.Reconcilers(), f.tables.Retries()
	ids := map[string][2]string{} // module, name
	for _, mod := range []string{"ma", "mb"} {
		for _, n := range []string{"", "n"} {
			mid := cell.FullModuleID{"agent", mod}
			ids[metrics.Key(mid, n)] = [2]string{mid.String(), n}
		}
	}
	rowsAre := func(state tables.State) func() (bool, <-chan struct{}) {
		return func() (bool, <-chan struct{}) {
			txn := f.db.ReadTxn()
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
	waitRows := func() {
		waitUntil(t, "four degraded rows with one failing object each", rowsAre(tables.StateDegraded))
		txn := f.db.ReadTxn()
		assert.Equal(t, len(ids)+1, infos.NumObjects(txn), "one row per reconciler, the fixture's too")
		assert.Equal(t, len(ids), rets.NumObjects(txn))
	}
	waitRows()
	txn := f.db.ReadTxn()
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
	require.NotNil(t, wrap)
	assert.Positive(t, wrap.writes.Load(), "the decorated Writer is the one the reconcilers write through")
	f.stop()
	stopped, _ := rowsAre(tables.StateStopped)()
	assert.True(t, stopped, "a row not stopped after Stop")
	f.start()
	waitRows()
}

// Migration: "reconciler.Params.Tables is now a tables.Writer". Code that
// fills it with its own optional *Tables, as it did before (a nil
// *Tables: "Without it the reconciler keeps none"), still compiles; the
// nil *tables.Tables must still mean no tables, not a reconciler that
// fails on its first round (a panic on a job's goroutine ends the binary:
// the test runs in a child process). cd09fec.
func TestNilTablesPointerKeepsNoTables(t *testing.T) {
	if !inChild(t) {
		return
	}
	f := newFixture(t, nil, &with{register: byTheTest})
	p := f.params
	var absent *tables.Tables // an optional *tables.Tables the hive lacks
	p.Tables = absent
	tg := newTarget()
	var err error
	f.rec, err = reconciler.Register(p, f.table, (*item).clone, (*item).setStatus, (*item).getStatus, tg, nil, reconciler.WithPruning(0))
	require.NoError(t, err)
	f.start()
	f.put("a", "1")
	f.waitApplied(tg, "a", "1")
}

// "reconcilers": "one row per reconciler, keyed by module ID and name". A
// module that owns two tables and registers an unnamed reconciler for each
// has two reconcilers whose failures must not be told as one: Register
// refuses the second, as it names nothing to tell them apart (cd09fec).
func TestSecondUnnamedReconcilerOfAModuleIsRefused(t *testing.T) {
	f := newFixture(t, nil, &with{tables: true, register: byTheTest})
	register := func(table string) error {
		tbl, err := statedb.NewTable(f.db, table, itemID)
		require.NoError(t, err)
		_, err = reconciler.Register(f.params, tbl, (*item).clone, (*item).setStatus, (*item).getStatus, newTarget(), nil,
			reconciler.WithPruning(0), reconciler.WithMetrics(newKitMetrics()))
		return err
	}
	require.NoError(t, register("items1"))
	err := register("items2")
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "its own WithName")
}

// userWriter is a user's own tables.Writer. It keeps every info it is
// given (Write "keeps info and may modify it") with a snapshot of it and a
// copy of the retries; with scribble it modifies what it kept, in Write
// and from Refreshed's goroutine as Tables does with LastRefresh. It counts
// Writes that overlapped, widening the window in which they would.
type userWriter struct {
	scribble         bool
	active, overlaps atomic.Int64

	mu      sync.Mutex
	writes  []userWrite
	refIDs  map[string]int // Refreshed calls by ID
	changed chan struct{}  // closed and replaced at every call
}

type userWrite struct {
	info    *tables.Info // kept, as Write may
	snap    tables.Info  // what it said when given
	retries []tables.RetryInfo
}

func newUserWriter(scribble bool) *userWriter {
	return &userWriter{scribble: scribble, refIDs: map[string]int{}, changed: make(chan struct{})}
}

func (w *userWriter) Write(info *tables.Info, retries []tables.RetryInfo) {
	if w.active.Add(1) > 1 {
		w.overlaps.Add(1)
	}
	defer w.active.Add(-1)
	for range 200 {
		runtime.Gosched()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wr := userWrite{info: info, retries: slices.Clone(retries)}
	if info != nil {
		wr.snap = *info
		if w.scribble { // it is the Writer's row now
			info.LastRefresh, info.Objects, info.Succeeded, info.State = time.Unix(1, 0), -1000, 1<<40, "scribbled"
		}
	}
	w.writes = append(w.writes, wr)
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *userWriter) Refreshed(id string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
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

// get returns the writes so far, the number of Refreshed calls and a
// channel closed at the next call.
func (w *userWriter) get() ([]userWrite, int, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.refIDs {
		n += c
	}
	return slices.Clone(w.writes), n, w.changed
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

// assertIdle checks that nothing is written for a while (an observation
// window, not a synchronisation: nothing is expected to happen).
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

// A user's Writer keeps the info it is given, and may modify it; the
// reconciler must hand it a value it will not touch again, and must not
// take its figures back from it: every Write's info is a fresh value,
// unchanged by the reconciler after Write returned, and the figures the
// reconciler writes stay right although the Writer scribbled on what it
// kept. Refreshed is given the row's ID.
func TestWriterOwnsTheInfoItIsGiven(t *testing.T) {
	for _, scribble := range []bool{false, true} {
		t.Run(fmt.Sprint("scribble=", scribble), func(t *testing.T) {
			wr, ops := newUserWriter(scribble), newTarget()
			f := startFixture(t, ops.failIDs("bad", "worse"), withWriter(wr), reconciler.WithMetrics(newKitMetrics()), reconciler.WithPruning(0),
				reconciler.WithRetry(5*time.Millisecond, 20*time.Millisecond), reconciler.WithRefreshing(10*time.Millisecond, nil))
			f.upsert(kititems("1", "a", "b", "bad", "worse")...)
			wr.waitLast(t, "two objects retrying", func(i tables.Info) bool { return i.Retrying == 2 && i.Objects == 4 })
			f.upsert(kititems("2", "a", "worse")...)
			f.remove("b")
			ops.recover()
			f.caughtUp()
			wr.waitLast(t, "nothing retrying", func(i tables.Info) bool { return i.Retrying == 0 && i.Objects == 3 })
			waitUntil(t, "two refresh sweeps", func() (bool, <-chan struct{}) { // Refreshed modifies kept rows
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
				prev = &w.snap
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
	forVariants(t, variants, func(t *testing.T, v variant) {
		wr, km, ops := newUserWriter(false), newKitMetrics(), newTarget()
		f := v.start(t, ops.failIDs("bad"), withWriter(wr), reconciler.WithMetrics(km), reconciler.WithRetry(time.Hour, time.Hour))
		f.upsert(kititems("1", "a", "bad")...)
		wr.waitLast(t, "bad retrying", func(i tables.Info) bool { return i.Retrying == 1 && i.InFlight == 0 && i.BusyWorkers == 0 })
		f.caughtUp()
		assertIdle(t, wr, "with an object waiting an hour for its retry")
		ws, _, _ := wr.get()
		first := len(ws)
		for i, id := range []string{"c", "d", "e", "f", "g"} {
			f.put(id, "1")
			f.caughtUp()
			wr.waitLast(t, "objects counted", func(inf tables.Info) bool { return inf.Objects == 3+i })
		}
		ops.recover()
		f.put("bad", "2")
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
				// Only the change to version 2 (attempts restart) may
				// write it again; it succeeded, so none may.
				if r.Key == "bad" && i >= first && r.Attempts > 0 {
					t.Errorf("write %d rewrites bad's retry (attempts %d) though its failure did not change", i, r.Attempts)
				}
				removed = removed || r.Key == "bad" && r.Attempts == 0
				assert.NotEqual(t, "a", r.Key, "a never failed")
			}
			if w.info == nil && len(w.retries) == 0 {
				t.Errorf("write %d writes nothing", i)
			}
		}
		assert.True(t, removed, "bad's success removes its row with a zero-Attempts entry")
		assertIdle(t, wr, "with nothing failing")
	})
}

// The reconciler writes its row and its failing objects' rows "in one
// transaction" (Writer.Write): no reader ever sees a row whose Retrying
// differs from the number of that reconciler's rows in reconciler-retries,
// while objects fail, recover, change and go.
func TestRowAndRetryRowsAgreeInEverySnapshot(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		ops := newTarget()
		ops.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool {
			return op == reconcilertest.OpUpdate && strings.HasPrefix(it.Value, "bad") || op == reconcilertest.OpDelete && it.ID == "o2"
		})
		f := v.start(t, ops, &with{tables: true}, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))
		var bad string // the first disagreement seen
		check := func() (<-chan struct{}, <-chan struct{}) {
			txn := f.db.ReadTxn()
			_, w1 := f.tables.Retries().AllWatch(txn)
			_, w2 := f.tables.Reconcilers().AllWatch(txn)
			if info, _, ok := f.tables.Reconcilers().Get(txn, tables.InfoByID.Query("test")); ok && bad == "" {
				rows := 0
				for range f.tables.Retries().List(txn, tables.RetryByReconciler.Query("test")) {
					rows++
				}
				if rows != info.Retrying {
					bad = fmt.Sprintf("Retrying %d with %d retry rows (state %s)", info.Retrying, rows, info.State)
				}
			}
			return w1, w2
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		checked := make(chan int, 1)
		go func() {
			n := 0
			for ; ctx.Err() == nil; n++ {
				w1, w2 := check()
				select {
				case <-w1:
				case <-w2:
				case <-ctx.Done():
				}
			}
			checked <- n
		}()
		write := func(value func(i int) string) {
			var objs []*item
			for i := range 10 {
				objs = append(objs, &item{ID: fmt.Sprint("o", i), Value: value(i)})
			}
			f.upsert(objs...)
		}
		for round := range 30 {
			write(func(i int) string {
				return fmt.Sprint(map[bool]string{true: "bad", false: "ok"}[(i+round)%3 == 0], round)
			})
			if round%5 == 4 {
				f.remove("o1", "o2", "o3")
			}
		}
		ops.recover()
		write(func(int) string { return "final" })
		f.caughtUp()
		f.waitInfo("nothing failing", func(i *tables.Info) bool { return i.Retrying == 0 && i.Objects == 10 })
		cancel()
		t.Logf("%d snapshots checked", recv(t, checked, "the reader to end"))
		assert.Empty(t, bad, "a snapshot disagrees")
		assert.Zero(t, f.tables.Retries().NumObjects(f.db.ReadTxn()))
	})
}

// A paused reconciler starts nothing; its row says paused. With nothing
// changing in the table it is idle, and writes nothing, though an object's
// retries (every few milliseconds) fall due while it is paused.
func TestPausedReconcilerWritesNothing(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		wr, ops := newUserWriter(false), newTarget()
		f := v.start(t, ops.failIDs("bad"), withWriter(wr), reconciler.WithMetrics(newKitMetrics()),
			reconciler.WithRetry(2*time.Millisecond, 5*time.Millisecond), reconciler.WithRetryJitter(0))
		f.upsert(kititems("1", "a", "bad")...)
		wr.waitLast(t, "bad retrying", func(i tables.Info) bool { return i.Retrying == 1 && i.Failed >= 2 })
		f.rec.Pause()
		// Work handed to the workers as Pause came waits for Resume,
		// counted in flight; no worker runs one.
		wr.waitLast(t, "paused, no worker busy", func(i tables.Info) bool { return i.State == tables.StatePaused && i.BusyWorkers == 0 })
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
// retry fails. While it runs, with workers (the round that handed it out
// ends), its row says running: NextAttempt is "zero while an attempt runs"
// (db/show: "running"), and the reconcilers row counts it in flight.
func TestRetryRowSaysRunningAndGoesWhenChangedDuringItsRetry(t *testing.T) {
	for _, v := range variants {
		for _, how := range []string{"delete", "change"} {
			t.Run(v.String()+","+how, func(t *testing.T) {
				ops := newTarget()
				failing := func(it *item) bool { return it.ID == "c" && it.Value == "1" }
				ops.failWhen(errKitObject, func(op reconcilertest.Op, it *item) bool { return op == reconcilertest.OpUpdate && failing(it) })
				f := v.start(t, ops, &with{tables: true}, reconciler.WithRetry(20*time.Millisecond, 20*time.Millisecond))
				f.upsert(kititems("1", "a", "c")...)
				f.waitInfo("c failing", func(i *tables.Info) bool { return i.Retrying == 1 })
				entered, release := ops.holdUpdates(failing)
				recv(t, entered, "c's retry to start")
				if v.workers > 1 {
					// Another change makes another round, after the one
					// that handed out the retry, if that one wrote nothing.
					f.put("a", "2")
					f.waitKind("a", status.KindDone)
					f.waitInfo("the held retry in flight", func(i *tables.Info) bool { return i.InFlight >= 1 })
					row, found := f.retryRow("c")
					require.True(t, found)
					assert.True(t, row.NextAttempt.IsZero(), "NextAttempt %v while the attempt runs (row %v)", row.NextAttempt, row.TableRow())
				}
				if how == "delete" {
					f.remove("c")
				} else {
					f.put("c", "2")
				}
				close(release)
				f.caughtUp()
				f.waitInfo("nothing failing", func(i *tables.Info) bool { return i.Retrying == 0 && i.InFlight == 0 })
				f.waitRetryRow("c", nil)
				assert.Zero(t, f.tables.Retries().NumObjects(f.db.ReadTxn()))
			})
		}
	}
}

// StateStopped: "its job is not running"; and "A reconciler calls Write
// from its reconcile job" (one goroutine), so a Writer may take Writes to
// come one at a time; only Refreshed comes concurrently. Stopping the hive
// while objects fail and are retried, refreshes run and an operation is in
// flight: no two Writes overlapped, the last row written says stopped with
// nothing in flight, and nothing is written once Stop has returned.
func TestWritesComeOneAtATimeAndStoppedIsTheLast(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		wr, ops := newUserWriter(false), newTarget()
		ops.failWhen(errKitObject, func(_ reconcilertest.Op, it *item) bool { return it != nil && strings.HasPrefix(it.ID, "bad") })
		entered, _ := ops.holdUpdates(func(it *item) bool { return it.ID == "held" }) // until the stop cancels it
		f := v.start(t, ops, withWriter(wr), reconciler.WithMetrics(newKitMetrics()),
			reconciler.WithRetry(time.Millisecond, 2*time.Millisecond), reconciler.WithRefreshing(5*time.Millisecond, nil))
		for i := range 20 {
			f.upsert(kititems(fmt.Sprint(i), "a", "b", "bad1", "bad2")...)
		}
		waitUntil(t, "30 writes", func() (bool, <-chan struct{}) {
			ws, _, ch := wr.get()
			return len(ws) >= 30, ch
		})
		f.put("held", "1")
		recv(t, entered, "held's update to start")
		f.stop()
		after, refreshed, ch := wr.get()
		assert.Zero(t, wr.overlaps.Load(), "Writes overlapped")
		last, ok := wr.last()
		require.True(t, ok)
		assert.Equal(t, tables.StateStopped, last.State, "the last row written")
		assert.Zero(t, last.InFlight, "stopped: nothing in flight")
		select { // an observation window: nothing more comes
		case <-ch:
			later, r2, _ := wr.get()
			t.Errorf("written after Stop returned: %d writes after %d, %d refreshes after %d", len(later), len(after), r2, refreshed)
		case <-time.After(200 * time.Millisecond):
		}
	})
}
