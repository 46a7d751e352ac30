package reconciler_test

// Stopping and starting, and pausing: work carried over a stop,
// operations in flight at a stop, and Pause from inside a round. (Deletes while stopped or before the first start:
// testdata/stopped_deletes*.txtar; stops with work in flight:
// testdata/stop_start*.txtar and testdata/putback*.txtar.)

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// Stopping a hive and starting the same hive again (as the "hive stop" and
// "hive start" script commands do) restarts the reconciler's job; work cut
// short by the stop is carried over (superseded by a change read after the
// start: testdata/carried_refresh.txtar).

// WaitUntilReconciled counts work carried over a stop: a wait for a
// revision does not return while work cut short below it is not done.
// Found by the second review (bug 8).
func TestWaitCountsWorkCarriedOverAStop(t *testing.T) {
	tg := newTarget()
	cut := tg.hold("a")
	f := startFixture(t, tg, nil, reconciler.WithRoundLimits(1, nil))
	revA := f.upsert(&item{ID: "a"})
	cut.wait(t)
	again := tg.hold("a") // after the start: held until the test has checked
	f.stop()              // cuts a's update short
	revB := f.upsert(&item{ID: "b"})
	f.start()
	again.wait(t)

	reached, _, err := f.rec.WaitUntilReconciled(ctxFor(t, 200*time.Millisecond), revA)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "returned %d for a's revision %d (b's is %d) while a's update is held", reached, revA, revB)
	again.let()
	f.reconciledTo(revA)
	obj, _ := f.get("a")
	require.Equal(t, status.KindDone, obj.Status.Kind)
}

// Stopping the hive: operations in flight see their context cancelled, and
// nothing starts afterwards.

// TestShutdownUnderLoad stops the hive while thousands of objects are queued
// for retry and every worker is blocked in an operation (holding a batch of
// hundreds with BatchOperations), with more work queued behind them and,
// with several workers, a prune in flight on the reconciler's loop. Stop
// must return promptly; every blocked operation must have seen its context
// cancelled and returned before Stop returned; no operation may start once
// stopping; and no goroutine may be left behind.
func TestShutdownUnderLoad(t *testing.T) {
	const objects = 3000
	for _, v := range []variant{{1, false}, {1, true}, {8, false}, {8, true}} {
		workers, batch := v.workers, v.batch
		t.Run(v.String(), func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			tg := newTarget()
			fo := reconcilertest.NewFaultyOps(itemKey, tg, tg)
			require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError}))
			// Retries an hour away: no wave of them comes due in phase 2,
			// to be taken in small batches before the new objects.
			f := v.start(t, fo, nil, reconciler.WithRetry(time.Hour, time.Hour))

			// Phase 1: every object fails once and is queued for retry.
			f.upsert(items("a", objects, "")...)
			f.waitTable("every object in Error", func(txn statedb.ReadTxn) bool { return f.countKind(txn, status.KindError) == objects })

			// Phase 2: every operation blocks until its context ends. New
			// objects and deletes are written while paused, so that the
			// workers share them out in full rounds.
			f.rec.Pause()
			fo.Clear("")
			require.NoError(t, fo.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay}))
			f.upsert(items("b", objects, "")...)
			var gone []string
			for i := 0; i < objects; i += 3 {
				gone = append(gone, fmt.Sprintf("a%05d", i))
			}
			f.remove(gone...)
			f.rec.Resume()
			waitBlocked(t, fo, workers, false)
			if workers > 1 {
				f.rec.Prune() // the loop prunes while the workers are busy
				waitBlocked(t, fo, workers, true)
			}

			// Every caller is blocked: nothing starts but the entries of
			// the batches in flight.
			inFlight := fo.InFlight()
			before := len(fo.Calls())
			batches, singles := map[int]bool{}, map[string]bool{}
			for _, c := range inFlight {
				batches[c.Batch] = c.Batch > 0
				singles[callID(c)] = c.Batch == 0
			}
			calls, _ := blocked(inFlight)
			t.Logf("stopping with %d call(s) blocked, %d objects in Error", calls, f.countKind(f.db.ReadTxn(), status.KindError))
			start := time.Now()
			f.stop()
			assert.Less(t, time.Since(start), 5*time.Second, "Stop must return promptly")
			assert.Empty(t, fo.InFlight(), "operations still running after Stop returned")

			// Once no goroutine of the hive is left, nothing can start an
			// operation any more: every call since the stop began is one
			// that was blocked, and it saw its context cancelled.
			goleak.VerifyNone(t, ignore)
			objs := 0
			for _, c := range fo.Calls()[before:] {
				objs++
				assert.True(t, batches[c.Batch] || singles[callID(c)], "%s started once the hive was stopping", c)
				assert.ErrorIs(t, c.Err, context.Canceled, "every blocked operation sees context.Canceled: %s", c)
			}
			if batch {
				assert.Greater(t, objs, 10*workers, "workers should hold large batches")
			}
		})
	}
}

// blocked counts the operation calls among calls in flight, a batch as
// one, and whether a prune is among them.
func blocked(calls []reconcilertest.Call) (n int, prune bool) {
	batches := map[int]bool{}
	for _, c := range calls {
		switch {
		case c.Op == reconcilertest.OpPrune:
			prune = true
		case c.Batch > 0:
			batches[c.Batch] = true
		default:
			n++
		}
	}
	return n + len(batches), prune
}

// callID identifies a call in flight and, once returned, in the log.
func callID(c reconcilertest.Call) string { return fmt.Sprint(c.Op, c.Key, c.Revision) }

// waitBlocked waits until n operation calls, and a prune if asked for, are
// in flight.
func waitBlocked(t *testing.T, fo *reconcilertest.FaultyOps[*item], n int, prune bool) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d operations (prune: %v) blocked", n, prune), func() (bool, <-chan struct{}) {
		inFlight, changed := fo.InFlightWatch()
		got, pruning := blocked(inFlight)
		return got >= n && (pruning || !prune), changed
	})
}

// Pause from inside a round. (Pause and Resume with every kind of change:
// testdata/pause.txtar; parked and queued work: testdata/pause_parked.txtar.)

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
	select { // what must not happen gets a chance to; a slow machine proves less
	case id := <-started:
		t.Errorf("%s started after Pause", id)
	case <-time.After(100 * time.Millisecond):
	}
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
