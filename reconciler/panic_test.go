package reconciler_test

import (
	"context"
	"iter"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// panicky panics in the operation named by where, once per operation, then
// behaves.
type panicky struct {
	where    string
	panicked map[string]*atomic.Bool
	deletes  atomic.Int32
	prunes   atomic.Int32
}

func newPanicky(where string) *panicky {
	p := &panicky{where: where, panicked: map[string]*atomic.Bool{}}
	for _, w := range []string{"update", "delete", "prune", "update-batch", "delete-batch"} {
		p.panicked[w] = new(atomic.Bool)
	}
	return p
}

func (p *panicky) maybePanic(where string) {
	if p.where == where && p.panicked[where].CompareAndSwap(false, true) {
		panic("boom in " + where)
	}
}

func (p *panicky) Update(context.Context, statedb.ReadTxn, statedb.Revision, *item) error {
	p.maybePanic("update")
	return nil
}

func (p *panicky) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *item) error {
	p.maybePanic("delete")
	p.deletes.Add(1)
	return nil
}

func (p *panicky) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*item, statedb.Revision]) error {
	p.maybePanic("prune")
	p.prunes.Add(1)
	return nil
}

func (p *panicky) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	p.maybePanic("update-batch")
	for i := range batch {
		batch[i].Result = p.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (p *panicky) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	p.maybePanic("delete-batch")
	for i := range batch {
		batch[i].Result = p.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func TestPanicsBecomeErrorsAndAreRetried(t *testing.T) {
	for _, where := range []string{"update", "delete", "update-batch", "delete-batch", "prune"} {
		t.Run(where, func(t *testing.T) {
			p := newPanicky(where)
			var batch reconciler.BatchOperations[*item]
			if strings.HasSuffix(where, "-batch") {
				batch = p
			}
			f := startFixture(t, p, &with{batch: batch},
				reconciler.WithRetry(time.Millisecond, 5*time.Millisecond),
				reconciler.WithoutPruning())

			f.upsert(&item{ID: "a"}, &item{ID: "b"})
			f.waitKind("a", status.KindDone)
			f.waitKind("b", status.KindDone)
			f.remove("a")
			// The table has no initializers, so it is initialized. A failed
			// prune waits for the next request.
			require.Eventually(t, func() bool {
				f.rec.Prune()
				return p.deletes.Load() >= 1 && p.prunes.Load() >= 1
			},
				10*time.Second, time.Millisecond, "delete and prune eventually succeed")

			assert.True(t, p.panicked[where].Load(), "the operation panicked")
			// The reconciler kept going: a new object is still reconciled.
			f.upsert(&item{ID: "c"})
			f.waitKind("c", status.KindDone)
		})
	}
}
