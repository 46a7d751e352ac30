package reconciler_test

// How operations are shared out: WithConcurrency's workers and
// BatchOperations.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// With any number of workers, at most one operation per object is in
// flight, an object's operations come in revision order, and the last one
// is for its last change.
func TestWorkersKeepOneOperationPerObjectAndRevisionOrder(t *testing.T) {
	for _, workers := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			var (
				mu       sync.Mutex
				inFlight = map[string]int{}
				overlaps atomic.Int32
				calls    atomic.Int64
			)
			op := func(ctx context.Context, it *item) error {
				mu.Lock()
				if inFlight[it.ID]++; inFlight[it.ID] > 1 {
					overlaps.Add(1)
				}
				mu.Unlock()
				// Every 7th call yields the processor for a while so that
				// newer versions pile up behind operations in flight.
				if calls.Add(1)%7 == 0 {
					select {
					case <-time.After(200 * time.Microsecond):
					case <-ctx.Done():
					}
				}
				mu.Lock()
				inFlight[it.ID]--
				mu.Unlock()
				return nil
			}
			tg := newTarget()
			tg.update, tg.delete = op, op
			f := startFixture(t, tg, nil, reconciler.WithConcurrency(workers), reconciler.WithRoundLimits(50, nil))
			// Once the loop runs, what follows are changes, deletes
			// included, not a backlog that a deleted object is not part of.
			f.settle(0)

			const keys, rounds = 20, 30
			// Every key in the target first: a key written and deleted
			// before the reconciler reads it needs no operation at all.
			initial := make([]*item, 0, keys)
			for k := range keys {
				initial = append(initial, &item{ID: fmt.Sprintf("k%02d", k), Value: "initial"})
			}
			f.upsert(initial...)
			f.waitReconciled()
			for r := range rounds {
				batch := make([]*item, 0, keys)
				for k := range keys {
					batch = append(batch, &item{ID: fmt.Sprintf("k%02d", k), Value: fmt.Sprint(r)})
				}
				f.upsert(batch...)
				if r%10 == 9 {
					// Delete half of the keys right after updating them.
					var ids []string
					for k := 0; k < keys; k += 2 {
						ids = append(ids, fmt.Sprintf("k%02d", k))
					}
					f.remove(ids...)
				}
			}
			f.caughtUp()

			assert.Zero(t, overlaps.Load(), "two operations ran at once on one object")
			ops, revs := map[string][]string{}, map[string][]statedb.Revision{}
			for _, c := range tg.Calls() {
				switch c.Op {
				case reconcilertest.OpUpdate:
					ops[c.Key] = append(ops[c.Key], "update:"+c.Value)
				case reconcilertest.OpDelete:
					ops[c.Key] = append(ops[c.Key], "delete")
				default:
					continue
				}
				revs[c.Key] = append(revs[c.Key], c.Revision)
			}
			for k := range keys {
				key := fmt.Sprintf("k%02d", k)
				for i := 1; i < len(revs[key]); i++ {
					require.Less(t, revs[key][i-1], revs[key][i], "key %s applied out of revision order: %v", key, ops[key])
				}
				require.NotEmpty(t, ops[key], "key %s never reconciled", key)
				last := ops[key][len(ops[key])-1]
				if k%2 == 0 {
					assert.Equal(t, "delete", last, "key %s: the final delete was overtaken: %v", key, ops[key])
				} else {
					assert.Equal(t, "update:29", last, "key %s: %v", key, ops[key])
				}
			}
		})
	}
}

// A BatchOperations that reorders its entries gets each result attributed
// to its own object: failures are retried, successes Done. Found by the
// second review (bug 6).
func TestBatchResultsFollowTheirEntries(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			tg := newTarget()
			tg.reverse = true
			var d1 atomic.Int32
			tg.update = func(_ context.Context, it *item) error {
				if it.Value == "bad" {
					return errors.New("bad value")
				}
				return nil
			}
			tg.delete = func(_ context.Context, it *item) error {
				if it.ID == "d1" && d1.Add(1) == 1 {
					return errors.New("first delete of d1 fails")
				}
				return nil
			}
			f := startFixture(t, tg, &with{batch: tg}, reconciler.WithConcurrency(workers), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
			f.upsert(&item{ID: "d1"}, &item{ID: "d2"})
			f.waitReconciled()
			wtxn := f.db.WriteTxn(f.table)
			for _, id := range []string{"d1", "d2"} {
				_, _, err := f.table.Delete(wtxn, &item{ID: id})
				require.NoError(t, err)
			}
			for _, it := range []*item{{ID: "a", Value: "ok"}, {ID: "b", Value: "bad"}, {ID: "c", Value: "ok"}} {
				_, _, err := f.table.Insert(wtxn, it.setStatus(status.Pending()))
				require.NoError(t, err)
			}
			wtxn.Commit()
			f.waitKind("a", status.KindDone)
			f.waitKind("c", status.KindDone)
			f.waitKind("b", status.KindError)
			require.Eventually(t, func() bool { return d1.Load() >= 2 }, timeout, time.Millisecond, "the failed delete of d1 was not retried")
		})
	}
}
