package reconciler_test

// Stopping a hive and starting the same hive again (as the "hive stop" and
// "hive start" script commands do) restarts the reconciler's job; work cut
// short by the stop is carried over.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Work carried over a stop is superseded by a change of the same object
// read after the start, also one that waits its turn as a refresh: a
// refresh carried over, then written again with the same Refreshing status
// while the hive was stopped, is applied once, not once as carried work and
// once as the new change.
func TestCarriedRefreshWrittenAgainIsAppliedOnce(t *testing.T) {
	tg := newTarget()
	held := tg.hold("held")
	f := startFixture(t, tg, nil)

	// One round takes both: held first, as a fresh change, then x, as a
	// refresh. held's update is in flight when the hive stops, so x is
	// carried over without having run.
	x := &item{ID: "x", Value: "1", Status: status.Refreshing()}
	f.insertAs(&item{ID: "held", Value: "1", Status: status.Pending()}, x)
	held.wait(t)

	f.stop()
	f.insertAs(x.clone()) // the same version and status, a new revision
	held.let()
	f.start()

	f.waitReconciled()
	applied := tg.applied()
	assert.Equal(t, 1, countOf(applied, "update x=1"), "updates of x: %v", applied)
	assert.Equal(t, 1, countOf(applied, "update held=1"), "updates of held: %v", applied)
}

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

// countOf returns how many times word is in words.
func countOf(words []string, word string) (n int) {
	for w := range slices.Values(words) {
		if w == word {
			n++
		}
	}
	return n
}
