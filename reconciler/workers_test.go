package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
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

// funcOps implements Operations with replaceable functions; a nil function
// succeeds.
type funcOps struct {
	update func(ctx context.Context, rev statedb.Revision, it *item) error
	delete func(ctx context.Context, rev statedb.Revision, it *item) error
	prune  func(ctx context.Context) error
}

func (f *funcOps) Update(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, it *item) error {
	if f.update == nil {
		return nil
	}
	return f.update(ctx, rev, it)
}

func (f *funcOps) Delete(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, it *item) error {
	if f.delete == nil {
		return nil
	}
	return f.delete(ctx, rev, it)
}

func (f *funcOps) Prune(ctx context.Context, _ statedb.ReadTxn, _ iter.Seq2[*item, statedb.Revision]) error {
	if f.prune == nil {
		return nil
	}
	return f.prune(ctx)
}

// history records, per key, the operations applied, checking that no two
// run at once for the same key.
type history struct {
	mu       sync.Mutex
	inFlight map[string]int
	ops      map[string][]string
	revs     map[string][]statedb.Revision
	overlaps atomic.Int32
}

func newHistory() *history {
	return &history{inFlight: map[string]int{}, ops: map[string][]string{}, revs: map[string][]statedb.Revision{}}
}

func (h *history) enter(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight[key]++
	if h.inFlight[key] > 1 {
		h.overlaps.Add(1)
	}
}

func (h *history) leave(key, what string, rev statedb.Revision) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight[key]--
	h.ops[key] = append(h.ops[key], what)
	h.revs[key] = append(h.revs[key], rev)
}

func TestWorkersKeepOneOperationPerObjectAndRevisionOrder(t *testing.T) {
	for _, workers := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			h := newHistory()
			var calls atomic.Int64
			slowSometimes := func(ctx context.Context, key string) {
				// Every 7th call yields the processor for a while so that
				// newer versions pile up behind operations in flight.
				if calls.Add(1)%7 == 0 {
					select {
					case <-time.After(200 * time.Microsecond):
					case <-ctx.Done():
					}
				}
			}
			ops := &funcOps{
				update: func(ctx context.Context, rev statedb.Revision, it *item) error {
					h.enter(it.ID)
					slowSometimes(ctx, it.ID)
					h.leave(it.ID, "update:"+it.Value, rev)
					return nil
				},
				delete: func(ctx context.Context, rev statedb.Revision, it *item) error {
					h.enter(it.ID)
					slowSometimes(ctx, it.ID)
					h.leave(it.ID, "delete", rev)
					return nil
				},
			}
			f := startFixture(t, ops, nil, reconciler.WithConcurrency(workers), reconciler.WithRoundLimits(50, nil))

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
			f.waitReconciled()
			last := f.upsert() // nothing; just the current revision
			_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
			require.NoError(t, err)

			assert.Zero(t, h.overlaps.Load(), "two operations ran at once on one object")
			h.mu.Lock()
			defer h.mu.Unlock()
			for k := range keys {
				key := fmt.Sprintf("k%02d", k)
				revs := h.revs[key]
				for i := 1; i < len(revs); i++ {
					require.Less(t, revs[i-1], revs[i], "key %s applied out of revision order: %v", key, h.ops[key])
				}
				ops := h.ops[key]
				require.NotEmpty(t, ops, "key %s never reconciled", key)
				if k%2 == 0 {
					assert.Equal(t, "delete", ops[len(ops)-1], "key %s: the final delete was overtaken: %v", key, ops)
				} else {
					assert.Equal(t, "update:29", ops[len(ops)-1], "key %s: %v", key, ops)
				}
			}
		})
	}
}

func TestBlockedObjectDoesNotHoldBackOthers(t *testing.T) {
	release := make(chan struct{})
	var blockedCtxErr atomic.Value
	ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		if it.ID == "blocked" {
			select {
			case <-release:
			case <-ctx.Done():
				blockedCtxErr.Store(ctx.Err())
				return ctx.Err()
			}
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithConcurrency(4))
	f.upsert(&item{ID: "blocked"})
	others := make([]*item, 1000)
	for i := range others {
		others[i] = &item{ID: fmt.Sprintf("o%04d", i)}
	}
	f.upsert(others...)

	// Wait until the 1000 others are Done while "blocked" is still held.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		txn := f.db.ReadTxn()
		done, watch := f.table.ListWatch(txn, f.index.Query(status.KindDone))
		n := 0
		for range done {
			n++
		}
		if n == 1000 {
			break
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatalf("only %d of 1000 objects reached Done while one was blocked", n)
		}
	}
	obj, _ := f.get("blocked")
	assert.Equal(t, status.KindPending, obj.Status.Kind)
	close(release)
	f.waitReconciled()
	obj, _ = f.get("blocked")
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}

func TestStopCancelsOperationsInFlight(t *testing.T) {
	for _, workers := range []int{1, 8} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			var started, cancelled atomic.Int32
			var stopped atomic.Bool
			var startedAfterStop atomic.Int32
			entered := make(chan struct{}, 100)
			ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
				if stopped.Load() {
					startedAfterStop.Add(1)
				}
				started.Add(1)
				select {
				case entered <- struct{}{}:
				default:
				}
				<-ctx.Done()
				cancelled.Add(1)
				return ctx.Err()
			}}
			f := startFixture(t, ops, nil, reconciler.WithConcurrency(workers))
			objs := make([]*item, 2000)
			for i := range objs {
				objs[i] = &item{ID: fmt.Sprintf("o%04d", i)}
			}
			f.upsert(objs...)
			for range workers {
				<-entered
			}
			f.stop()
			stopped.Store(true)
			assert.Equal(t, started.Load(), cancelled.Load(), "every operation in flight saw its context cancelled")
			assert.Zero(t, startedAfterStop.Load(), "an operation started after stop returned")
			assert.LessOrEqual(t, int(started.Load()), workers, "queued work must not start once stopping")
		})
	}
}

func TestRetryAfterSetsTheNextAttempt(t *testing.T) {
	const delay = 150 * time.Millisecond
	var mu sync.Mutex
	var times []time.Time
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if len(times) == 1 {
			return reconciler.RetryAfter(delay, errors.New("not yet"))
		}
		return nil
	}}
	// The backoff alone would retry after 1ms; RetryAfter must win.
	f := startFixture(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond), reconciler.WithRetryJitter(0))
	f.upsert(&item{ID: "a"})
	f.waitKind("a", status.KindDone)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, times, 2)
	assert.GreaterOrEqual(t, times[1].Sub(times[0]), delay)
}

func TestTerminalErrorIsNotRetriedUntilChange(t *testing.T) {
	var calls atomic.Int32
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		calls.Add(1)
		if it.Value == "bad" {
			return fmt.Errorf("wrapped: %w", reconciler.TerminalError(errors.New("invalid value")))
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	rev := f.upsert(&item{ID: "a", Value: "bad"})
	f.waitReconciled()
	_, _, err := f.rec.WaitUntilReconciled(context.Background(), rev)
	require.NoError(t, err)
	obj, _ := f.get("a")
	assert.Equal(t, status.KindError, obj.Status.Kind)
	assert.Contains(t, obj.Status.Error, "invalid value")
	// A later revision being reached proves rounds ran, with no new call.
	rev = f.upsert(&item{ID: "other"})
	_, _, err = f.rec.WaitUntilReconciled(context.Background(), rev)
	require.NoError(t, err)
	assert.Equal(t, int32(2), calls.Load(), "a then other; no retry of a")

	f.upsert(&item{ID: "a", Value: "good"})
	f.waitKind("a", status.KindDone)
}
