package reconciler_test

// Failures and their retries: errors, RetryAfter, terminal errors, panics,
// and what a retry is handed.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
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

// RetryAfter sets the next attempt's time, over the backoff.
func TestRetryAfterSetsTheNextAttempt(t *testing.T) {
	const delay = 150 * time.Millisecond
	var mu sync.Mutex
	var times []time.Time
	tg := newTarget()
	tg.update = func(context.Context, *item) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if len(times) == 1 {
			return reconciler.RetryAfter(delay, errors.New("not yet"))
		}
		return nil
	}
	// The backoff alone would retry after 1ms; RetryAfter must win.
	f := startFixture(t, tg, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithRetryJitter(0))
	f.upsert(&item{ID: "a"})
	f.waitKind("a", status.KindDone)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, times, 2)
	assert.GreaterOrEqual(t, times[1].Sub(times[0]), delay)
}

// An error wrapping TerminalError is recorded and not retried, not even
// when written back into the table, until the object changes.
func TestTerminalErrorIsNotRetriedUntilChange(t *testing.T) {
	var calls atomic.Int32
	tg := newTarget()
	tg.update = func(_ context.Context, it *item) error {
		if it.ID == "a" {
			calls.Add(1)
		}
		if it.Value == "bad" {
			return fmt.Errorf("wrapped: %w", reconciler.TerminalError(errors.New("invalid value")))
		}
		return nil
	}
	f := startFixture(t, tg, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	f.upsert(&item{ID: "a", Value: "bad"})
	failed := f.waitKind("a", status.KindError)
	assert.True(t, failed.Status.Terminal)
	assert.Contains(t, failed.Status.Error, "invalid value")
	rev := f.insertAs(failed.clone()) // written back
	f.upsert(&item{ID: "b"})
	f.waitKind("b", status.KindDone) // rounds ran past a
	_, retryLow := f.reconciledTo(rev)
	assert.Zero(t, retryLow, "no retry queued for a terminal error")
	assert.Equal(t, int32(1), calls.Load(), "a terminal error was retried")

	f.upsert(&item{ID: "a", Value: "good"})
	f.waitKind("a", status.KindDone)
}

// A retried update is handed the object with the status that asked for the
// work (Pending or Refreshing), not the Error status the failure wrote, so
// that an operation treating Refreshing as "rewrite even if unchanged" keeps
// that meaning on every attempt.
func TestRetryIsHandedTheStatusThatAskedForWork(t *testing.T) {
	for _, workers := range []int{1, 4} {
		for _, batch := range []bool{false, true} {
			for _, kind := range []status.Kind{status.KindPending, status.KindRefreshing} {
				t.Run(fmt.Sprintf("workers=%d/batch=%v/%s", workers, batch, kind), func(t *testing.T) {
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
					w := &with{}
					if batch {
						w.batch = tg
					}
					f := startFixture(t, tg, w, reconciler.WithConcurrency(workers), reconciler.WithRetry(time.Millisecond, time.Millisecond))

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

// Option and error values at the edges (a round of math.MaxInt objects, a
// backoff up to MaxInt64, a RetryAfter of 292 years) neither overflow nor
// spin. Found by the second review (bug 9).
func TestValuesAtTheEdgesNeitherOverflowNorSpin(t *testing.T) {
	var attempts atomic.Int32
	tg := newTarget()
	tg.update = func(_ context.Context, it *item) error {
		if it.ID == "later" {
			attempts.Add(1)
			return reconciler.RetryAfter(time.Duration(math.MaxInt64), errors.New("in 292 years"))
		}
		return nil
	}
	f := startFixture(t, tg, nil,
		reconciler.WithRoundLimits(math.MaxInt, nil),
		reconciler.WithRetry(time.Millisecond, time.Duration(math.MaxInt64)),
		reconciler.WithRetryJitter(0.9))
	f.upsert(&item{ID: "later"}, &item{ID: "now"})
	f.waitKind("later", status.KindError)
	f.waitKind("now", status.KindDone)
	for range 20 { // rounds go on; the retry stays far away
		f.reconciledTo(f.upsert(&item{ID: "tick"}))
	}
	assert.Equal(t, int32(1), attempts.Load(), "a retry 292 years away ran again")
}

// A panic in any operation, single or batch, is recovered, recorded as an
// error and retried; the reconciler goes on.
func TestPanicsBecomeErrorsAndAreRetried(t *testing.T) {
	for _, c := range []struct {
		where string
		op    reconcilertest.Op
		batch bool
	}{
		{"update", reconcilertest.OpUpdate, false},
		{"delete", reconcilertest.OpDelete, false},
		{"update-batch", reconcilertest.OpUpdate, true},
		{"delete-batch", reconcilertest.OpDelete, true},
		{"prune", reconcilertest.OpPrune, false},
	} {
		t.Run(c.where, func(t *testing.T) {
			tg := newTarget()
			fo := reconcilertest.NewFaultyOps(itemKey, tg, tg)
			require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic, Op: c.op, Next: 1}))
			w := &with{}
			if c.batch {
				w.batch = fo
			}
			f := startFixture(t, fo, w, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond), reconciler.WithPruning(0))

			f.upsert(&item{ID: "a"}, &item{ID: "b"})
			f.waitKind("a", status.KindDone)
			f.waitKind("b", status.KindDone)
			f.remove("a")
			// The table has no initializers, so it is initialized. A failed
			// prune waits for the next request.
			require.Eventually(t, func() bool {
				f.rec.Prune()
				_, deleted := count(fo, reconcilertest.OpDelete, "a")
				_, pruned := count(fo, reconcilertest.OpPrune, "")
				return deleted >= 1 && pruned >= 1
			}, timeout, time.Millisecond, "delete and prune eventually succeed")

			panicked := false
			for _, call := range fo.Calls() {
				panicked = panicked || call.Op == c.op && call.Err != nil && strings.Contains(call.Err.Error(), "injected panic")
			}
			assert.True(t, panicked, "the operation panicked")
			// The reconciler kept going: a new object is still reconciled.
			f.upsert(&item{ID: "c"})
			f.waitKind("c", status.KindDone)
		})
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
