package reconciler_test

// WithDriftCheck and WithDriftReportOnly. (A refresh checks each object
// before it rewrites it, repairs only the drifted and counts it, a failing
// check is retried as a check; report-only rows and counts, ending on
// sync, change and delete: testdata/drift_check.txtar and
// testdata/drift_report_only.txtar, in every variant; the counts:
// internal/drift; refresh sweeps repairing drift under churn: TestChaos's
// drift modes, chaos_drift_test.go; Register's refusals:
// TestRegisterRejectsBadInput.)

import (
	"context"
	"fmt"
	"maps"
	"strings"
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

// setFail makes the checks of keys fail (with errCheckFault), or not.
func (d *scriptDrift) setFail(fail bool, keys ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		d.fail[k] = fail
	}
}

func (d *scriptDrift) count(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checks[key]
}

// refreshing writes the objects ids again with a fresh Refreshing
// status, as the refresh sweep marks them.
func (f *fixture) refreshing(ids ...string) {
	f.t.Helper()
	objs := make([]*item, len(ids))
	for i, id := range ids {
		obj, found := f.get(id)
		require.True(f.t, found, id)
		objs[i] = obj.clone().setStatus(status.Refreshing())
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

// minBackoff keeps the retries of these tests quick.
const minBackoff = 5 * time.Millisecond

// A check that panics or fails is the object's failure: Error, retried
// with backoff, each retry checking again and none an Update; once the
// check succeeds, the retry repairs the drift it finds.
func TestDriftCheckErrorRetried(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		tg := newTarget()
		d := newScriptDrift(tg.Target)
		var panics atomic.Bool
		check := func(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) (bool, error) {
			if panics.Load() {
				panic("check broke")
			}
			return d.check(ctx, txn, rev, it)
		}
		f := v.start(t, tg, &with{tables: true}, reconciler.WithDriftCheck(check), reconciler.WithRetry(minBackoff, minBackoff))
		f.put("a", "1")
		f.caughtUp()
		panics.Store(true)
		f.refreshing("a")
		f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return strings.Contains(r.LastError, reconciler.ErrPanic.Error()) })
		d.setFail(true, "a")
		panics.Store(false)
		// A retry due before panics went off panics again: wait for two
		// checks that failed, however many attempts that takes.
		f.waitRetryRow("a", func(r *tables.RetryInfo) bool {
			return r.Attempts >= 3 && strings.Contains(r.LastError, errCheckFault.Error()) && d.count("a") >= 2
		})
		f.waitKind("a", status.KindError)
		assert.GreaterOrEqual(t, d.count("a"), 2, "each retry checks again")
		assert.Equal(t, []string{"1"}, tg.updates("a"), "a check error makes no Update")
		tg.Set("a", "drifted")
		d.setFail(false, "a")
		f.waitKind("a", status.KindDone)
		f.caughtUp()
		assert.Equal(t, []string{"1", "1"}, tg.updates("a"), "the retry checked and repaired")
		assert.True(t, tg.has("a", "1"))
		f.waitRetryRow("a", nil)
	})
}

// Check errors are failures as Update's are: they count towards
// WithMaxAttempts and open the circuit breaker. In a batch, the checks
// after the breaker opened find the gate closed: their objects go back to
// the queue.
func TestDriftCheckErrorsAreFailures(t *testing.T) {
	t.Run("max attempts", func(t *testing.T) {
		tg := newTarget()
		d := newScriptDrift(tg.Target)
		f := variant{1, false}.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(time.Millisecond, time.Millisecond),
			reconciler.WithMaxAttempts(3))
		f.put("a", "1")
		f.waitKind("a", status.KindDone)
		d.setFail(true, "a")
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
	forVariants(t, []variant{{1, false}, {1, true}, {4, true}}, func(t *testing.T, v variant) {
		tg := newTarget()
		d := newScriptDrift(tg.Target)
		f := v.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
			reconciler.WithCircuitBreaker(3, time.Millisecond, nil))
		keys := ids(items("k", 20, "1"))
		f.upsert(items("k", 20, "1")...)
		f.caughtUp()
		d.setFail(true, keys...)
		f.refreshing(keys...)
		f.waitHealth(func(_ cell.Level, msg string) bool { return strings.Contains(msg, "target failing") })
		d.setFail(false, keys...)
		f.caughtUp()
	})
}

// failingReportOnly starts a report-only reconciler, with a dependency and
// the reconcilers table, over a target whose updates fail with err (nil:
// never) until it recovers, and writes a=1.
func failingReportOnly(t *testing.T, err error) (*fixture, *target, statedb.RWTable[*item]) {
	tg := newTarget().failWhen(err, func(op reconcilertest.Op, _ *item) bool { return op == reconcilertest.OpUpdate })
	var deps statedb.RWTable[*item]
	w := withDeps(t, &deps, sameID)
	w.tables = true
	f := startFixture(t, tg, w, reconciler.WithDriftCheck(newScriptDrift(tg.Target).check), reconciler.WithDriftReportOnly(),
		reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
	f.put("a", "1")
	return f, tg, deps
}

// Report-only: a failed object, whose version never reached the target,
// is repaired once marked, not found drifted and left Done: an Error
// object (terminal or not) marked Refreshing or by a dependency; and one
// deleted, then put back with that Error and marked by a dependency before
// the reconciler reads the put-back (it was paused). That mark was
// Refreshing, which the check found drifted and left (chaos: 1-batch seed
// 1 under load, a poison value Done); it is Pending, as sets.Table.Refresh
// marks an Error object (fixed in b080606).
func TestDriftReportOnlyRepairsAFailedObjectPutBackAndMarked(t *testing.T) {
	for _, c := range []struct {
		name                     string
		terminal, byDep, putBack bool
	}{
		{"marked Refreshing", false, false, false},
		{"terminal, marked Refreshing", true, false, false},
		{"marked by a dependency", false, true, false},
		{"terminal, marked by a dependency", true, true, false},
		{"deleted, put back and marked while paused", false, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := error(errKitObject)
			if c.terminal {
				err = reconciler.TerminalError(errKitObject)
			}
			f, tg, deps := failingReportOnly(t, err)
			saved := f.waitKind("a", status.KindError).clone()
			tg.recover()
			if c.putBack {
				f.remove("a")
				f.caughtUp()
				f.rec.Pause()
				f.insertAs(saved)
			}
			if c.byDep {
				writeDeps(t, f, deps, false, &item{ID: "a"})
			} else {
				f.refreshing("a")
			}
			if c.putBack {
				f.waitKind("a", status.KindPending) // the mark, before the reconciler reads the put-back
				f.rec.Resume()
			}
			f.waitKind("a", status.KindDone)
			assert.True(t, tg.has("a", "1"), "a failed object marked is repaired")
		})
	}
}

// Report-only: an object put back Refreshing after its delete is reported
// drifted, not applied again.
func TestDriftReportOnlyPutBackAfterDeleteIsReported(t *testing.T) {
	f, tg, _ := failingReportOnly(t, nil)
	saved := f.waitKind("a", status.KindDone).clone()
	f.remove("a")
	f.caughtUp()
	assert.Empty(t, tg.State())
	f.insertAs(saved.setStatus(status.Refreshing()))
	f.caughtUp()
	f.waitKind("a", status.KindDone)
	f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return r.Drifted })
	assert.Equal(t, []string{"1"}, tg.updates("a"))
	assert.Empty(t, tg.State())
}

// A check in flight while its object changes or is deleted: its verdict
// is not recorded over the newer version, and the newer version, or the
// delete, is applied. One in flight at a stop is ended by it; after the
// next start the Refreshing object is checked again, not rewritten.
func TestDriftCheckInFlightWhileTheObjectChanges(t *testing.T) {
	for _, workers := range []int{1, 3} {
		for _, act := range []string{"update", "delete", "delete-reinsert", "stop"} {
			t.Run(fmt.Sprintf("%s,workers=%d", act, workers), func(t *testing.T) {
				tg := newTarget()
				entered, release := make(chan struct{}, 1), make(chan struct{})
				var block atomic.Bool
				var checks atomic.Int32
				check := func(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
					checks.Add(1)
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
				want := map[string]string{"a": "1"}
				switch act {
				case "update":
					f.put("a", "2")
					want["a"] = "2"
				case "delete":
					f.remove("a")
					delete(want, "a")
				case "delete-reinsert":
					f.remove("a")
					f.put("a", "3")
					want["a"] = "3"
				case "stop":
					f.stop()
					f.start()
				}
				close(release)
				f.caughtUp()
				f.eventually("the target as the table", func() bool { return maps.Equal(want, tg.State()) })
				if act == "stop" {
					f.waitKind("a", status.KindDone)
					assert.Equal(t, []string{"1"}, tg.updates("a"), "checked again, not rewritten")
					assert.GreaterOrEqual(t, checks.Load(), int32(2))
				}
			})
		}
	}
}

// An Update asking for a re-check, with a drift check: the re-check is
// checked, not rewritten while in sync.
func TestDriftCheckOfARecheck(t *testing.T) {
	tg := newTarget()
	tg.setAfter(func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, time.Millisecond) })
	d := newScriptDrift(tg.Target)
	f := variant{1, false}.start(t, tg, nil, reconciler.WithDriftCheck(d.check), reconciler.WithRetry(minBackoff, minBackoff))
	f.put("a", "1")
	f.eventually("re-checked", func() bool { return d.count("a") >= 1 })
	f.waitKind("a", status.KindDone)
	assert.Equal(t, []string{"1"}, tg.updates("a"))
}
