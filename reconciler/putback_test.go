package reconciler_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// roundWatcher is unpublished expvar metrics that also keep the last
// round's figures.
type roundWatcher struct {
	metrics.Metrics
	mu      sync.Mutex
	last    metrics.RoundStats
	changed chan struct{} // closed and replaced at every round
}

func newRoundWatcher() *roundWatcher {
	return &roundWatcher{Metrics: metrics.NewUnpublishedExpVar(), changed: make(chan struct{})}
}

func (w *roundWatcher) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = s
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitRound waits until the last round's figures satisfy ok, and returns
// them.
func (w *roundWatcher) waitRound(t *testing.T, what string, ok func(metrics.RoundStats) bool) metrics.RoundStats {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		w.mu.Lock()
		s, changed := w.last, w.changed
		w.mu.Unlock()
		if ok(s) {
			return s
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no round %s (last: %+v)", what, s)
		}
	}
}

// pruningTarget is a holdingTarget whose Prune removes every key the
// desired set lacks and then reports on pruned.
type pruningTarget struct {
	*funcOps
	h      *holdingTarget
	pruned chan struct{}
}

func newPruningTarget() *pruningTarget {
	h := newHoldingTarget()
	return &pruningTarget{funcOps: h.ops(), h: h, pruned: make(chan struct{}, 16)}
}

func (p *pruningTarget) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	want := map[string]bool{}
	for obj := range objs {
		want[obj.ID] = true
	}
	p.h.mu.Lock()
	for k := range p.h.data {
		if !want[k] {
			delete(p.h.data, k)
		}
	}
	p.h.mu.Unlock()
	p.pruned <- struct{}{}
	return nil
}

// prune asks for a prune and waits until one has run after the request.
func (p *pruningTarget) prune(t *testing.T, f *fixture, what string) {
	t.Helper()
	for len(p.pruned) > 0 {
		<-p.pruned
	}
	f.rec.Prune()
	recv(t, p.pruned, what)
}

// Two prunes run while the loop reads no changes (every worker slot is
// taken: two running, two waiting for a worker): the first removes a,
// deleted meanwhile, from the target; a is put back as it was, its Done
// status included, before the second. The second prune's snapshot has a,
// but says nothing of what the first removed: a is applied again, not
// believed Done.
func TestPutBackBetweenTwoPrunesIsAppliedAgain(t *testing.T) {
	tg, rounds := newPruningTarget(), newRoundWatcher()
	f := startFixture(t, tg, nil, reconciler.WithConcurrency(2), reconciler.WithRoundLimits(1, nil),
		reconciler.WithPruning(0), reconciler.WithMetrics(rounds))
	f.upsert(&item{ID: "a", Value: "v1"})
	saved := f.waitKind("a", status.KindDone)
	f.settle(1) // the first prune, once the table is initialized, is over

	var holds []*heldOp
	for _, id := range []string{"y1", "y2", "y3", "y4"} {
		holds = append(holds, tg.h.hold(id))
	}
	f.upsert(&item{ID: "y1"}, &item{ID: "y2"}, &item{ID: "y3"}, &item{ID: "y4"})
	rounds.waitRound(t, "with four operations held", func(s metrics.RoundStats) bool { return s.InFlight == 4 })
	f.remove("a")
	tg.prune(t, f, "the first prune")
	_, ok := tg.h.get("a")
	require.False(t, ok, "the first prune removed a")
	f.insertAs(saved)
	tg.prune(t, f, "the second prune")
	for _, h := range holds {
		close(h.release)
	}

	waitApplied(t, f, tg.h.get, "a", "v1")
}

// A version written while an operation on its object is in flight waits
// behind it, and counts in the queue depth until it starts.
func TestParkedVersionCountsInQueueDepth(t *testing.T) {
	tg, rounds := newHoldingTarget(), newRoundWatcher()
	f := startFixture(t, tg.ops(), nil, reconciler.WithConcurrency(2), reconciler.WithMetrics(rounds))
	held := tg.hold("a")
	f.upsert(&item{ID: "a", Value: "v1"})
	waitHeld(t, held, "the update of a=v1")
	f.upsert(&item{ID: "a", Value: "v2"})
	s := rounds.waitRound(t, "that read a=v2", func(s metrics.RoundStats) bool { return s.InFlight == 1 && s.Depth > 0 })
	assert.Equal(t, 1, s.Depth, "a=v2, parked behind a=v1")
	close(held.release)
	waitApplied(t, f, tg.get, "a", "v2")
	s = rounds.waitRound(t, "after a=v2", func(s metrics.RoundStats) bool { return s.InFlight == 0 })
	assert.Zero(t, s.Depth)
}

// The reconciler remembers the keys of the last 8192 deletes it read at
// least: an object put back as read before its delete, Done status
// included, is applied again after 8192 more deletes. Past the 16384 keys
// it remembers at most, such a Done is believed, as doc.go says.
func TestPutBackAfterManyDeletes(t *testing.T) {
	for _, c := range []struct {
		others  int
		applied bool
	}{{8192, true}, {16384, false}} {
		t.Run(fmt.Sprintf("others=%d", c.others), func(t *testing.T) {
			tg, f, saved := startWithADone(t, 1, "v1")
			others := make([]*item, c.others)
			ids := make([]string, c.others)
			for i := range others {
				ids[i] = fmt.Sprintf("o%05d", i)
				others[i] = &item{ID: ids[i]}
			}
			f.upsert(others...)
			f.waitReconciled()
			f.remove("a")
			rev := f.remove(ids...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
			require.NoError(t, err)

			f.insertAs(saved)
			if c.applied {
				waitApplied(t, f, tg.get, "a", "v1")
				return
			}
			last := f.upsert(&item{ID: "marker"})
			_, _, err = f.rec.WaitUntilReconciled(ctx, last)
			require.NoError(t, err)
			obj, _ := f.get("a")
			assert.Equal(t, saved.Status.ID(), obj.Status.ID(), "believed: the status put back stays")
			_, has := tg.get("a")
			assert.False(t, has, "believed: the target lacks a")
		})
	}
}

// A delete and the put-back of the object as read before it, Done status
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
		when, putBack := c.when, c.putBack
		t.Run(fmt.Sprintf("%s/put-back=%v", when, putBack), func(t *testing.T) {
			tg := newHoldingTarget()
			f := startFixture(t, tg.ops(), nil, reconciler.WithConcurrency(2), reconciler.WithRoundLimits(1, nil))
			f.upsert(&item{ID: "a", Value: "v1"})
			saved := f.waitKind("a", status.KindDone)
			log := hivetest.Logger(t)
			switch when {
			case "delete read, then stop":
				rev := f.remove("a")
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
				require.NoError(t, err)
				_, has := tg.get("a")
				require.False(t, has, "a's delete ran")
				require.NoError(t, f.hive.Stop(log, context.Background()))
				f.insertAs(saved)
				require.NoError(t, f.hive.Start(log, context.Background()))
				waitApplied(t, f, tg.get, "a", "v1")
			case "delete unread at the stop":
				var holds []*heldOp
				var busy []*item
				for _, id := range []string{"y1", "y2", "y3", "y4"} {
					holds = append(holds, tg.hold(id))
					busy = append(busy, &item{ID: id})
				}
				f.upsert(busy...)
				waitHeld(t, holds[0], "the update of y1")
				waitHeld(t, holds[1], "the update of y2")
				f.remove("a")
				require.NoError(t, f.hive.Stop(log, context.Background())) // cuts y1 and y2 short
				for _, h := range holds {
					close(h.release)
				}
				if putBack {
					f.insertAs(saved)
				}
				require.NoError(t, f.hive.Start(log, context.Background()))
				if putBack {
					waitApplied(t, f, tg.get, "a", "v1")
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, _, err := f.rec.WaitUntilReconciled(ctx, f.upsert(&item{ID: "marker"}))
				require.NoError(t, err)
				_, has := tg.get("a")
				assert.False(t, has, "a's delete, unread at the stop, did not run after the start")
			default:
				require.NoError(t, f.hive.Stop(log, context.Background()))
				f.remove("a")
				f.insertAs(saved)
				require.NoError(t, f.hive.Start(log, context.Background()))
				waitApplied(t, f, tg.get, "a", "v1") // never deleted from the target
			}
		})
	}
}
