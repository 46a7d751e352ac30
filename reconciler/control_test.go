package reconciler_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/converge-go/converge/status"
)

// recorder is a target that records the updates and deletes it applies.
type recorder struct {
	mu    sync.Mutex
	data  map[string]string
	calls []string // "update key=value" or "delete key", in order
}

func newRecorder() *recorder { return &recorder{data: map[string]string{}} }

func (rc *recorder) ops() *funcOps {
	return &funcOps{
		update: func(_ context.Context, _ statedb.Revision, it *item) error {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.data[it.ID] = it.Value
			rc.calls = append(rc.calls, "update "+it.ID+"="+it.Value)
			return nil
		},
		delete: func(_ context.Context, _ statedb.Revision, it *item) error {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			delete(rc.data, it.ID)
			rc.calls = append(rc.calls, "delete "+it.ID)
			return nil
		},
	}
}

func (rc *recorder) snapshot() (map[string]string, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	data := map[string]string{}
	for k, v := range rc.data {
		data[k] = v
	}
	return data, append([]string(nil), rc.calls...)
}

// With WithStartAfter nothing is applied before the tables are
// initialized; with a timeout it starts anyway and health says why until
// they are.
func TestStartAfterTablesAreInitialized(t *testing.T) {
	t.Run("initialized late", func(t *testing.T) {
		rc := newRecorder()
		var markDone func(statedb.WriteTxn)
		f := startFixture(t, rc.ops(), &with{setup: func(f *fixture) []reconciler.Option {
			db, tbl := f.db, f.table
			wtxn := db.WriteTxn(tbl)
			markDone = tbl.RegisterInitializer(wtxn, "late")
			wtxn.Commit()
			return nil
		}}, reconciler.WithStartAfter(0))
		rev := f.upsert(&item{ID: "a", Value: "1"})
		f.waitHealth(func(_ cell.Level, msg string) bool {
			return strings.Contains(msg, "Waiting for tables to be initialized: items")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, calls := rc.snapshot()
		assert.Empty(t, calls, "nothing applied before initialization")

		wtxn := f.db.WriteTxn(f.table)
		markDone(wtxn)
		wtxn.Commit()
		f.waitKind("a", status.KindDone)
	})
	t.Run("timeout", func(t *testing.T) {
		rc := newRecorder()
		var markDone func(statedb.WriteTxn)
		f := startFixture(t, rc.ops(), &with{setup: func(f *fixture) []reconciler.Option {
			db, tbl := f.db, f.table
			wtxn := db.WriteTxn(tbl)
			markDone = tbl.RegisterInitializer(wtxn, "never")
			wtxn.Commit()
			return nil
		}}, reconciler.WithStartAfter(20*time.Millisecond))
		f.upsert(&item{ID: "a", Value: "1"})
		f.waitKind("a", status.KindDone)
		f.waitHealth(func(level cell.Level, msg string) bool {
			return level == cell.StatusDegraded && strings.Contains(msg, "tables not initialized") && strings.Contains(msg, "items")
		})
		wtxn := f.db.WriteTxn(f.table)
		markDone(wtxn)
		wtxn.Commit()
		f.upsert(&item{ID: "b", Value: "1"}) // a round notices
		f.waitHealth(func(level cell.Level, _ string) bool { return level == cell.StatusOK })
	})
}

// A fresh write is taken in the round after the one running when it was
// made, however many refresh marks wait before it.
func TestFreshWriteOvertakesRefreshes(t *testing.T) {
	const n, round = 5000, 100
	var (
		mu    sync.Mutex
		order []string
	)
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		mu.Lock()
		order = append(order, it.ID)
		mu.Unlock()
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithRoundLimits(round, nil))
	objs := make([]*item, n)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("o%04d", i)}
	}
	f.upsert(objs...)
	f.waitReconciled()
	mu.Lock()
	order = order[:0]
	mu.Unlock()

	wtxn := f.db.WriteTxn(f.table)
	for obj := range f.table.All(wtxn) {
		_, _, err := f.table.Insert(wtxn, obj.clone().setStatus(status.Refreshing()))
		require.NoError(t, err)
	}
	wtxn.Commit()
	f.upsert(&item{ID: "fresh"})
	f.waitReconciled()

	mu.Lock()
	defer mu.Unlock()
	at := -1
	for i, id := range order {
		if id == "fresh" {
			at = i
		}
	}
	require.GreaterOrEqual(t, at, 0, "the fresh object was never updated")
	assert.LessOrEqual(t, at, 2*round, "the fresh write waited behind %d refreshes", at)
	assert.Len(t, order, n+1, "every refresh still ran, once")
}

// WithDependency re-reconciles exactly the objects the mapper returns, on
// a change or a delete in the dependency table, ignoring keys that do not
// exist; it refuses the reconciled table itself.
func TestDependencyTriggers(t *testing.T) {
	rc := newRecorder()
	var deps statedb.RWTable[*item]
	mapper := func(d *item, _ bool) []statedb.Query[*item] {
		var qs []statedb.Query[*item]
		for _, id := range strings.Split(d.Value, ",") {
			qs = append(qs, itemID.Query(id))
		}
		return qs
	}
	f := startFixture(t, rc.ops(), &with{setup: func(f *fixture) []reconciler.Option {
		db := f.db
		var err error
		deps, err = statedb.NewTable(db, "deps", itemID)
		require.NoError(t, err)
		return []reconciler.Option{reconciler.WithDependency(deps, mapper)}
	}})
	f.upsert(&item{ID: "a", Value: "1"}, &item{ID: "b", Value: "1"}, &item{ID: "c", Value: "1"})
	f.waitReconciled()
	_, base := rc.snapshot()

	writeDep := func(del bool) {
		wtxn := f.db.WriteTxn(deps)
		var err error
		if del {
			_, _, err = deps.Delete(wtxn, &item{ID: "d"})
		} else {
			_, _, err = deps.Insert(wtxn, &item{ID: "d", Value: "a,c,missing"})
		}
		require.NoError(t, err)
		wtxn.Commit()
	}
	waitCalls := func(n int) []string {
		var calls []string
		require.Eventually(t, func() bool {
			_, calls = rc.snapshot()
			return len(calls) >= n
		}, 20*time.Second, time.Millisecond)
		f.waitReconciled()
		_, calls = rc.snapshot()
		return calls
	}
	writeDep(false)
	calls := waitCalls(len(base) + 2)
	assert.ElementsMatch(t, []string{"update a=1", "update c=1"}, calls[len(base):], "the mapped objects, once each")
	writeDep(true)
	calls2 := waitCalls(len(calls) + 2)
	assert.ElementsMatch(t, []string{"update a=1", "update c=1"}, calls2[len(calls):], "a delete triggers too")

	_, err := reconciler.Register(reconciler.Params{DB: f.db, JobGroup: &fakeGroup{}}, f.table,
		(*item).clone, (*item).setStatus, (*item).getStatus, rc.ops(), nil,
		reconciler.WithDependency(statedb.Table[*item](f.table), mapper))
	require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
	var nilTable statedb.Table[*item]
	_, err = reconciler.Register(reconciler.Params{DB: f.db, JobGroup: &fakeGroup{}}, f.table,
		(*item).clone, (*item).setStatus, (*item).getStatus, rc.ops(), nil,
		reconciler.WithDependency(nilTable, mapper))
	require.True(t, errors.Is(err, reconciler.ErrInvalidConfig), "%v", err)
}

// A mapper that panics on one change neither stops the program nor loses
// the triggers of other changes; the dependency job's health says so.
func TestDependencyMapperPanicIsRecovered(t *testing.T) {
	rc := newRecorder()
	var deps statedb.RWTable[*item]
	mapper := func(d *item, _ bool) []statedb.Query[*item] {
		if d.Value == "boom" {
			panic("mapper bug")
		}
		return []statedb.Query[*item]{itemID.Query(d.Value)}
	}
	f := startFixture(t, rc.ops(), &with{setup: func(f *fixture) []reconciler.Option {
		db := f.db
		var err error
		deps, err = statedb.NewTable(db, "deps", itemID)
		require.NoError(t, err)
		return []reconciler.Option{reconciler.WithDependency(deps, mapper)}
	}})
	f.upsert(&item{ID: "a", Value: "1"})
	f.waitReconciled()
	_, base := rc.snapshot()

	wtxn := f.db.WriteTxn(deps)
	deps.Insert(wtxn, &item{ID: "d1", Value: "boom"})
	deps.Insert(wtxn, &item{ID: "d2", Value: "a"})
	wtxn.Commit()
	require.Eventually(t, func() bool {
		_, calls := rc.snapshot()
		return len(calls) == len(base)+1
	}, 20*time.Second, time.Millisecond, "the other change still triggers a")
	f.waitHealth(func(level cell.Level, msg string) bool {
		return level == cell.StatusDegraded && strings.Contains(msg, "mapper bug")
	}, "job-dependency-deps")
}

// Retries that are due every round must not starve refresh marks (nor
// objects marked by a dependency, nor the backlog found at start): they
// share the budget left after fresh changes.
func TestRefreshesAreNotStarvedByEndlessRetries(t *testing.T) {
	const healthy, failing, round = 50, 1000, 10
	var refreshed, failures atomic.Int32
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if strings.HasPrefix(it.ID, "fail") {
			failures.Add(1)
			return reconciler.RetryAfter(0, errors.New("always"))
		}
		if it.Status.Kind == status.KindRefreshing {
			refreshed.Add(1)
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithRoundLimits(round, nil))
	objs := make([]*item, healthy)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("ok%02d", i)}
	}
	f.upsert(objs...)
	f.waitReconciled()
	objs = make([]*item, failing)
	for i := range objs {
		objs[i] = &item{ID: fmt.Sprintf("fail%04d", i)}
	}
	f.upsert(objs...)
	// Once every failing object has failed twice, due retries are more than
	// a round can take, for as long as the test runs.
	require.Eventually(t, func() bool { return failures.Load() >= 2*failing }, 20*time.Second, time.Millisecond)

	wtxn := f.db.WriteTxn(f.table)
	for i := range healthy {
		obj, _, _ := f.table.Get(wtxn, itemID.Query(fmt.Sprintf("ok%02d", i)))
		f.table.Insert(wtxn, obj.clone().setStatus(status.Refreshing()))
	}
	wtxn.Commit()
	require.Eventually(t, func() bool { return refreshed.Load() >= healthy }, 20*time.Second, time.Millisecond,
		"only %d of %d refreshes while %d objects fail endlessly", refreshed.Load(), healthy, failing)
}
