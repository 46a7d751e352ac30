package reconciler_test

// When a reconciler starts: registered from a start hook or after the
// start, and inside a synctest bubble; and what Register refuses.
// (WithStartAfter: testdata/start_after*.txtar.) Then, below, stopping,
// starting again and pausing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"

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
	forVariants(t, variants, func(t *testing.T, v variant) {
		synctest.Test(t, func(t *testing.T) {
			tg := newTarget()
			var deps statedb.RWTable[*item]
			f := v.start(t, tg, withDeps(t, &deps, sameID), reconciler.WithRefreshing(time.Minute, nil),
				reconciler.WithPruning(10*time.Minute), reconciler.WithRetry(time.Second, 10*time.Second))
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
	// failsToStart populates a fixture with the cells set adds and checks
	// that Start fails, or does not start it if set is nil; then writes.
	failsToStart := func(set func(w *with)) run {
		return func(t *testing.T, w *with) *fixture {
			if set != nil {
				set(w)
			}
			f := newFixture(t, newTarget(), w, reconciler.WithConcurrency(4))
			if set != nil {
				require.ErrorIs(t, f.tryStart(), errHook)
			}
			f.upsert(items("k", 10, "1")...)
			f.remove("k-00001")
			return f
		}
	}
	for _, c := range []struct {
		name string
		run  run
	}{
		{"registered, never started", failsToStart(nil)},
		{"start fails before the database starts", failsToStart(func(w *with) { w.first = []cell.Cell{failing(false)} })},
		{"start fails after the database started", failsToStart(func(w *with) { w.first = []cell.Cell{failing(true)} })},
		{"start fails after the reconciler's jobs", failsToStart(func(w *with) { w.last = []cell.Cell{failing(false)} })},
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
				f := v.start(t, fo, nil, reconciler.WithRetry(time.Second, time.Minute),
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

// fakeGroup records jobs instead of running them, for Register called
// outside a hive.
type fakeGroup struct{ jobs []job.Job }

func (g *fakeGroup) Add(jobs ...job.Job)                { g.jobs = append(g.jobs, jobs...) }
func (g *fakeGroup) Scoped(name string) job.ScopedGroup { return g }

// Register refuses a missing argument, an option out of range or a limiter
// that never allows, with an error wrapping ErrInvalidConfig that says
// which, and never panics.
func TestRegisterRejectsBadInput(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	tgt := newTarget()

	type args struct {
		params    reconciler.Params
		table     statedb.RWTable[*item]
		clone     func(*item) *item
		setStatus func(*item, status.Status) *item
		getStatus func(*item) status.Status
		ops       reconciler.Operations[*item]
		opts      []reconciler.Option
	}
	good := func() args {
		return args{
			params:    reconciler.Params{Log: slog.Default(), DB: db, JobGroup: &fakeGroup{}},
			table:     table,
			clone:     (*item).clone,
			setStatus: (*item).setStatus,
			getStatus: (*item).getStatus,
			ops:       tgt,
		}
	}
	with := func(o ...reconciler.Option) func(*args) { return func(a *args) { a.opts = o } }
	inSet := func(o reconciler.Option) func(*args) {
		return func(a *args) {
			a.setStatus, a.getStatus, a.opts = nil, nil, []reconciler.Option{reconciler.WithName("a"), o}
		}
	}
	var noTable statedb.Table[*item]
	cases := []struct {
		name   string
		modify func(*args)
		want   string
	}{
		{"nil table", func(a *args) { a.table = nil }, "table must not be nil"},
		{"nil clone", func(a *args) { a.clone = nil }, "clone function must not be nil"},
		{"nil setStatus", func(a *args) { a.setStatus = nil }, "setStatus function must not be nil"},
		{"nil getStatus", func(a *args) { a.getStatus = nil }, "getStatus function must not be nil"},
		{"nil ops", func(a *args) { a.ops = nil }, "Operations must not be nil"},
		{"nil db", func(a *args) { a.params.DB = nil }, "Params.DB must not be nil"},
		{"nil job group", func(a *args) { a.params.JobGroup = nil }, "Params.JobGroup must not be nil"},
		{"nil option", with(nil), "nil Option"},
		{"zero round size", with(reconciler.WithRoundLimits(0, nil)), "round size must be positive"},
		{"negative round size", with(reconciler.WithRoundLimits(-1, rate.NewLimiter(1, 1))), "round size must be positive"},
		{"zero min backoff", with(reconciler.WithRetry(0, time.Second)), "minimum retry backoff must be positive"},
		{"max below min", with(reconciler.WithRetry(time.Second, time.Millisecond)), "below the minimum"},
		{"negative prune", with(reconciler.WithPruning(-time.Second)), "prune interval must not be negative"},
		{"negative refresh", with(reconciler.WithRefreshing(-time.Second, nil)), "refresh interval must not be negative"},
		{"jitter one", with(reconciler.WithRetryJitter(1)), "retry jitter must be in [0, 1)"},
		{"jitter negative", with(reconciler.WithRetryJitter(-0.1)), "retry jitter"},
		{"jitter NaN", with(reconciler.WithRetryJitter(math.NaN())), "retry jitter"},
		// A space would let two reconcilers' retry rows be one: RetryKey joins with one.
		{"name with a space", with(reconciler.WithName("x y")), "white space or a control character"},
		{"name with a tab", with(reconciler.WithName("x\ty")), "white space or a control character"},
		{"name with a newline", with(reconciler.WithName("x\ny")), "white space or a control character"},
		{"name with a NUL", with(reconciler.WithName("x\x00")), "white space or a control character"},
		{"negative max attempts", with(reconciler.WithMaxAttempts(-1)), "maximum attempts must not be negative"},
		{"negative breaker failures", with(reconciler.WithCircuitBreaker(-1, time.Second, nil)), "circuit breaker failures must not be negative"},
		{"zero breaker backoff", with(reconciler.WithCircuitBreaker(3, 0, nil)), "circuit breaker probe backoff must be positive"},
		{"zero workers", with(reconciler.WithConcurrency(0)), "concurrency must be in [1, 65536]"},
		{"too many workers", with(reconciler.WithConcurrency(1 << 20)), "concurrency must be in [1, 65536]"},
		{"negative timeout", with(reconciler.WithOperationTimeout(-1)), "operation timeout must not be negative"},
		{"dependency on itself", with(reconciler.WithDependency(table, sameID)), "cannot be a dependency of itself"},
		{"nil dependency table", with(reconciler.WithDependency(noTable, sameID)), "needs a table and a mapper"},
		{"nil priority", with(reconciler.WithPriority[*item](nil, 0.5)), "needs a priority function"},
		{"priority share negative", with(reconciler.WithPriority(priorityByPrefix, -0.1)), "priority share must be in [0, 1], got -0.1"},
		{"priority share above one", with(reconciler.WithPriority(priorityByPrefix, 1.5)), "priority share must be in [0, 1]"},
		{"priority share NaN", with(reconciler.WithPriority(priorityByPrefix, math.NaN())), "priority share must be in [0, 1], got NaN"},
		{"priority share +Inf", with(reconciler.WithPriority(priorityByPrefix, math.Inf(1))), "priority share must be in [0, 1]"},
		{"priority share -Inf", with(reconciler.WithPriority(priorityByPrefix, math.Inf(-1))), "priority share must be in [0, 1]"},
		{"priority of another type", with(reconciler.WithPriority(func(string) int { return 0 }, 0)), "not of the reconciled table's object type"},
		{"priority of the value type", with(reconciler.WithPriority(func(item) int { return 0 }, 0)), "not of the reconciled table's object type"},
		{"priority of any", with(reconciler.WithPriority(func(any) int { return 0 }, 0)), "not of the reconciled table's object type"},
		{"status set without a name", func(a *args) {
			a.setStatus, a.getStatus, a.opts = nil, nil, []reconciler.Option{reconciler.WithStatusSet(getSet, putSet)}
		}, "needs the name of WithName"},
		{"status set and setStatus", func(a *args) {
			a.getStatus = nil
			a.opts = []reconciler.Option{reconciler.WithName("a"), reconciler.WithStatusSet(getSet, putSet)}
		}, "setStatus and getStatus must be nil with WithStatusSet"},
		{"status set without get", inSet(reconciler.WithStatusSet(nil, putSet)), "needs both its get and set functions"},
		{"status set without set", inSet(reconciler.WithStatusSet(getSet, nil)), "needs both its get and set functions"},
		{"status set of another type", inSet(reconciler.WithStatusSet(func(string) status.Set { return status.Set{} },
			func(s string, _ status.Set) string { return s })), "not of the reconciled table's object type"},
		// A limiter whose Wait can never succeed would stop the loop for good.
		{"round burst 0", with(reconciler.WithRoundLimits(10, rate.NewLimiter(100, 0))), "limiter"},
		{"round limit 0", with(reconciler.WithRoundLimits(10, rate.NewLimiter(0, 5))), "limiter"},
		{"refresh burst 0", with(reconciler.WithRefreshing(time.Minute, rate.NewLimiter(100, 0))), "limiter"},
		{"refresh limit 0", with(reconciler.WithRefreshing(time.Minute, rate.NewLimiter(0, 5))), "limiter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := good()
			tc.modify(&a)
			var r reconciler.Reconciler[*item]
			require.NotPanics(t, func() {
				r, err = reconciler.Register(a.params, a.table, a.clone, a.setStatus, a.getStatus, a.ops, nil, a.opts...)
			})
			require.Error(t, err)
			assert.Nil(t, r)
			assert.True(t, errors.Is(err, reconciler.ErrInvalidConfig), "error %q should wrap ErrInvalidConfig", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("all nil reports every problem", func(t *testing.T) {
		_, err := reconciler.Register[*item](reconciler.Params{}, nil, nil, nil, nil, nil, nil)
		require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		for _, want := range []string{"Params.DB", "table", "clone", "setStatus", "getStatus", "Operations"} {
			assert.Contains(t, err.Error(), want)
		}
	})

	t.Run("valid input registers jobs", func(t *testing.T) {
		a := good()
		g := &fakeGroup{}
		a.params.JobGroup = g
		r, err := reconciler.Register(a.params, a.table, a.clone, a.setStatus, a.getStatus, a.ops, nil,
			reconciler.WithName("x"), reconciler.WithRefreshing(time.Minute, nil),
			reconciler.WithRoundLimits(10, rate.NewLimiter(rate.Inf, 0))) // an infinite limit needs no burst
		require.NoError(t, err)
		require.NotNil(t, r)
		assert.Len(t, g.jobs, 2, "reconcile and refresh jobs")
	})

	t.Run("a status set in place of setStatus and getStatus", func(t *testing.T) {
		a := good()
		r, err := reconciler.Register(a.params, a.table, a.clone, nil, nil, a.ops, nil,
			reconciler.WithStatusSet(getSet, putSet), reconciler.WithName("a"))
		require.NoError(t, err, "WithName may come after")
		require.NotNil(t, r)
	})

	t.Run("priority shares at the edges", func(t *testing.T) {
		for _, share := range []float64{0, math.Copysign(0, -1), 1, math.SmallestNonzeroFloat64} {
			a := good()
			r, err := reconciler.Register(a.params, a.table, a.clone, a.setStatus, a.getStatus, a.ops, nil,
				reconciler.WithPriority(priorityByPrefix, share))
			require.NoError(t, err, "share %v", share)
			require.NotNil(t, r)
		}
	})
}

// Stopping and starting, and pausing: work carried over a stop,
// operations in flight at a stop, and Pause from inside a round. (Deletes while stopped or before the first start:
// testdata/stopped_deletes*.txtar; stops with work in flight:
// testdata/stop_start*.txtar and testdata/putback*.txtar.)
//
// Stopping a hive and starting the same hive again (as the "hive stop" and
// "hive start" script commands do) restarts the reconciler's job; work cut
// short by the stop is carried over (superseded by a change read after the
// start: testdata/carried_refresh.txtar).

// WaitUntilReconciled counts work carried over a stop: a wait for a
// revision does not return while work cut short below it is not done.
// Found by the second review (bug 8).
func TestWaitCountsWorkCarriedOverAStop(t *testing.T) {
	tg := newTarget()
	cut := tg.hold("a")
	f := startFixture(t, tg, nil, reconciler.WithRoundLimits(1, nil))
	revA := f.upsert(&item{ID: "a"})
	cut.wait(t)
	again := tg.hold("a") // after the start: held until the test has checked
	f.stop()              // cuts a's update short
	revB := f.upsert(&item{ID: "b"})
	f.start()
	again.wait(t)

	reached, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 200*time.Millisecond), revA)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "returned %d for a's revision %d (b's is %d) while a's update is held", reached, revA, revB)
	again.let()
	f.reconciledTo(revA)
	obj, _ := f.get("a")
	require.Equal(t, status.KindDone, obj.Status.Kind)
}

// Stopping the hive: operations in flight see their context cancelled, and
// nothing starts afterwards.

// TestShutdownUnderLoad stops the hive while thousands of objects are queued
// for retry and every worker is blocked in an operation (holding a batch of
// hundreds with BatchOperations), with more work queued behind them and,
// with several workers, a prune in flight on the reconciler's loop. Stop
// must return promptly; every blocked operation must have seen its context
// cancelled and returned before Stop returned; no operation may start once
// stopping; and no goroutine may be left behind.
func TestShutdownUnderLoad(t *testing.T) {
	const objects = 3000
	for _, v := range []variant{{1, false}, {1, true}, {8, false}, {8, true}} {
		workers, batch := v.workers, v.batch
		t.Run(v.String(), func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			tg := newTarget()
			fo := reconcilertest.NewFaultyOps(itemKey, tg, tg)
			require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError}))
			// Retries an hour away: no wave of them comes due in phase 2,
			// to be taken in small batches before the new objects.
			f := v.start(t, fo, nil, reconciler.WithRetry(time.Hour, time.Hour))

			// Phase 1: every object fails once and is queued for retry.
			f.upsert(items("a", objects, "")...)
			f.waitTable("every object in Error", func(txn statedb.ReadTxn) bool { return f.countKind(txn, status.KindError) == objects })

			// Phase 2: every operation blocks until its context ends. New
			// objects and deletes are written while paused, so that the
			// workers share them out in full rounds.
			f.rec.Pause()
			fo.Clear("")
			require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay}))
			f.upsert(items("b", objects, "")...)
			var gone []string
			for i := 0; i < objects; i += 3 {
				gone = append(gone, fmt.Sprintf("a%05d", i))
			}
			f.remove(gone...)
			f.rec.Resume()
			waitBlocked(t, fo, workers, false)
			if workers > 1 {
				f.rec.Prune() // the loop prunes while the workers are busy
				waitBlocked(t, fo, workers, true)
			}

			// Every caller is blocked: nothing starts but the entries of
			// the batches in flight.
			inFlight := fo.InFlight()
			before := len(fo.Calls())
			batches, singles := map[int]bool{}, map[string]bool{}
			for _, c := range inFlight {
				batches[c.Batch] = c.Batch > 0
				singles[callID(c)] = c.Batch == 0
			}
			calls, _ := blocked(inFlight)
			t.Logf("stopping with %d call(s) blocked, %d objects in Error", calls, f.countKind(f.db.ReadTxn(), status.KindError))
			start := time.Now()
			f.stop()
			assert.Less(t, time.Since(start), 5*time.Second, "Stop must return promptly")
			assert.Empty(t, fo.InFlight(), "operations still running after Stop returned")

			// Once no goroutine of the hive is left, nothing can start an
			// operation any more: every call since the stop began is one
			// that was blocked, and it saw its context cancelled.
			goleak.VerifyNone(t, ignore)
			objs := 0
			for _, c := range fo.Calls()[before:] {
				objs++
				assert.True(t, batches[c.Batch] || singles[callID(c)], "%s started once the hive was stopping", c)
				assert.ErrorIs(t, c.Err, context.Canceled, "every blocked operation sees context.Canceled: %s", c)
			}
			if batch {
				assert.Greater(t, objs, 10*workers, "workers should hold large batches")
			}
		})
	}
}

// blocked counts the operation calls among calls in flight, a batch as
// one, and whether a prune is among them.
func blocked(calls []reconcilertest.Call) (n int, prune bool) {
	batches := map[int]bool{}
	for _, c := range calls {
		switch {
		case c.Op == reconcilertest.OpPrune:
			prune = true
		case c.Batch > 0:
			batches[c.Batch] = true
		default:
			n++
		}
	}
	return n + len(batches), prune
}

// callID identifies a call in flight and, once returned, in the log.
func callID(c reconcilertest.Call) string { return fmt.Sprint(c.Op, c.Key, c.Revision) }

// waitBlocked waits until n operation calls, and a prune if asked for, are
// in flight.
func waitBlocked(t *testing.T, fo *reconcilertest.FaultyOps[*item], n int, prune bool) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d operations (prune: %v) blocked", n, prune), func() (bool, <-chan struct{}) {
		inFlight, changed := fo.InFlightWatch()
		got, pruning := blocked(inFlight)
		return got >= n && (pruning || !prune), changed
	})
}

// Pause from inside a round. (Pause and Resume with every kind of change:
// testdata/pause.txtar; parked and queued work: testdata/pause_parked.txtar.)

// Pause called while a round runs (here by an update of that round) stops
// the rest of the round from starting. Found by the second review.
func TestPauseStopsTheRestOfTheRound(t *testing.T) {
	tg := newTarget()
	started := make(chan string, 10)
	var rec reconciler.Reconciler[*item]
	tg.update = func(_ context.Context, it *item) error {
		started <- it.ID
		if it.ID == "a" {
			rec.Pause()
		}
		return nil
	}
	f := startFixture(t, tg, nil)
	rec = f.rec
	f.upsert(&item{ID: "a"}, &item{ID: "b"}, &item{ID: "c"})
	assert.Equal(t, "a", recv(t, started, "the first update"))
	select { // what must not happen gets a chance to; a slow machine proves less
	case id := <-started:
		t.Errorf("%s started after Pause", id)
	case <-time.After(100 * time.Millisecond):
	}
	f.rec.Resume()
	f.waitReconciled()
	for _, id := range []string{"a", "b", "c"} {
		obj, _ := f.get(id)
		assert.Equal(t, status.KindDone, obj.Status.Kind, id)
	}
}

// A prune already due in a round during which Pause is called (here from
// an Update of that round) waits for Resume: Pause holds off prunes as it
// holds off operations. The prune and the change are made ready together,
// and the loop takes one of them first at random, so the test repeats.
func TestPauseHoldsOffAPruneDueInTheRound(t *testing.T) {
	tg := newTarget()
	var paused atomic.Bool
	var bad atomic.Int32
	var rec reconciler.Reconciler[*item]
	tg.update = func(_ context.Context, it *item) error {
		if it.Value == "pause" {
			rec.Pause()
			paused.Store(true)
		}
		return nil
	}
	tg.prune = func(context.Context) error {
		if paused.Load() {
			bad.Add(1)
		}
		return nil
	}
	f := startFixture(t, tg, nil, reconciler.WithPruning(0))
	rec = f.rec
	const rounds = 12
	for i := range rounds {
		tg.mu.Lock()
		prunes := tg.returned
		tg.mu.Unlock()
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		held := tg.hold(a)
		f.upsert(&item{ID: a})
		held.wait(t)
		f.rec.Prune() // waits in its channel while the loop is in the update
		f.upsert(&item{ID: b, Value: "pause"})
		held.let()
		f.waitKind(b, status.KindDone)
		paused.Store(false)
		f.rec.Resume()
		tg.waitPrunes(t, prunes+1) // the prune, after Resume
	}
	assert.Zero(t, bad.Load(), "prunes that ran after Pause returned, in %d rounds", rounds)
}
