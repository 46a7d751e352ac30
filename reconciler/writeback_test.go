package reconciler_test

// An Error status written back into the table: by a user re-inserting an
// object read before a later attempt (or a newer version) committed, or
// reverting to a value saved with its status. (Written back after a newer
// version succeeded: testdata/error_written_back.txtar.)

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// The same with the retry still queued for a later failure: the status
// written back is not the one the queued retry is for, which used to drop
// the retry when it came due.
func TestErrorWrittenBackOverALaterFailureIsRetried(t *testing.T) {
	tg := newTarget()
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
	tg.update = func(ctx context.Context, _ *item) error {
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
	}
	f := startFixture(t, tg, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	f.upsert(&item{ID: "a", Value: "v1"})
	first := f.waitKind("a", status.KindError)
	close(proceed)
	f.waitTable("a second failure", func(txn statedb.ReadTxn) bool {
		obj, _, _ := f.table.Get(txn, itemID.Query("a"))
		return obj.Status.Kind == status.KindError && obj.Status.ID() != first.Status.ID()
	})
	f.insertAs(first.clone())
	close(release)
	require.Equal(t, "v1", f.waitKind("a", status.KindDone).Value)
}

// What runs when a is deleted is a retry, a prune then removes a from the
// target, and what is written back is a as read while the retry ran, with
// the Error status the retry answers. That write-back is new work after
// the delete, not the retry's own status: the delete parked behind the
// retry gives way to it, and a ends applied and Done. Found by the chaos
// test after the redesign.
func TestErrorWrittenBackAfterADeleteWhileItsRetryRunsIsApplied(t *testing.T) {
	tg := newTarget()
	fo := reconcilertest.NewFaultyOps(itemKey, tg, nil)
	require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "a", Next: 1}))
	retry := tg.holdAfterApply("a", false)
	f := startFixture(t, fo, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0),
		reconciler.WithRetry(time.Millisecond, time.Millisecond))
	f.upsert(&item{ID: "a", Value: "v1"})
	retry.wait(t)
	read, ok := f.get("a")
	require.True(t, ok)
	require.Equal(t, status.KindError, read.Status.Kind)
	f.remove("a")
	f.settle(1)
	tg.pruneNow(f)
	f.insertAs(read)
	f.settle(2) // the write-back is read while the retry runs
	retry.let()
	f.waitApplied(tg, "a", "v1")
}
