package reconciler_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Pause called while a round runs (here by an update of that round) stops
// the rest of the round from starting. Found by the second review.
func TestPauseStopsTheRestOfTheRound(t *testing.T) {
	tg := newTarget()
	started := make(chan string, 10)
	var rec reconciler.Reconciler[*item]
	tg.update = func(_ context.Context, it *item) error {
		started <- it.ID
		if it.ID == "a" {
			rec.Pause()
		}
		return nil
	}
	f := startFixture(t, tg, nil)
	rec = f.rec
	f.upsert(&item{ID: "a"}, &item{ID: "b"}, &item{ID: "c"})
	assert.Equal(t, "a", recv(t, started, "the first update"))
	quiet(t, started, 100*time.Millisecond, "started after Pause")
	f.rec.Resume()
	f.waitReconciled()
	for _, id := range []string{"a", "b", "c"} {
		obj, _ := f.get(id)
		assert.Equal(t, status.KindDone, obj.Status.Kind, id)
	}
}

// With workers, once Pause has returned neither the version parked behind
// an operation that then finishes nor work queued for the workers starts,
// and WaitUntilReconciled makes no progress. Found by the second review.
// (Pause and Resume with every kind of change: testdata/pause.txtar.)
func TestPauseHoldsParkedAndQueuedWork(t *testing.T) {
	tg := newTarget()
	started := make(chan string, 100)
	tg.update = func(_ context.Context, it *item) error {
		select {
		case started <- it.ID + "=" + it.Value:
		default:
		}
		return nil
	}
	held := tg.hold("a")
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2))
	f.upsert(&item{ID: "a", Value: "v1"})
	held.wait(t)
	f.upsert(&item{ID: "a", Value: "v2"}) // parked behind v1
	f.settle(1)
	drain(started)

	f.rec.Pause()
	rev := f.upsert(&item{ID: "b"}) // queued
	held.let()
	quiet(t, started, 200*time.Millisecond, "started after Pause")
	_, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 50*time.Millisecond), rev)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no progress while paused")

	f.rec.Resume()
	f.waitReconciled()
	obj, _ := f.get("a")
	assert.Equal(t, "v2", obj.Value)
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}

// A prune already due in a round during which Pause is called (here from
// an Update of that round) waits for Resume: Pause holds off prunes as it
// holds off operations. The prune and the change are made ready together,
// and the loop takes one of them first at random, so the test repeats.
func TestPauseHoldsOffAPruneDueInTheRound(t *testing.T) {
	tg := newTarget()
	var paused atomic.Bool
	var bad atomic.Int32
	var rec reconciler.Reconciler[*item]
	tg.update = func(_ context.Context, it *item) error {
		if it.Value == "pause" {
			rec.Pause()
			paused.Store(true)
		}
		return nil
	}
	tg.prune = func(context.Context) error {
		if paused.Load() {
			bad.Add(1)
		}
		return nil
	}
	f := startFixture(t, tg, nil, reconciler.WithPruning(0))
	rec = f.rec
	const rounds = 12
	for i := range rounds {
		tg.mu.Lock()
		prunes := tg.prunes
		tg.mu.Unlock()
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		held := tg.hold(a)
		f.upsert(&item{ID: a})
		held.wait(t)
		f.rec.Prune() // waits in its channel while the loop is in the update
		f.upsert(&item{ID: b, Value: "pause"})
		held.let()
		f.waitKind(b, status.KindDone)
		paused.Store(false)
		f.rec.Resume()
		tg.waitPrunes(t, prunes+1) // the prune, after Resume
	}
	assert.Zero(t, bad.Load(), "prunes that ran after Pause returned, in %d rounds", rounds)
}
