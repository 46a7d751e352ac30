package reconciler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	objs := make([]*item, len(ids))
	for i, id := range ids {
		obj, found := f.get(id)
		require.True(f.t, found, id)
		objs[i] = obj.clone()
		objs[i].Status = status.Refreshing()
	}
	f.insertAs(objs...)
	f.caughtUp()
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
