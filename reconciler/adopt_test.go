package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// An Error status that the reconciler no longer retries can come back into
// the table: a user re-inserts an object read before a later attempt (or a
// newer version) committed, or reverts to a value saved with its status.
// Such an object is retried, and the target ends up holding what the table
// says; it used to sit in Error for good. Found by the chaos test's
// "re-insert as it is" move, whose read and write are two transactions.
func TestErrorWrittenBackIsRetried(t *testing.T) {
	for _, workers := range []int{1, 4} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("workers=%d/batch=%v", workers, batch), func(t *testing.T) {
				var (
					failing atomic.Bool
					mu      sync.Mutex
					target  = map[string]string{}
				)
				failing.Store(true)
				ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
					if failing.Load() {
						return errors.New("target down")
					}
					mu.Lock()
					defer mu.Unlock()
					target[it.ID] = it.Value
					return nil
				}}
				var batchOps reconciler.BatchOperations[*item]
				if batch {
					batchOps = batchFuncOps{ops}
				}
				// Retries far apart: only an adopted Error is retried
				// within the test's deadline.
				f := startFixture(t, ops, &with{batch: batchOps},
					reconciler.WithConcurrency(workers),
					reconciler.WithRetry(time.Hour, time.Hour))

				f.upsert(&item{ID: "a", Value: "v1"})
				stale := f.waitKind("a", status.KindError) // read, kept
				failing.Store(false)
				f.upsert(&item{ID: "a", Value: "v2"})
				f.waitKind("a", status.KindDone)

				// v1 comes back with the Error status it was read with.
				f.insertAs(stale.clone())
				done := f.waitKind("a", status.KindDone)
				require.Equal(t, "v1", done.Value)
				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, "v1", target["a"], "the target holds what the table says")
			})
		}
	}
}

// The same with the retry still queued for a later failure: the status
// written back is not the one the queued retry is for, which used to drop
// the retry when it came due.
func TestErrorWrittenBackOverALaterFailureIsRetried(t *testing.T) {
	var calls atomic.Int32
	proceed, release := make(chan struct{}), make(chan struct{})
	wait := func(ctx context.Context, ch <-chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		switch calls.Add(1) {
		case 1:
			return errors.New("target down")
		case 2: // fails once the test has read the first failure
			if err := wait(ctx, proceed); err != nil {
				return err
			}
			return errors.New("target down")
		}
		return wait(ctx, release)
	}}
	f := startFixture(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	f.upsert(&item{ID: "a", Value: "v1"})
	first := f.waitKind("a", status.KindError)
	close(proceed)
	// Wait for the second failure's status, then write the first back.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		obj, _, watch, _ := f.table.GetWatch(f.db.ReadTxn(), itemID.Query("a"))
		if obj.Status.Kind == status.KindError && obj.Status.ID() != first.Status.ID() {
			break
		}
		select {
		case <-watch:
		case <-ctx.Done():
			t.Fatal("no second failure")
		}
	}
	f.insertAs(first.clone())
	close(release)
	require.Equal(t, "v1", f.waitKind("a", status.KindDone).Value)
}

// A terminal Error written back is not retried: the status says that
// retrying cannot help.
func TestTerminalErrorWrittenBackIsNotRetried(t *testing.T) {
	var calls atomic.Int32
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if it.Value == "bad" {
			calls.Add(1)
			return reconciler.TerminalError(errors.New("invalid value"))
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	f.upsert(&item{ID: "a", Value: "bad"})
	failed := f.waitKind("a", status.KindError)
	require.True(t, failed.Status.Terminal)

	rev := f.insertAs(failed.clone())
	f.upsert(&item{ID: "b", Value: "ok"})
	f.waitKind("b", status.KindDone)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reached, retryLow, err := f.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(t, err)
	require.GreaterOrEqual(t, reached, rev)
	require.Zero(t, retryLow, "no retry queued for a terminal error")
	require.Equal(t, int32(1), calls.Load())
}
