package reconciler_test

// Objects put back as they were, Done included, after the target changed
// (reconciler/doc.go, "Objects put back"), where an operation is held
// after applying or a hook acts at a precise point. The rest are scripts:
// testdata/putback*.txtar (deletes, stops, prunes, a status set, 16384
// deletes); random schedules of them: TestChaos. Also objects changed back
// to the very version in flight.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// a deleted after a round read its changes, pruned away, and put back as it
// was, Done, before the next read (so the delete never shows) is applied
// again; with rounds of one, also when the next read stops before it. The
// loop takes the prune and the rounds in any order: the test retries until
// the prune came after the update of x and before the delete was read.
// Found by chaos after the first fix of bug 5.
func TestPutBackAfterAPruneRemovedItIsAppliedAgain(t *testing.T) {
	for _, round := range []int{1000, 1} {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			seen := 0
			for try := 0; try < 40 && seen < 3; try++ {
				tg := newTarget()
				f := startFixture(t, tg, nil, reconciler.WithPruning(0), reconciler.WithRoundLimits(round, nil))
				f.upsert(&item{ID: "a", Value: "v1"})
				saved := f.waitKind("a", status.KindDone)
				held := tg.holdAfterApply("y", false)
				f.upsert(&item{ID: "y", Value: "x"})
				held.wait(t) // the loop waits in y's update
				tg.mu.Lock()
				tg.updated = func(_ context.Context, it *item) error {
					if it.ID == "x" {
						f.remove("a") // after the round read its changes
					}
					return nil
				}
				early := false // the prune came before the update of x
				tg.pruned = func(context.Context) {
					if _, early = f.get("a"); early {
						return
					}
					f.upsert(&item{ID: "z", Value: "z"})
					f.insertAs(saved)
				}
				prunes := tg.returned
				tg.mu.Unlock()
				f.upsert(&item{ID: "x", Value: "x"})
				f.rec.Prune()
				held.let()
				tg.waitPrunes(t, prunes+1)
				if early {
					f.stop()
					continue
				}
				f.waitApplied(tg, "a", "v1")
				if all, _ := count(tg, reconcilertest.OpDelete, ""); all == 0 {
					seen++ // the prune removed a, and its delete was never read
				}
				f.stop()
			}
			require.Positive(t, seen, "the prune never ran before the delete was read")
		})
	}
}

// deleteAndPruneWhileHeld writes a=v1 and, while its update is held by h
// after applying, deletes a and prunes it away; it returns a as read then.
func deleteAndPruneWhileHeld(t *testing.T, f *fixture, tg *target, h *hold) *item {
	t.Helper()
	f.upsert(&item{ID: "a", Value: "v1"})
	h.wait(t)
	read, ok := f.get("a")
	require.True(t, ok)
	f.remove("a")
	f.settle(1) // the delete is read while the update runs
	tg.pruneNow(f)
	require.False(t, tg.has("a", "v1"), "the prune left a in the target")
	return read
}

// a, deleted and pruned away while its update runs, put back as read
// between the committing round's read and its commit (from the status
// setter) is applied, the parked delete not run after it. Bug 3 (second
// review).
func TestPutBackBetweenARoundsReadAndItsCommitIsApplied(t *testing.T) {
	tg := newTarget()
	held := tg.holdAfterApply("a", false)
	var f *fixture
	var armed atomic.Bool
	var read *item
	wroteBack := make(chan struct{})
	setter := func(it *item, st status.Status) *item {
		if it.ID == "a" && st.Kind == status.KindDone && armed.CompareAndSwap(true, false) {
			// Bounded: a setter called inside the commit's write
			// transaction would make the writer wait for it.
			go func() {
				f.insertAs(read)
				close(wroteBack)
			}()
			select {
			case <-wroteBack:
			case <-time.After(2 * time.Second):
			}
		}
		it.Status = st
		return it
	}
	f = startFixture(t, tg, &with{setStatus: setter}, reconciler.WithConcurrency(2), reconciler.WithPruning(0))
	read = deleteAndPruneWhileHeld(t, f, tg, held)
	armed.Store(true)
	held.let()
	recv(t, wroteBack, "the write-back")
	f.waitApplied(tg, "a", "v1")
}

// The same put-back, read while the update runs, is applied again after a
// stop that the update answers with success (bug 4, second review). (The
// update answering with its own success: testdata/putback_held.txtar.)
func TestPutBackWhileItsUpdateRunsIsAppliedAfterAStop(t *testing.T) {
	tg := newTarget()
	held := tg.holdAfterApply("a", true)
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0))
	f.insertAs(deleteAndPruneWhileHeld(t, f, tg, held))
	f.settle(2) // the object put back is read while the update runs
	require.False(t, tg.has("a", "v1"), "the prune removed a")
	f.stop() // the update returns success
	f.start()
	held.let()
	f.waitApplied(tg, "a", "v1")
}

// An older version put back as it was, Done, before a stop that cuts its
// newer version short while that version reports success (its Done is
// committed), is applied. (Newer versions and deletes failing, held,
// waiting for a retry or cut short: testdata/putback_older.txtar.)
func TestOlderVersionPutBackOverANewerOneSucceedingAtAStopIsApplied(t *testing.T) {
	forVariants(t, variants, func(t *testing.T, v variant) {
		tg := newTarget()
		f := v.start(t, tg, nil, reconciler.WithRetry(time.Hour, time.Hour))
		f.upsert(&item{ID: "k", Value: "1"})
		was := f.waitKind("k", status.KindDone)
		h := tg.holdAfterApply("k", true)
		f.upsert(&item{ID: "k", Value: "2"})
		h.wait(t)
		f.insertAs(was)
		f.stop()
		f.start()
		f.converged(tg)
	})
}

// An object changed while its operation is in flight, and then written back
// as the very version in flight (its status identity included).

// Whatever happened in between (a delete, a delete and a new value, a
// newer version; or, with the delete that follows the update held in
// turn, a new value and the version in flight written while it runs),
// once the version in flight is written back it is what the target ends
// up holding: after a delete the same status identity is new work, and a
// newer version must not be applied after it. "delete, newer version" was
// found by the second review (bug 5); "while its delete runs" is bug 5 in
// the order the outside randomized test met it.
func TestChangedBackToTheVersionInFlightEndsApplied(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		for _, between := range []string{"delete", "delete, newer version", "newer version", "newer version, unsettled", "while its delete runs"} {
			t.Run(fmt.Sprintf("workers=%d/%s", workers, between), func(t *testing.T) {
				tg := newTarget()
				held := tg.hold("a")
				f := startFixture(t, tg, nil, reconciler.WithConcurrency(workers))
				settle := func(n int) {
					if workers > 1 { // with one worker the loop waits in the update
						f.settle(n)
					}
				}
				f.upsert(&item{ID: "a", Value: "v1"})
				held.wait(t)
				inFlight, ok := f.get("a")
				require.True(t, ok)
				switch between {
				case "delete":
					f.remove("a")
					settle(1)
				case "delete, newer version":
					f.remove("a")
					settle(1)
					f.upsert(&item{ID: "a", Value: "v2"})
				case "while its delete runs":
					f.remove("a")
					settle(1) // the delete has been read while the update runs
					del := tg.hold("a")
					held.let()
					del.wait(t)
					held = del
					f.upsert(&item{ID: "a", Value: "v2"})
				default:
					f.upsert(&item{ID: "a", Value: "v2"})
					settle(1)
				}
				f.insertAs(inFlight) // back to the version being applied
				if between != "newer version, unsettled" {
					// Else the change back may still be unread when the
					// update in flight is committed.
					settle(2)
				}
				held.let()
				f.waitApplied(tg, "a", "v1")
			})
		}
	}
}
