package reconciler_test

// Regression tests for the bugs a second outside review found (numbered as
// in its report). Each drives a real hive through the public API.

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// reorderingBatch reverses the entries it is given before setting their
// results, and fails the updates of objects whose value is "bad".
type reorderingBatch struct {
	mu      sync.Mutex
	deletes map[string]int
}

func (b *reorderingBatch) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
		batch[i], batch[j] = batch[j], batch[i]
	}
	for i := range batch {
		if batch[i].Object.Value == "bad" {
			batch[i].Result = errors.New("bad value")
		}
	}
}

func (b *reorderingBatch) DeleteBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
		batch[i], batch[j] = batch[j], batch[i]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range batch {
		b.deletes[batch[i].Object.ID]++
		if batch[i].Object.ID == "d1" && b.deletes["d1"] == 1 {
			batch[i].Result = errors.New("first delete of d1 fails")
		}
	}
}

// Bug 6: a BatchOperations that reorders its entries gets each result
// attributed to its own object: failures are retried, successes Done.
func TestReviewBug6BatchResultsFollowTheirEntries(t *testing.T) {
	for _, workers := range []int{1, 3} {
		b := &reorderingBatch{deletes: map[string]int{}}
		f := startFixture(t, &funcOps{}, &with{batch: b}, reconciler.WithConcurrency(workers), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
		f.upsert(&item{ID: "d1"}, &item{ID: "d2"})
		f.waitReconciled()
		wtxn := f.db.WriteTxn(f.table)
		for _, id := range []string{"d1", "d2"} {
			_, _, err := f.table.Delete(wtxn, &item{ID: id})
			require.NoError(t, err)
		}
		for _, it := range []*item{{ID: "a", Value: "ok"}, {ID: "b", Value: "bad"}, {ID: "c", Value: "ok"}} {
			it.Status = status.Pending()
			_, _, err := f.table.Insert(wtxn, it)
			require.NoError(t, err)
		}
		wtxn.Commit()
		f.waitKind("a", status.KindDone)
		f.waitKind("c", status.KindDone)
		f.waitKind("b", status.KindError)
		deadline := time.Now().Add(20 * time.Second)
		for {
			b.mu.Lock()
			n := b.deletes["d1"]
			b.mu.Unlock()
			if n >= 2 {
				break
			}
			require.True(t, time.Now().Before(deadline), "workers=%d: the failed delete of d1 was not retried", workers)
			last := f.upsert()
			_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
			require.NoError(t, err)
		}
		f.stop()
	}
}

// Bug 9: option and error values at the edges neither overflow nor spin.
func TestReviewBug9ValuesAtTheEdges(t *testing.T) {
	var attempts atomic.Int32
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if it.ID == "later" {
			attempts.Add(1)
			return reconciler.RetryAfter(time.Duration(math.MaxInt64), errors.New("in 292 years"))
		}
		return nil
	}}
	f := startFixture(t, ops, nil,
		reconciler.WithRoundLimits(math.MaxInt, nil),
		reconciler.WithRetry(time.Millisecond, time.Duration(math.MaxInt64)),
		reconciler.WithRetryJitter(0.9))
	f.upsert(&item{ID: "later"}, &item{ID: "now"})
	f.waitKind("later", status.KindError)
	f.waitKind("now", status.KindDone)
	for i := range 20 { // rounds go on; the retry stays far away
		last := f.upsert(&item{ID: "tick"})
		_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
		require.NoError(t, err, "round %d", i)
	}
	assert.Equal(t, int32(1), attempts.Load(), "a retry 292 years away ran again")
}
