package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// A retried update is handed the object with the status that asked for the
// work (Pending or Refreshing), not the Error status the failure wrote, so
// that an operation treating Refreshing as "rewrite even if unchanged" keeps
// that meaning on every attempt.
func TestRetryIsHandedTheStatusThatAskedForWork(t *testing.T) {
	for _, workers := range []int{1, 4} {
		for _, batch := range []bool{false, true} {
			for _, kind := range []status.Kind{status.KindPending, status.KindRefreshing} {
				name := fmt.Sprintf("workers=%d/batch=%v/%s", workers, batch, kind)
				t.Run(name, func(t *testing.T) {
					var (
						mu     sync.Mutex
						handed []status.Status
					)
					ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
						mu.Lock()
						defer mu.Unlock()
						handed = append(handed, it.Status)
						if len(handed) < 3 {
							return errors.New("not yet")
						}
						return nil
					}}
					var batchOps reconciler.BatchOperations[*item]
					if batch {
						batchOps = batchFuncOps{ops}
					}
					f := startFixture(t, ops, &with{batch: batchOps},
						reconciler.WithConcurrency(workers),
						reconciler.WithRetry(time.Millisecond, time.Millisecond))

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
}

// batchFuncOps gives funcOps the BatchOperations interface.
type batchFuncOps struct{ *funcOps }

func (b batchFuncOps) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		batch[i].Result = b.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (b batchFuncOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i := range batch {
		batch[i].Result = b.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}
