package reconciler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

func TestWaitUntilReconciledReportsFailingObjects(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if it.ID == "bad" && failing.Load() {
			return errors.New("not now")
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithRetry(time.Millisecond, 5*time.Millisecond))

	badRev := f.upsert(&item{ID: "bad"})
	rev := f.upsert(&item{ID: "good"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reached, low, err := f.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, reached, rev)
	assert.NotZero(t, low, "the failing object is waiting for a retry")
	assert.GreaterOrEqual(t, low, badRev, "at the revision of its Error status or later")

	failing.Store(false)
	f.waitKind("bad", status.KindDone)
	require.Eventually(t, func() bool {
		_, low, err := f.rec.WaitUntilReconciled(ctx, rev)
		return err == nil && low == 0
	}, 10*time.Second, time.Millisecond, "no retry left once the object succeeds")

	// A revision that is never reached ends with the context's error.
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	_, _, err = f.rec.WaitUntilReconciled(short, rev+1000)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// While a retry is running on a worker the object is still failing, so the
// retry low watermark must not drop to zero until the retry's outcome is
// committed.
func TestRetryInFlightKeepsTheLowWatermark(t *testing.T) {
	retrying := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		if it.ID != "bad" {
			return nil
		}
		switch calls.Add(1) {
		case 1:
			return errors.New("first attempt fails")
		case 2:
			close(retrying)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("the retry fails too")
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithConcurrency(2), reconciler.WithRetry(time.Millisecond, time.Millisecond))
	badRev := f.upsert(&item{ID: "bad"})
	select {
	case <-retrying:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry never started")
	}
	rev := f.upsert(&item{ID: "good"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reached, low, err := f.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, reached, rev, "a retry in flight does not hold back the revision")
	assert.NotZero(t, low, "the object being retried is still failing")
	assert.GreaterOrEqual(t, low, badRev)
	close(release)
	f.waitKind("bad", status.KindDone)
}

// Revisions are the table's own: a wait for a revision above the table's
// returns only with ctx, or once the table has changed up to it.
func TestWaitUntilReconciledAboveTheTableRevision(t *testing.T) {
	f := startFixture(t, &funcOps{}, nil)
	f.upsert(&item{ID: "a"})
	f.waitReconciled()
	rev := f.table.Revision(f.db.ReadTxn()) // a's Done included

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	reached, _, err := f.rec.WaitUntilReconciled(ctx, rev+1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, rev, reached, "the table's revision, no further")

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _, err := f.rec.WaitUntilReconciled(ctx, rev+1)
		done <- err
	}()
	next := f.upsert(&item{ID: "b"})
	require.Greater(t, next, rev)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not return once the table reached the revision")
	}
}
