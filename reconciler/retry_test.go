package reconciler_test

// Failures and their retries: what a retry is handed, a conflicting status
// write, objects that lose their primary key, and a dependency mapper that
// panics, and the history an Error status found starts. (Terminal errors,
// RetryAfter and panics: testdata/policy.txtar and testdata/panics.txtar;
// values at the edges: testdata/edges.txtar; retries against fresh writes
// and refreshes: testdata/fresh_*.txtar; an Error written back:
// testdata/error_written_back*.txtar and testdata/putback_held.txtar.)

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// A retried update is handed the object with the status that asked for the
// work (Pending or Refreshing), not the Error status the failure wrote, so
// that an operation treating Refreshing as "rewrite even if unchanged" keeps
// that meaning on every attempt.
func TestRetryIsHandedTheStatusThatAskedForWork(t *testing.T) {
	for _, v := range variants {
		for _, kind := range []status.Kind{status.KindPending, status.KindRefreshing} {
			t.Run(fmt.Sprintf("%v/%s", v, kind), func(t *testing.T) {
				var (
					mu     sync.Mutex
					handed []status.Status
				)
				tg := newTarget()
				tg.update = func(_ context.Context, it *item) error {
					mu.Lock()
					defer mu.Unlock()
					handed = append(handed, it.Status)
					if len(handed) < 3 {
						return errors.New("not yet")
					}
					return nil
				}
				f := v.start(t, tg, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))

				asked := status.Pending()
				if kind == status.KindRefreshing {
					asked = status.Refreshing()
				}
				f.insertAs(&item{ID: "a", Value: "v", Status: asked})
				f.waitKind("a", status.KindDone)

				mu.Lock()
				defer mu.Unlock()
				require.Len(t, handed, 3)
				for i, st := range handed {
					assert.Equal(t, kind, st.Kind, "attempt %d was handed %s", i+1, st)
					assert.Equal(t, asked.ID(), st.ID(), "attempt %d was handed another status", i+1)
					assert.True(t, asked.UpdatedAt.Equal(st.UpdatedAt), "attempt %d: %s", i+1, st)
				}
			})
		}
	}
}

// With two reconcilers on a status.Set, a failure of one whose status write
// meets the other's write (a compare-and-swap conflict) is still recorded
// and retried: the StateDB reconciler lost such retries before v0.8.4.
func TestFailureWithAConflictingStatusWriteIsRetried(t *testing.T) {
	bDone := make(chan struct{})
	var aCalls atomic.Int32
	a := newTarget()
	a.update = func(ctx context.Context, _ *item) error {
		if aCalls.Add(1) == 1 {
			select { // fail only once b has written its status
			case <-bDone:
			case <-ctx.Done():
			}
			return errors.New("a fails once")
		}
		return nil
	}
	getA, setA := statusOf("a")
	f := startFixture(t, a, &with{getStatus: getA, setStatus: setA, setup: func(f *fixture) []reconciler.Option {
		getB, setB := statusOf("b")
		_, err := reconciler.Register(f.params, f.table, (*item).clone, setB, getB, newTarget(), nil,
			reconciler.WithName("b"), reconciler.WithRetry(time.Millisecond, time.Millisecond))
		require.NoError(t, err)
		return nil
	}}, reconciler.WithName("a"), reconciler.WithRetry(time.Millisecond, time.Millisecond))

	f.insertAs(&item{ID: "x", Value: "1", Statuses: status.NewSet()})
	// Wait for b's Done, then let a fail: a's status write now conflicts.
	f.waitTable("b to reconcile x", func(txn statedb.ReadTxn) bool {
		obj, _, _ := f.table.Get(txn, itemID.Query("x"))
		return obj.Statuses.Get("b").Kind == status.KindDone
	})
	close(bDone)
	f.waitReconciled()
	obj := f.waitKind("x", status.KindDone) // a's status
	assert.GreaterOrEqual(t, aCalls.Load(), int32(2), "a failed once, then succeeded on retry")
	assert.Equal(t, status.KindDone, obj.Statuses.Get("b").Kind, "b's status is left alone")
}

// Objects without a primary key: StateDB v0.9 lets a primary indexer say an
// object has none (item.NoKey here), and then stores nothing for it.

// An Update that leaves its object without a primary key gets an Error
// status wrapping ErrNoPrimaryKey on the object as it was, and is retried;
// the other objects of the round are reconciled as usual. A dependency or
// refresh mark whose setStatus drops the key leaves that object alone,
// never panics, and still marks the others.
func TestObjectWithoutAPrimaryKey(t *testing.T) {
	for _, mark := range []string{"dependency", "refresh"} {
		for _, workers := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/workers=%d", mark, workers), func(t *testing.T) {
				tg := newTarget()
				tg.update = func(_ context.Context, it *item) error {
					if it.ID == "bad" {
						it.NoKey = true // a buggy Update changes what the primary index reads
					}
					return nil
				}
				var deps statedb.RWTable[*item]
				w := withDeps(t, &deps, sameID)
				w.setStatus = func(o *item, s status.Status) *item {
					o.Status = s
					if o.ID == "a" && s.Kind == status.KindRefreshing {
						o.NoKey = true
					}
					return o
				}
				opts := []reconciler.Option{reconciler.WithConcurrency(workers), reconciler.WithRetry(time.Hour, time.Hour)}
				if mark == "refresh" {
					opts = append(opts, reconciler.WithRefreshing(10*time.Millisecond, nil))
				}
				f := startFixture(t, tg, w, opts...)
				f.upsert(&item{ID: "a"}, &item{ID: "bad"}, &item{ID: "b"})
				a := f.waitKind("a", status.KindDone)
				bad := f.waitKind("bad", status.KindError)
				b := f.waitKind("b", status.KindDone)
				assert.Contains(t, bad.Status.Error, reconciler.ErrNoPrimaryKey.Error())
				assert.False(t, bad.NoKey, "the object is stored as it was before Update")

				if mark == "dependency" { // a mark of a and b; refreshes mark them over and over
					writeDeps(t, f, deps, false, &item{ID: "a"}, &item{ID: "b"})
				}
				for range map[string]int{"dependency": 1, "refresh": 3}[mark] {
					f.waitTable("b to be reconciled again after a mark", func(txn statedb.ReadTxn) bool {
						obj, _, found := f.table.Get(txn, itemID.Query("b"))
						if found && obj.Status.Kind == status.KindDone && obj.Status.ID() != b.Status.ID() {
							b = obj
							return true
						}
						return false
					})
				}
				now, found := f.get("a")
				require.True(t, found, "a is still in the table")
				assert.Equal(t, a.Status.ID(), now.Status.ID(), "a's mark was left out")
			})
		}
	}
}

// WithDependency: objects re-reconciled when what they depend on changes.
// (Which objects, once each, on a change or a delete, keys not in the
// table ignored, Unset objects left alone: testdata/dependency*.txtar;
// refusals: TestRegisterRejectsBadInput.)

// withDeps is a with whose setup creates a deps table, of items too, and
// makes the reconciler depend on it through mapper.
func withDeps(t *testing.T, deps *statedb.RWTable[*item], mapper func(*item, bool) []statedb.Query[*item]) *with {
	return &with{setup: func(f *fixture) []reconciler.Option {
		var err error
		*deps, err = statedb.NewTable(f.db, "deps", itemID)
		require.NoError(t, err)
		return []reconciler.Option{reconciler.WithDependency(*deps, mapper)}
	}}
}

// sameID is a WithDependency mapper: a dep re-reconciles the item of its ID.
func sameID(d *item, _ bool) []statedb.Query[*item] {
	return []statedb.Query[*item]{itemID.Query(d.ID)}
}

// writeDeps inserts objs into deps, or deletes them, in one transaction.
func writeDeps(t *testing.T, f *fixture, deps statedb.RWTable[*item], del bool, objs ...*item) {
	wtxn := f.db.WriteTxn(deps)
	for _, o := range objs {
		var err error
		if del {
			_, _, err = deps.Delete(wtxn, o)
		} else {
			_, _, err = deps.Insert(wtxn, o)
		}
		require.NoError(t, err)
	}
	wtxn.Commit()
}

// A mapper that panics on one change neither stops the program nor loses
// the triggers of other changes; the dependency job's health says so.
func TestDependencyMapperPanicIsRecovered(t *testing.T) {
	tg := newTarget()
	var deps statedb.RWTable[*item]
	f := startFixture(t, tg, withDeps(t, &deps, func(d *item, _ bool) []statedb.Query[*item] {
		if d.Value == "boom" {
			panic("mapper bug")
		}
		return []statedb.Query[*item]{itemID.Query(d.Value)}
	}))
	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	base := len(tg.applied())

	writeDeps(t, f, deps, false, &item{ID: "d1", Value: "boom"}, &item{ID: "d2", Value: "a"})
	require.Eventually(t, func() bool { return len(tg.applied()) == base+1 }, timeout, time.Millisecond,
		"the other change still triggers a")
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, "mapper bug")
	}, "job-dependency-deps")
}

// An Error status found in the table, at the start or written while
// running, starts the object's error history: one record at the time that
// status was written, then the retry's failure. The row's last error is
// the whole text; the history's record of it is bounded.
func TestRetryHistoryStartsWithAnErrorStatusFound(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprint("running=", running), func(t *testing.T) {
			long := strings.Repeat("é", 300)
			tg := newTarget()
			f := newFixture(t, tg, &with{tables: true}, reconciler.WithRetry(time.Hour, time.Hour), reconciler.WithPruning(0))
			if running {
				f.start()
				f.put("a", "1")
				f.caughtUp()
			}
			tg.failWhen(errors.New(long), func(reconcilertest.Op, *item) bool { return true })
			written := time.Now().Add(-time.Hour).Truncate(time.Second)
			f.insertAs(&item{ID: "a", Value: "1", Status: status.Status{Kind: status.KindError, Error: "old error", UpdatedAt: written}})
			if !running {
				f.start()
			}
			f.waitRetryRow("a", func(r *tables.RetryInfo) bool { return r.LastError == long })
			row, _ := f.retryRow("a")
			require.Len(t, row.Errors, 2, "%+v", row.Errors)
			assert.Equal(t, "old error", row.Errors[0].Error)
			assert.True(t, row.Errors[0].At.Equal(written), "at %v, want %v", row.Errors[0].At, written)
			assert.True(t, strings.HasSuffix(row.Errors[1].Error, "…"), "the history's text is bounded")
			assert.True(t, utf8.ValidString(row.Errors[1].Error))
		})
	}
}

// A due retry keeps its share of rounds against a flood of fresh changes
// however small the rounds: with rounds of one object, one in eight goes to
// retries (counted over successive rounds), not none.
func TestRetriesKeepTheirShareOfRoundsOfOne(t *testing.T) {
	for _, priority := range []bool{false, true} {
		t.Run(fmt.Sprint("priority=", priority), func(t *testing.T) {
			var failed atomic.Bool
			tg := newTarget().failWhen(errors.New("once"), func(op reconcilertest.Op, it *item) bool {
				return it.ID == "x" && failed.CompareAndSwap(false, true)
			})
			opts := []reconciler.Option{reconciler.WithRoundLimits(1, nil), reconciler.WithRetry(time.Millisecond, time.Millisecond)}
			if priority {
				opts = append(opts, reconciler.WithPriority(func(*item) int { return 0 }, 0))
			}
			f := startFixture(t, tg, nil, opts...)
			flood := items("y", 3000, "1")
			f.upsert(append([]*item{{ID: "x", Value: "1"}}, flood...)...) // x first, the flood behind it
			f.waitKind("x", status.KindDone)

			fresh, xs := 0, 0 // the flood's updates before x's retry, x's updates
			for _, c := range tg.callTimes() {
				switch {
				case c.op != reconcilertest.OpUpdate:
				case c.key == "x":
					xs++
				case xs < 2:
					fresh++
				}
			}
			t.Logf("fresh before the retry: %d", fresh)
			require.GreaterOrEqual(t, xs, 2, "x failed once, then was retried")
			assert.Less(t, fresh, len(flood)/2, "x's retry waited for %d of the %d fresh changes", fresh, len(flood))
		})
	}
}
