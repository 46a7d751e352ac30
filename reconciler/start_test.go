package reconciler_test

// When a reconciler starts: registered from a start hook or after the
// start, and inside a synctest bubble. (WithStartAfter:
// testdata/start_after*.txtar.)

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// The reconciler runs inside a testing/synctest bubble, as StateDB tests
// its own, with workers, batches, a dependency, refreshing, pruning and
// retries: dependency changes and refreshes (in fake time) re-apply
// objects, and writes and deletes made while the hive is stopped converge
// after the next start. Nothing it leaves behind is touched from outside
// the bubble once it ends (the process would die).
func TestRunsInASynctestBubble(t *testing.T) {
	for _, v := range variants {
		t.Run(v.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tg := newTarget()
				var deps statedb.RWTable[*item]
				f := v.fixture(t, tg, withDeps(t, &deps, sameID), reconciler.WithRefreshing(time.Minute, nil),
					reconciler.WithPruning(10*time.Minute), reconciler.WithRetry(time.Second, 10*time.Second))
				f.start()
				objs := items("k", 50, "1")
				f.upsert(objs...)
				f.converged(tg)

				_, n := count(tg, reconcilertest.OpUpdate, objs[3].ID)
				writeDeps(t, f, deps, false, &item{ID: objs[3].ID})
				waitCalls(t, tg, reconcilertest.OpUpdate, objs[3].ID, n+1)
				_, n = count(tg, reconcilertest.OpUpdate, objs[10].ID)
				time.Sleep(2 * time.Minute) // fake time: a refresh falls due
				waitCalls(t, tg, reconcilertest.OpUpdate, objs[10].ID, n+1)
				f.converged(tg)

				f.stop()
				f.remove(ids(objs[:20])...)
				f.upsert(items("k", 30, "2")[10:]...)
				writeDeps(t, f, deps, false, &item{ID: objs[40].ID})
				f.start()
				f.converged(tg)
				for _, o := range objs[:10] { // deleted while stopped, not pruned
					_, deleted := count(tg, reconcilertest.OpDelete, o.ID)
					assert.Positive(t, deleted, "%s was not handed to Delete", o.ID)
				}
				f.stop()
			})
			collectGarbage(t)
		})
	}
}

// Whatever a reconciler went through inside a synctest bubble, nothing it
// leaves behind is touched from outside the bubble once it ends.
func TestLeavesNothingBehindItsSynctestBubble(t *testing.T) {
	errHook := errors.New("start hook fails")
	fail := cell.Hook{OnStart: func(cell.HookContext) error { return errHook }}
	failing := func(afterDB bool) cell.Cell {
		if afterDB {
			return cell.Invoke(func(_ *statedb.DB, lc cell.Lifecycle) { lc.Append(fail) })
		}
		return cell.Invoke(func(lc cell.Lifecycle) { lc.Append(fail) })
	}
	type run func(t *testing.T, w *with) *fixture
	writes := func(f *fixture) { f.upsert(items("k", 10, "1")...); f.remove("k-00001") }
	failsToStart := func(t *testing.T, w *with) *fixture {
		f := newFixture(t, newTarget(), w, reconciler.WithConcurrency(4))
		require.ErrorIs(t, f.tryStart(), errHook)
		writes(f)
		return f
	}
	for _, c := range []struct {
		name string
		run  run
	}{
		{"registered, never started", func(t *testing.T, w *with) *fixture {
			f := newFixture(t, newTarget(), w, reconciler.WithConcurrency(4))
			writes(f)
			return f
		}},
		{"start fails before the database starts", func(t *testing.T, w *with) *fixture {
			w.first = []cell.Cell{failing(false)}
			return failsToStart(t, w)
		}},
		{"start fails after the database started", func(t *testing.T, w *with) *fixture {
			w.first = []cell.Cell{failing(true)}
			return failsToStart(t, w)
		}},
		{"start fails after the reconciler's jobs", func(t *testing.T, w *with) *fixture {
			w.last = []cell.Cell{failing(false)}
			return failsToStart(t, w)
		}},
		{"registered after the hive stopped", func(t *testing.T, w *with) *fixture {
			w.register = byTheTest
			f := startFixture(t, newTarget(), w)
			f.stop()
			require.NoError(t, f.register())
			return f
		}},
		{"registered after the start, then stopped and started", func(t *testing.T, w *with) *fixture {
			w.register = byTheTest
			tg := newTarget()
			f := startFixture(t, tg, w, reconciler.WithConcurrency(4))
			require.NoError(t, f.register())
			f.waitApplied(tg, "a", "1")
			f.stop()
			f.start()
			return f
		}},
		{"registered in a start hook", func(t *testing.T, w *with) *fixture {
			w.register = inStartHook
			tg := newTarget()
			f := startFixture(t, tg, w)
			f.waitApplied(tg, "a", "1")
			return f
		}},
	} {
		for _, dep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dependency=%v", c.name, dep), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					deps := withDeps(t, new(statedb.RWTable[*item]), sameID).setup
					w := &with{setup: func(f *fixture) []reconciler.Option {
						f.upsert(&item{ID: "a", Value: "1"})
						if dep {
							return deps(f)
						}
						return nil
					}}
					c.run(t, w).stop()
				})
				collectGarbage(t)
			})
		}
	}
	// Cut short by a stop, failures waiting for a retry over a stop, a
	// pause held over a stop, timers of pruning and refreshing pending at
	// the stop.
	for _, v := range variants {
		t.Run("cut short and retried/"+v.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tg := newTarget()
				fo := reconcilertest.NewFaultyOps(itemKey, tg, tg)
				require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "fails"}))
				held := tg.hold("held")
				w := &with{}
				if v.batch {
					w.batch = fo
				}
				f := startFixture(t, fo, w, reconciler.WithConcurrency(v.workers), reconciler.WithRetry(time.Second, time.Minute),
					reconciler.WithPruning(time.Minute), reconciler.WithRefreshing(time.Minute, nil), reconciler.WithOperationTimeout(time.Hour))
				f.upsert(items("k", 20, "1")...)
				f.upsert(&item{ID: "fails", Value: "1"})
				f.waitKind("fails", status.KindError)
				f.upsert(&item{ID: "held", Value: "1"})
				held.wait(t)
				f.stop()
				f.remove("k-00001")
				f.start()
				time.Sleep(3 * time.Second) // fake time: a retry falls due
				synctest.Wait()
				f.rec.Pause()
				f.stop()
				fo.Clear("fails")
				f.start()
				f.rec.Resume()
				time.Sleep(2 * time.Minute) // fake time: retries, prunes and refreshes
				f.converged(tg)
				f.stop()
			})
			collectGarbage(t)
		})
	}
}

// Several reconcilers, registered from start hooks (two in one hook) and
// after the start, all reconcile; the fixture's, registered after the
// start too, applies a write made before Register and a write and a
// delete after it.
func TestSeveralReconcilersRegisteredAtDifferentTimesAllRun(t *testing.T) {
	type other struct {
		table statedb.RWTable[*item]
		tg    *target
		rec   reconciler.Reconciler[*item]
	}
	others := map[string]*other{}
	var params reconciler.Params
	register := func(name string) error {
		o := others[name]
		var err error
		o.rec, err = reconciler.Register(params, o.table, (*item).clone, (*item).setStatus, (*item).getStatus, o.tg, nil, reconciler.WithName(name))
		return err
	}
	tg := newTarget()
	f := startFixture(t, tg, &with{register: byTheTest, setup: func(f *fixture) []reconciler.Option {
		params = f.params
		for _, name := range []string{"hook1", "hook2", "hook3", "after"} {
			table, err := statedb.NewTable(f.db, "items-"+name, itemID, f.index)
			require.NoError(t, err)
			others[name] = &other{table: table, tg: newTarget()}
		}
		return nil
	}, last: []cell.Cell{cell.Invoke(func(lc cell.Lifecycle) {
		lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return errors.Join(register("hook1"), register("hook2")) }})
		lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return register("hook3") }})
	})}})
	require.NoError(t, register("after"))
	f.upsert(&item{ID: "a", Value: "1"})
	require.NoError(t, f.register())
	f.waitApplied(tg, "a", "1")
	f.upsert(&item{ID: "b", Value: "1"})
	f.reconciledTo(f.remove("a"))
	f.caughtUp()
	assert.Equal(t, map[string]string{"b": "1"}, tg.State())
	for name, o := range others {
		wtxn := f.db.WriteTxn(o.table)
		_, _, err := o.table.Insert(wtxn, &item{ID: "a", Value: name, Status: status.Pending()})
		require.NoError(t, err)
		rev := o.table.Revision(wtxn)
		wtxn.Commit()
		_, _, err = o.rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
		require.NoError(t, err, name)
		assert.True(t, o.tg.has("a", name), name)
	}
}

// A start that fails in the hook that registers the reconciler leaves
// nothing running: Stop returns, goleak is clean. (A hook failing before
// the reconciler's: TestLeavesNothingBehindItsSynctestBubble.)
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	errHook := errors.New("start hook fails")
	var f *fixture
	f = newFixture(t, newTarget(), &with{register: byTheTest, last: []cell.Cell{cell.Invoke(func(lc cell.Lifecycle) {
		lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return errors.Join(f.register(), errHook) }})
	})}})
	require.ErrorIs(t, f.tryStart(), errHook)
	f.stop()
}

// collectGarbage collects what is unreachable and waits for the cleanups
// that queues to have run. Its own object is not a tiny one: the cleanup
// of a tiny object (16 bytes or less, without pointers) may never run, as
// it may share its memory with a live object.
func collectGarbage(t *testing.T) {
	t.Helper()
	for range 3 {
		done := make(chan struct{})
		runtime.AddCleanup(new([64]byte), func(ch chan struct{}) { close(ch) }, done)
		runtime.GC()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("cleanups did not run")
		}
	}
}
