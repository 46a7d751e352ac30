package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// With workers, work queued while every worker is busy does not start
// while a prune runs, though the workers come free. Found by the second
// review.
func TestNoOperationStartsWhileAPruneRuns(t *testing.T) {
	tg := newTarget()
	started := make(chan string, 100)
	tg.update = func(_ context.Context, it *item) error {
		select {
		case started <- it.ID:
		default:
		}
		return nil
	}
	a, b := tg.hold("a"), tg.hold("b")
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0))
	f.upsert(&item{ID: "a"}, &item{ID: "b"})
	a.wait(t)
	b.wait(t)
	drain(started)
	f.upsert(&item{ID: "c"}) // queued: both workers are busy
	prune := tg.hold(pruneKey)
	f.rec.Prune()
	prune.wait(t)
	a.let() // the workers are free while the prune runs
	b.let()
	quiet(t, started, 200*time.Millisecond, "started while the prune ran")
	prune.let()
	f.waitReconciled()
	obj, _ := f.get("c")
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}
