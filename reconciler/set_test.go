package reconciler_test

import (
	"context"
	"errors"
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

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// With two reconcilers on a status.Set, a failure of one whose status write
// meets the other's write (a compare-and-swap conflict) is still recorded
// and retried: the StateDB reconciler lost such retries before v0.8.4.
func TestFailureWithConflictingStatusWriteIsRetried(t *testing.T) {
	bDone := make(chan struct{})
	var aCalls atomic.Int32
	aOps := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		if aCalls.Add(1) == 1 {
			select { // fail only once b has written its status
			case <-bDone:
			case <-ctx.Done():
			}
			return errors.New("a fails once")
		}
		return nil
	}}
	var bWrote atomic.Bool
	bOps := &funcOps{update: func(context.Context, statedb.Revision, *item) error { return nil }}

	var (
		db  *statedb.DB
		tbl statedb.RWTable[*item]
	)
	idxA := convergeindex.NewNamedStatusIndex("status-a", func(it *item) status.Status { return it.Statuses.Get("a") })
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(d *statedb.DB, p reconciler.Params) error {
				db = d
				var err error
				if tbl, err = statedb.NewTable(d, "items", itemID, idxA); err != nil {
					return err
				}
				for name, ops := range map[string]*funcOps{"a": aOps, "b": bOps} {
					get := func(it *item) status.Status { return it.Statuses.Get(name) }
					set := func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it }
					if _, err := reconciler.Register(p, tbl, (*item).clone, set, get, ops, nil,
						reconciler.WithName(name), reconciler.WithRetry(time.Millisecond, time.Millisecond)); err != nil {
						return err
					}
				}
				return nil
			})))
	log := hivetest.Logger(t)
	require.NoError(t, h.Start(log, context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop(log, context.Background())) })

	wtxn := db.WriteTxn(tbl)
	tbl.Insert(wtxn, &item{ID: "x", Value: "1", Statuses: status.NewSet()})
	wtxn.Commit()

	// Wait for b's Done, then let a fail: a's status write now conflicts.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for !bWrote.Load() {
		obj, _, watch, _ := tbl.GetWatch(db.ReadTxn(), itemID.Query("x"))
		if obj.Statuses.Get("b").Kind == status.KindDone {
			bWrote.Store(true)
			close(bDone)
			break
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatal("b never reconciled x")
		}
	}
	require.NoError(t, reconciler.WaitForReconciliation(ctx, db, tbl, idxA))
	for {
		obj, _, watch, _ := tbl.GetWatch(db.ReadTxn(), itemID.Query("x"))
		if obj.Statuses.Get("a").Kind == status.KindDone {
			break
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatalf("a's failure was not retried: %s", obj.Statuses)
		}
	}
	assert.GreaterOrEqual(t, aCalls.Load(), int32(2), "a failed once, then succeeded on retry")
	obj, _, _ := tbl.Get(db.ReadTxn(), itemID.Query("x"))
	assert.Equal(t, status.KindDone, obj.Statuses.Get("b").Kind, "b's status is left alone")
}
