package reconciler_test

// An object put back as it was before, its status included (Done too),
// after the target changed: when it is applied again and when its status
// is believed (reconciler/doc.go, "Objects put back").

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// startWithADone starts a fixture over a new target with opts, writes
// a=v1 and returns a as read once it is Done.
func startWithADone(t *testing.T, opts ...reconciler.Option) (*target, *fixture, *item) {
	t.Helper()
	tg := newTarget()
	f := startFixture(t, tg, nil, opts...)
	f.upsert(&item{ID: "a", Value: "v1"})
	return tg, f, f.waitKind("a", status.KindDone)
}

// Once its delete has run, the object read before the delete, put back as
// it was with its Done status, is applied again: that Done speaks of what
// the delete removed. Found by the outside randomized test (bug 5).
func TestPutBackAfterItsDeleteIsAppliedAgain(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			tg, f, saved := startWithADone(t, reconciler.WithConcurrency(workers))
			f.reconciledTo(f.remove("a")) // the delete has been read and run
			require.False(t, tg.has("a", "v1"), "the delete of a ran")
			f.insertAs(saved)
			f.waitApplied(tg, "a", "v1")
		})
	}
}

// a's next update is in flight; a is deleted, a new value written, and a
// put back as it was before, Done included. The delete was read, so that
// Done no longer says anything about the target: the object put back is
// applied after the update, and the new value is not left standing. Bug 5
// in the words of the second review.
func TestPutBackWhileTheNextUpdateRunsIsAppliedAgain(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			tg, f, saved := startWithADone(t, reconciler.WithConcurrency(workers))
			update := tg.hold("a")
			f.upsert(&item{ID: "a", Value: "v2"})
			update.wait(t)
			f.remove("a")
			if workers > 1 { // with one worker the loop waits in the update
				f.settle(1) // the delete has been read while the update runs
			}
			f.upsert(&item{ID: "a", Value: "v3"})
			f.insertAs(saved)
			update.let()
			f.waitApplied(tg, "a", "v1")
		})
	}
}

// a is deleted after the loop read the changes of a round that runs a
// prune, the prune removes a from the target, and a is put back as it was,
// Done included, before the loop reads the changes again. The delete never
// shows (the change iterator gives only the object put back), but the
// prune's snapshot lacks a: the object put back is applied again. Found by
// chaos after the first fix of bug 5.
//
// The prune must be asked for in the same wake of the loop as the round
// that reads x, whose update deletes a; the loop takes the two in either
// order, so the test tries until it sees the prune's (Delete never called)
// and checks every try. With one object per round, the first read after
// the prune may stop past the prune's revision before the object put back
// (z comes between): the snapshot must be kept until that object is read.
func TestPutBackAfterAPruneRemovedItIsAppliedAgain(t *testing.T) {
	for _, round := range []int{1000, 1} {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			seen := 0
			for try := 0; try < 40 && seen < 3; try++ {
				tg, f, saved := startWithADone(t, reconciler.WithPruning(0), reconciler.WithRoundLimits(round, nil))
				held := tg.holdAfterApply("y", false)
				f.upsert(&item{ID: "y", Value: "x"})
				held.wait(t) // the loop waits in y's update
				tg.mu.Lock()
				tg.updated = func(it *item) {
					if it.ID == "x" {
						f.remove("a") // after the round read its changes
					}
				}
				tg.pruned = func() {
					f.upsert(&item{ID: "z", Value: "z"})
					f.insertAs(saved)
				}
				prunes := tg.prunes
				tg.mu.Unlock()
				f.upsert(&item{ID: "x", Value: "x"})
				f.rec.Prune()
				held.let()
				tg.waitPrunes(t, prunes+1)
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

// Two prunes run while the loop reads no changes (every worker slot is
// taken: two running, two waiting for a worker): the first removes a,
// deleted meanwhile, from the target; a is put back as it was, Done
// included, before the second. The second prune's snapshot has a, but says
// nothing of what the first removed: a is applied again, not believed Done.
func TestPutBackBetweenTwoPrunesIsAppliedAgain(t *testing.T) {
	rounds := newRoundWatcher()
	tg, f, saved := startWithADone(t, reconciler.WithConcurrency(2), reconciler.WithRoundLimits(1, nil),
		reconciler.WithPruning(0), reconciler.WithMetrics(rounds))
	f.settle(1) // the first prune, once the table is initialized, is over
	var holds []*hold
	for _, id := range []string{"y1", "y2", "y3", "y4"} {
		holds = append(holds, tg.hold(id))
	}
	f.upsert(&item{ID: "y1"}, &item{ID: "y2"}, &item{ID: "y3"}, &item{ID: "y4"})
	rounds.waitRound(t, "with four operations held", func(s metrics.RoundStats) bool { return s.InFlight == 4 })
	f.remove("a")
	tg.pruneNow(f)
	require.False(t, tg.has("a", "v1"), "the first prune removed a")
	f.insertAs(saved)
	tg.pruneNow(f)
	for _, h := range holds {
		h.let()
	}
	f.waitApplied(tg, "a", "v1")
}

// The reconciler remembers the keys of the last 8192 deletes it read at
// least: an object put back as read before its delete, Done included, is
// applied again after 8192 more deletes. Past the 16384 keys it remembers
// at most, such a Done is believed, as doc.go says.
func TestPutBackAfterManyDeletes(t *testing.T) {
	for _, c := range []struct {
		others  int
		applied bool
	}{{8192, true}, {16384, false}} {
		t.Run(fmt.Sprintf("others=%d", c.others), func(t *testing.T) {
			tg, f, saved := startWithADone(t)
			others := make([]*item, c.others)
			ids := make([]string, c.others)
			for i := range others {
				ids[i] = fmt.Sprintf("o%05d", i)
				others[i] = &item{ID: ids[i]}
			}
			f.upsert(others...)
			f.waitReconciled()
			f.remove("a")
			f.reconciledTo(f.remove(ids...))

			f.insertAs(saved)
			if c.applied {
				f.waitApplied(tg, "a", "v1")
				return
			}
			f.reconciledTo(f.upsert(&item{ID: "marker"}))
			obj, _ := f.get("a")
			assert.Equal(t, saved.Status.ID(), obj.Status.ID(), "believed: the status put back stays")
			assert.False(t, tg.has("a", "v1"), "believed: the target lacks a")
		})
	}
}

// A delete and the put-back of the object as read before it, Done
// included, converge whatever the hive does in between: the delete read
// before a stop, the delete still unread at the stop (with every worker
// slot held, the loop reads nothing), or both made while it is stopped. A
// delete unread at the stop and not followed by a put-back runs after the
// start.
func TestPutBackAcrossARestart(t *testing.T) {
	for _, c := range []struct {
		when    string
		putBack bool
	}{
		{"delete read, then stop", true},
		{"delete unread at the stop", true},
		{"delete unread at the stop", false},
		{"both while stopped", true},
	} {
		t.Run(fmt.Sprintf("%s/put-back=%v", c.when, c.putBack), func(t *testing.T) {
			tg, f, saved := startWithADone(t, reconciler.WithConcurrency(2), reconciler.WithRoundLimits(1, nil))
			switch c.when {
			case "delete read, then stop":
				f.reconciledTo(f.remove("a"))
				require.False(t, tg.has("a", "v1"), "a's delete ran")
				f.stop()
				f.insertAs(saved)
			case "delete unread at the stop":
				var holds []*hold
				for _, id := range []string{"y1", "y2", "y3", "y4"} {
					holds = append(holds, tg.hold(id))
				}
				f.upsert(&item{ID: "y1"}, &item{ID: "y2"}, &item{ID: "y3"}, &item{ID: "y4"})
				holds[0].wait(t)
				holds[1].wait(t)
				f.remove("a")
				f.stop() // cuts y1 and y2 short
				for _, h := range holds {
					h.let()
				}
				if c.putBack {
					f.insertAs(saved)
				}
			default:
				f.stop()
				f.remove("a")
				f.insertAs(saved) // never deleted from the target
			}
			f.start()
			if c.putBack {
				f.waitApplied(tg, "a", "v1")
				return
			}
			f.reconciledTo(f.upsert(&item{ID: "marker"}))
			assert.False(t, tg.has("a", "v1"), "a's delete, unread at the stop, did not run after the start")
		})
	}
}

// deleteAndPruneWhileHeld writes a=v1, and while its update is held by h
// (v1 applied already) deletes a and has a prune remove it from the
// target. It returns a as read while its update was held.
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

// a's update is in flight when a is deleted, and a prune then removes a
// from the target. A writer puts a back as it was read (status identity
// included) after the round that commits the update has read its changes
// and before that commit: here the status setter, called as the commit
// prepares a's Done, writes it. The object put back is new work: the
// delete parked behind the update must not run after it, and a must end
// applied and Done. Found by the second review (bug 3).
func TestPutBackBetweenARoundsReadAndItsCommitIsApplied(t *testing.T) {
	tg := newTarget()
	held := tg.holdAfterApply("a", false)
	var f *fixture
	var armed atomic.Bool
	var read *item
	wroteBack := make(chan struct{})
	setter := func(it *item, st status.Status) *item {
		if it.ID == "a" && st.Kind == status.KindDone && armed.CompareAndSwap(true, false) {
			// A writer woken here commits before the reconciler's
			// commit. Waited for with a deadline: a reconciler that
			// calls the setter inside its write transaction makes the
			// writer wait for the commit instead.
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

// As the test before, but the object put back is read while the update
// runs, so it is to be applied again after it; then the hive stops, and
// the update returns success as it does. The re-apply survives the stop:
// after the start the target holds a again. Found by the second review
// (bug 4).
func TestPutBackWhileItsUpdateIsCutShortByAStopIsApplied(t *testing.T) {
	tg := newTarget()
	held := tg.holdAfterApply("a", true)
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0))
	f.insertAs(deleteAndPruneWhileHeld(t, f, tg, held))
	f.settle(2) // the object put back is read while the update runs
	f.stop()    // the update returns success
	f.start()
	f.waitApplied(tg, "a", "v1")
}

// A prune that runs while an update is in flight for an object deleted
// meanwhile may remove what the update applies; if the object then comes
// back as that very version, it is applied again, not taken as done.
func TestPutBackAfterAPruneWhileItsUpdateRunsIsApplied(t *testing.T) {
	tg := newTarget()
	held := tg.holdAfterApply("a", false) // a is in the target while its update is in flight
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(4))
	tg.waitPrunes(t, 1) // the first prune, once the table is initialized
	f.upsert(&item{ID: "a", Value: "v1"})
	held.wait(t)
	inFlight, _ := f.get("a")
	f.remove("a")
	f.settle(1)
	tg.pruneNow(f)
	f.insertAs(inFlight) // back to the version in flight
	f.settle(2)
	require.False(t, tg.has("a", "v1"), "the prune removed a while its update was in flight")
	held.let()
	f.waitApplied(tg, "a", "v1")
}
