package reconciler_test

// Pause from inside a round. (Pause and Resume with every kind of change:
// testdata/pause.txtar; parked and queued work: testdata/pause_parked.txtar.)

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
