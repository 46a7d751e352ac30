package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// driftChecker is a drift check over a test target: in sync when the
// target holds the object's value, failing for the keys given to fail. It
// counts its calls per key. Safe for concurrent use.
type driftChecker struct {
	tg *target

	mu     sync.Mutex
	fail   map[string]error
	checks map[string]int
}

func newDriftChecker(tg *target) *driftChecker {
	return &driftChecker{tg: tg, fail: map[string]error{}, checks: map[string]int{}}
}

func (d *driftChecker) check(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
	d.mu.Lock()
	d.checks[it.ID]++
	err := d.fail[it.ID]
	d.mu.Unlock()
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return d.tg.has(it.ID, it.Value), nil
}

func (d *driftChecker) setFail(key string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.fail, key)
	} else {
		d.fail[key] = err
	}
}

func (d *driftChecker) count(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checks[key]
}

// markRefreshing writes the objects ids again with a fresh Refreshing
// status, as the refresh sweep marks them, and waits until they are
// reconciled.
func (f *fixture) markRefreshing(ids ...string) {
	f.t.Helper()
	f.refreshing(ids...)
	f.caughtUp()
}

// refreshing is markRefreshing without the wait.
func (f *fixture) refreshing(ids ...string) {
	f.t.Helper()
	objs := make([]*item, len(ids))
	for i, id := range ids {
		obj, found := f.get(id)
		require.True(f.t, found, id)
		objs[i] = obj.clone()
		objs[i].Status = status.Refreshing()
	}
	f.insertAs(objs...)
}

// retryRow returns the row of key in the retries table, if any.
func (f *fixture) retryRow(key string) (*tables.RetryInfo, bool) {
	row, _, found := f.tables.Retries().Get(f.db.ReadTxn(), tables.RetryByKey.Query(tables.RetryKey("test", key)))
	return row, found
}

// waitRetryRow waits until the retries table's row of key satisfies cond
// (nil: until it has none).
func (f *fixture) waitRetryRow(key string, cond func(*tables.RetryInfo) bool) {
	f.t.Helper()
	waitUntil(f.t, "the retries row of "+key, func() (bool, <-chan struct{}) {
		txn := f.db.ReadTxn()
		_, watch := f.tables.Retries().AllWatch(txn)
		row, _, found := f.tables.Retries().Get(txn, tables.RetryByKey.Query(tables.RetryKey("test", key)))
		if cond == nil {
			return !found, watch
		}
		return found && cond(row), watch
	})
}

// A refresh with the check rewrites only what drifted: the objects in sync
// are written Done without an Update, the drifted one is repaired and the
// repair counted; Pending objects are never checked.
func TestDriftCheckRepairsOnlyDrifted(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		tg := newTarget()
		d := newDriftChecker(tg)
		f := v.start(t, tg, &with{tables: true}, reconciler.WithDriftCheck(d.check))
		f.upsert(kititems("1", "a", "b", "c")...)
		f.caughtUp()
		assert.Zero(t, d.count("a"), "a Pending object is not checked")

		f.markRefreshing("a", "b", "c")
		for _, key := range []string{"a", "b", "c"} {
			all, _ := count(tg, reconcilertest.OpUpdate, key)
			assert.Equal(t, 1, all, "in sync, %s is not rewritten", key)
			assert.Equal(t, 1, d.count(key))
			obj, _ := f.get(key)
			assert.Equal(t, status.KindDone, obj.Status.Kind)
		}

		tg.Set("b", "drifted")
		f.markRefreshing("a", "b", "c")
		all, _ := count(tg, reconcilertest.OpUpdate, "b")
		assert.Equal(t, 2, all, "the drifted b is repaired")
		assert.True(t, tg.has("b", "1"))
		for _, key := range []string{"a", "c"} {
			all, _ := count(tg, reconcilertest.OpUpdate, key)
			assert.Equal(t, 1, all, "%s in sync", key)
		}
		info := f.waitInfo("the repair counted", func(i *tables.Info) bool { return i.DriftRepaired == 1 })
		assert.Zero(t, info.DriftDetected, "repaired, not left")
	})
}

// Report-only: a drifted object is written Done without an Update, counted
// as detected and shown in the retries table until it is found in sync,
// changes or is deleted.
func TestDriftReportOnly(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		tg := newTarget()
		d := newDriftChecker(tg)
		f := v.start(t, tg, &with{tables: true}, reconciler.WithDriftReportOnly(), reconciler.WithDriftCheck(d.check))
		f.upsert(kititems("1", "a", "b")...)
		f.caughtUp()

		tg.Set("b", "drifted")
		f.markRefreshing("a", "b")
		all, _ := count(tg, reconcilertest.OpUpdate, "b")
		assert.Equal(t, 1, all, "report-only: no repair")
		assert.True(t, tg.has("b", "drifted"), "the drift is left")
		obj, _ := f.get("b")
		assert.Equal(t, status.KindDone, obj.Status.Kind)
		f.waitRetryRow("b", func(r *tables.RetryInfo) bool { return r.Drifted && r.Attempts == 0 })
		_, found := f.retryRow("a")
		assert.False(t, found, "a is in sync")
		info := f.waitInfo("the drift counted", func(i *tables.Info) bool { return i.DriftDetected == 1 })
		assert.Zero(t, info.DriftRepaired)
		assert.Zero(t, info.Retrying, "a drifted object is not failing")

		// Found in sync again: the row goes.
		tg.Set("b", "1")
		f.markRefreshing("b")
		f.waitRetryRow("b", nil)

		// Drifted again, then changed: the row goes with the new version's update.
		tg.Set("b", "drifted")
		f.markRefreshing("b")
		f.waitRetryRow("b", func(r *tables.RetryInfo) bool { return r.Drifted })
		f.upsert(kititems("2", "b")...)
		f.caughtUp()
		f.waitRetryRow("b", nil)
		assert.True(t, tg.has("b", "2"))

		// Drifted again, then deleted: the row goes.
		tg.Set("a", "drifted")
		f.markRefreshing("a")
		f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return r.Drifted })
		f.remove("a")
		f.caughtUp()
		f.waitRetryRow("a", nil)
		f.waitInfo("both drifts counted", func(i *tables.Info) bool { return i.DriftDetected == 3 })
	})
}

// A failing check is the object's failure: Error, retried with backoff,
// and each retry checks again; in report-only mode it never becomes an
// Update. Once the check succeeds the object is Done.
func TestDriftCheckErrorRetried(t *testing.T) {
	for _, reportOnly := range []bool{false, true} {
		forVariants(t, variants, func(t *testing.T, v variant) {
			tg := newTarget()
			d := newDriftChecker(tg)
			opts := []reconciler.Option{reconciler.WithDriftCheck(d.check), reconciler.WithRetry(minBackoff, minBackoff)}
			if reportOnly {
				opts = append(opts, reconciler.WithDriftReportOnly())
			}
			f := v.start(t, tg, &with{tables: true}, opts...)
			f.upsert(kititems("1", "a")...)
			f.caughtUp()

			errCheck := errors.New("cannot read the target")
			d.setFail("a", errCheck)
			obj, _ := f.get("a")
			obj = obj.clone()
			obj.Status = status.Refreshing()
			f.insertAs(obj)
			f.waitKind("a", status.KindError)
			f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return r.Attempts >= 2 && r.LastError == errCheck.Error() })
			assert.GreaterOrEqual(t, d.count("a"), 2, "each retry checks again")
			all, _ := count(tg, reconcilertest.OpUpdate, "a")
			assert.Equal(t, 1, all, "a check error makes no Update")

			tg.Set("a", "drifted")
			d.setFail("a", nil)
			f.waitKind("a", status.KindDone)
			f.caughtUp()
			all, _ = count(tg, reconcilertest.OpUpdate, "a")
			if reportOnly {
				assert.Equal(t, 1, all, "the retry checked and left the drift")
				f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return r.Drifted && r.Attempts == 0 })
			} else {
				assert.Equal(t, 2, all, "the retry checked and repaired")
				assert.True(t, tg.has("a", "1"))
				f.waitRetryRow("a", nil)
			}
		})
	}
}

// minBackoff keeps the retries of these tests quick.
const minBackoff = 5 * time.Millisecond

// A panicking check is recovered as the object's error.
func TestDriftCheckPanic(t *testing.T) {
	tg := newTarget()
	var once sync.Once
	check := func(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) (bool, error) {
		once.Do(func() { panic("check broke") })
		return tg.has(it.ID, it.Value), nil
	}
	f := variant{1, false}.start(t, tg, nil, reconciler.WithDriftCheck(check), reconciler.WithRetry(minBackoff, minBackoff))
	f.upsert(kititems("1", "a")...)
	f.caughtUp()
	f.markRefreshing("a")
	all, _ := count(tg, reconcilertest.OpUpdate, "a")
	assert.Equal(t, 1, all, "the panic was retried as a check, found in sync")
}

// Register refuses a report-only mode without a check, a nil check and
// one of another object type.
func TestDriftCheckInvalid(t *testing.T) {
	for name, opts := range map[string][]reconciler.Option{
		"report-only alone": {reconciler.WithDriftReportOnly()},
		"nil check":         {reconciler.WithDriftCheck[*item](nil)},
		"other type": {reconciler.WithDriftCheck(func(context.Context, statedb.ReadTxn, statedb.Revision, string) (bool, error) {
			return true, nil
		})},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, newTarget(), &with{register: byTheTest}, opts...)
			err := f.register()
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
		})
	}
}

// Report-only: an Error object marked Refreshing, put back so or by a
// dependency, is repaired all the same: its version never reached the
// target, so the check finds it drifted.
func TestDriftReportOnlyRepairsAnErrorObject(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		for _, byDep := range []bool{false, true} {
			t.Run(fmt.Sprintf("terminal=%v,dependency=%v", terminal, byDep), func(t *testing.T) {
				tg := newTarget()
				var errUpdate error = errKitObject
				if terminal {
					errUpdate = reconciler.TerminalError(errKitObject)
				}
				tg.failWhen(errUpdate, func(op reconcilertest.Op, _ *item) bool { return op == reconcilertest.OpUpdate })
				var deps statedb.RWTable[*item]
				w := withDeps(t, &deps, sameID)
				f := startFixture(t, tg, w, reconciler.WithDriftCheck(newDriftChecker(tg).check), reconciler.WithDriftReportOnly(),
					reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
				f.put("a", "1")
				f.waitKind("a", status.KindError)
				tg.recover()
				if byDep {
					writeDeps(t, f, deps, false, &item{ID: "a"})
				} else {
					f.refreshing("a")
				}
				f.waitKind("a", status.KindDone)
				assert.True(t, tg.has("a", "1"), "an Error object marked Refreshing is repaired")
			})
		}
	}
}

// Report-only: an object that failed, deleted, then put back with that
// Error and marked by a dependency before the reconciler reads the
// put-back (it was paused): its version never reached the target, so it is
// repaired, not left Done. The mark was Refreshing, which the check found
// drifted and left (chaos: 1-batch seed 1 under load, a poison value
// Done); it is Pending, as sets.Table.Refresh marks an Error object.
func TestDriftReportOnlyRepairsAFailedObjectPutBackAndMarked(t *testing.T) {
	tg := newTarget()
	tg.failWhen(errKitObject, func(op reconcilertest.Op, _ *item) bool { return op == reconcilertest.OpUpdate })
	var deps statedb.RWTable[*item]
	w := withDeps(t, &deps, sameID)
	f := startFixture(t, tg, w, reconciler.WithDriftCheck(newDriftChecker(tg).check), reconciler.WithDriftReportOnly(),
		reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
	f.put("a", "1")
	saved := f.waitKind("a", status.KindError).clone()
	tg.recover()
	f.remove("a")
	f.caughtUp()
	f.rec.Pause()
	f.insertAs(saved)
	writeDeps(t, f, deps, false, &item{ID: "a"})
	f.waitKind("a", status.KindPending) // the mark, before the reconciler reads the put-back
	f.rec.Resume()
	f.waitKind("a", status.KindDone)
	assert.True(t, tg.has("a", "1"), "a failed object put back and marked Refreshing is repaired")
}

// A check in flight while its object changes or is deleted: its verdict
// is not recorded over the newer version, and the newer version, or the
// delete, is applied.
func TestDriftCheckInFlightWhileTheObjectChanges(t *testing.T) {
	for _, workers := range []int{1, 3} {
		for _, act := range []string{"update", "delete", "delete-reinsert"} {
			t.Run(fmt.Sprintf("%s,workers=%d", act, workers), func(t *testing.T) {
				tg := newTarget()
				entered, release := make(chan struct{}, 1), make(chan struct{})
				var block atomic.Bool
				check := func(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
					if block.Load() {
						entered <- struct{}{}
						select {
						case <-release:
						case <-ctx.Done():
							return false, ctx.Err()
						}
					}
					return true, nil
				}
				f := variant{workers, false}.start(t, tg, nil, reconciler.WithDriftCheck(check), reconciler.WithRetry(minBackoff, minBackoff))
				f.put("a", "1")
				f.waitKind("a", status.KindDone)
				block.Store(true)
				f.refreshing("a")
				recv(t, entered, "the check")
				block.Store(false)
				want := map[string]string{}
				switch act {
				case "update":
					f.put("a", "2")
					want["a"] = "2"
				case "delete":
					f.remove("a")
				case "delete-reinsert":
					f.remove("a")
					f.put("a", "3")
					want["a"] = "3"
				}
				close(release)
				f.caughtUp()
				f.eventually("the target as the table", func() bool { return maps.Equal(want, tg.State()) })
			})
		}
	}
}

// A check held on its ctx when the hive stops is ended by the stop; after
// the next start the Refreshing object is checked again, not rewritten.
func TestDriftCheckInFlightAtAStopIsCheckedAgain(t *testing.T) {
	tg := newTarget()
	entered := make(chan struct{}, 1)
	var block atomic.Bool
	var calls atomic.Int32
	check := func(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
		calls.Add(1)
		if block.Load() {
			entered <- struct{}{}
			<-ctx.Done()
			return false, ctx.Err()
		}
		return true, nil
	}
	f := variant{1, false}.start(t, tg, nil, reconciler.WithDriftCheck(check), reconciler.WithRetry(minBackoff, minBackoff))
	f.put("a", "1")
	f.waitKind("a", status.KindDone)
	block.Store(true)
	f.refreshing("a")
	recv(t, entered, "the check")
	f.stop()
	block.Store(false)
	f.start()
	f.caughtUp()
	f.waitKind("a", status.KindDone)
	assert.Equal(t, []string{"1"}, tg.updates("a"))
	assert.GreaterOrEqual(t, calls.Load(), int32(2))
}

// Check errors are failures as Update's are: they count towards
// WithMaxAttempts and open the circuit breaker.
func TestDriftCheckErrorsAreFailures(t *testing.T) {
	t.Run("max attempts", func(t *testing.T) {
		tg := newTarget()
		d := newDriftChecker(tg)
		f := variant{1, false}.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(time.Millisecond, time.Millisecond),
			reconciler.WithMaxAttempts(3))
		f.put("a", "1")
		f.waitKind("a", status.KindDone)
		d.setFail("a", errors.New("check broke"))
		f.refreshing("a")
		f.waitTable("a terminal", func(txn statedb.ReadTxn) bool {
			obj, _, _ := f.table.Get(txn, itemID.Query("a"))
			return obj.Status.Kind == status.KindError && obj.Status.Terminal
		})
		assert.Equal(t, 3, d.count("a"))
		obj, _ := f.get("a")
		assert.Contains(t, obj.Status.Error, "gave up after 3 attempts")
		assert.Equal(t, []string{"1"}, tg.updates("a"))
	})
	// In a batch, the checks after the breaker opened find the gate
	// closed: their objects go back to the queue.
	forVariants(t, []variant{{1, false}, {1, true}, {4, true}}, func(t *testing.T, v variant) {
		tg := newTarget()
		d := newDriftChecker(tg)
		f := v.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
			reconciler.WithCircuitBreaker(3, time.Millisecond, nil))
		objs := items("k", 20, "1")
		f.upsert(objs...)
		f.caughtUp()
		for _, id := range ids(objs) {
			d.setFail(id, errKitDown)
		}
		f.refreshing(ids(objs)...)
		f.waitHealth(func(_ cell.Level, msg string) bool { return strings.Contains(msg, "target failing") })
		for _, id := range ids(objs) {
			d.setFail(id, nil)
		}
		f.caughtUp()
	})
}

// An Update asking for a re-check, with a drift check: the re-check is
// checked, not rewritten while in sync.
func TestDriftCheckOfARecheck(t *testing.T) {
	tg := newTarget()
	tg.setAfter(func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, time.Millisecond) })
	d := newDriftChecker(tg)
	f := variant{1, false}.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(minBackoff, minBackoff))
	f.put("a", "1")
	f.eventually("re-checked", func() bool { return d.count("a") >= 1 })
	f.waitKind("a", status.KindDone)
	assert.Equal(t, []string{"1"}, tg.updates("a"))
}

// Report-only: an object put back Refreshing after its delete is reported
// drifted, not applied again.
func TestDriftReportOnlyPutBackAfterDeleteIsReported(t *testing.T) {
	tg := newTarget()
	f := variant{1, false}.start(t, tg, &with{tables: true}, reconciler.WithDriftCheck(newDriftChecker(tg).check), reconciler.WithDriftReportOnly())
	f.put("a", "1")
	saved := f.waitKind("a", status.KindDone)
	f.remove("a")
	f.caughtUp()
	assert.Empty(t, tg.State())
	saved = saved.clone()
	saved.Status = status.Refreshing()
	f.insertAs(saved)
	f.caughtUp()
	f.waitKind("a", status.KindDone)
	f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return r.Drifted })
	assert.Equal(t, []string{"1"}, tg.updates("a"))
	assert.Empty(t, tg.State())
}

// Refresh sweeps with a drift check, workers and batches, while objects
// change and are deleted and the target drifts: once quiet, the sweeps
// repair every drift and the target holds every object of the table.
func TestDriftSweepsRepairUnderChurn(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			tg := newTarget()
			d := newDriftChecker(tg)
			f := variant{4, batch}.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
				reconciler.WithRefreshing(2*time.Millisecond, nil), reconciler.WithRoundLimits(7, nil))
			for round := range 30 {
				for i := range 30 {
					k := fmt.Sprint("k", i)
					switch (i + round) % 5 {
					case 0:
						f.remove(k)
					case 1:
						tg.Set(k, "drift")
					default:
						f.put(k, fmt.Sprint(round))
					}
				}
			}
			f.reconciledTo(f.table.Revision(f.db.ReadTxn()))
			f.eventually("the sweeps repaired every drift", func() bool {
				for obj := range f.table.All(f.db.ReadTxn()) {
					if !tg.has(obj.ID, obj.Value) {
						return false
					}
				}
				return true
			})
			for i := range 30 {
				k := fmt.Sprint("k", i)
				if _, found := f.get(k); !found {
					assert.False(t, tg.has(k, "29"), "%s deleted, yet applied", k)
				}
			}
		})
	}
}
