package reconciler_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// registrar is a hive with an items table whose reconciler is registered
// by the test, wherever it likes: in a start hook, or after the start.
type registrar struct {
	hive   *hive.Hive
	db     *statedb.DB
	table  statedb.RWTable[*item]
	params reconciler.Params
	tgt    *target
	rec    reconciler.Reconciler[*item]
}

// Where a registrar's reconciler is registered.
const (
	inInvoke = iota
	inStartHook
	byTheTest
)

// newRegistrar builds the hive, whose reconciler is registered where says.
func newRegistrar(where int) *registrar {
	r := &registrar{tgt: newTarget()}
	r.hive = hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params, lc cell.Lifecycle) (err error) {
				r.db, r.params = db, p
				if r.table, err = statedb.NewTable(db, "items", itemID); err != nil {
					return err
				}
				switch where {
				case inInvoke:
					return r.register()
				case inStartHook:
					lc.Append(cell.Hook{OnStart: func(cell.HookContext) error { return r.register() }})
				}
				return nil
			}),
		),
	)
	return r
}

func (r *registrar) register() (err error) {
	r.rec, err = reconciler.Register(r.params, r.table, (*item).clone, (*item).setStatus, (*item).getStatus, r.tgt, nil)
	return err
}

// start starts the hive, failing the test if Start does not return.
func (r *registrar) start(t *testing.T) {
	t.Helper()
	started := make(chan error, 1)
	go func() { started <- r.hive.Start(hivetest.Logger(t), context.Background()) }()
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("hive.Start did not return")
	}
}

func (r *registrar) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, r.hive.Stop(hivetest.Logger(t), context.Background()))
}

// write inserts objects with a Pending status and deletes ids, in one
// transaction, and returns its revision.
func (r *registrar) write(t *testing.T, objs []*item, deletes ...string) statedb.Revision {
	t.Helper()
	wtxn := r.db.WriteTxn(r.table)
	for _, o := range objs {
		o.Status = status.Pending()
		_, _, err := r.table.Insert(wtxn, o)
		require.NoError(t, err)
	}
	for _, id := range deletes {
		_, _, err := r.table.Delete(wtxn, &item{ID: id})
		require.NoError(t, err)
	}
	rev := r.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// reconciled waits until every change up to rev is applied, and checks
// that the target holds exactly want.
func (r *registrar) reconciled(t *testing.T, rev statedb.Revision, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, low, err := r.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(t, err)
	require.Zero(t, low, "no object failed")
	r.tgt.mu.Lock()
	defer r.tgt.mu.Unlock()
	assert.Equal(t, want, r.tgt.data)
}

// A reconciler registered from a start hook, as an agent does once a
// resource it needs exists, starts with the hive: Start returns, and the
// reconciler reconciles and stops cleanly.
func TestRegisterFromAStartHook(t *testing.T) {
	r := newRegistrar(inStartHook)
	r.start(t)
	rev := r.write(t, []*item{{ID: "a", Value: "1"}})
	r.reconciled(t, rev, map[string]string{"a": "1"})
	r.stop(t)
}

// A reconciler registered after the hive has started starts at once.
func TestRegisterAfterTheHiveStarted(t *testing.T) {
	r := newRegistrar(byTheTest)
	r.start(t)
	before := r.write(t, []*item{{ID: "a", Value: "1"}})
	require.NoError(t, r.register())
	r.reconciled(t, before, map[string]string{"a": "1"})
	rev := r.write(t, []*item{{ID: "b", Value: "1"}}, "a")
	r.reconciled(t, rev, map[string]string{"b": "1"})
	r.stop(t)
}

// The reconciler runs inside a testing/synctest bubble, as StateDB tests
// its own: nothing it leaves behind is touched from outside the bubble.
// Writes and deletes made while the hive is stopped converge after the
// next start.
func TestRunsInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistrar(inInvoke)
		r.start(t)
		rev := r.write(t, []*item{{ID: "a", Value: "1"}, {ID: "b", Value: "1"}, {ID: "c", Value: "1"}})
		r.reconciled(t, rev, map[string]string{"a": "1", "b": "1", "c": "1"})
		r.stop(t)

		r.write(t, []*item{{ID: "b", Value: "2"}, {ID: "d", Value: "1"}}, "a")
		rev = r.write(t, nil, "c")
		r.start(t)
		r.reconciled(t, rev, map[string]string{"b": "2", "d": "1"})
		r.stop(t)
	})
	// What the bubble left is now garbage: its cleanups run outside the
	// bubble, and must not touch it (the process would die).
	collectGarbage(t)
}

// collectGarbage collects what is unreachable and waits for the cleanups
// that queues to have run.
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
