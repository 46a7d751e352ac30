package reconciler_test

// Objects put back as they were, Done included, after the target changed
// (reconciler/doc.go, "Objects put back").

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

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

// An object put back as read before its delete, Done included, is applied
// again: after the delete ran (found by the outside randomized test, bug
// 5), or after a delete made while stopped, at some moment after the start.
func TestPutBackAfterItsDeleteIsAppliedAgain(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%v,deletedWhileStopped=%v", v, stopped), func(t *testing.T) {
				tg := newTarget()
				f := v.fixture(t, tg, nil)
				f.start()
				for i := range 20 {
					id := fmt.Sprint("k", i)
					f.upsert(&item{ID: id, Value: "v1"})
					saved := f.waitKind(id, status.KindDone)
					if stopped {
						f.converged(tg)
						f.stop()
						saved = f.takeOut(id)
						f.start()
						for range i * 100 {
							runtime.Gosched()
						}
					} else {
						f.reconciledTo(f.remove(id))
						require.False(t, tg.has(id, "v1"), "the delete of %s ran", id)
					}
					f.insertAs(saved)
					f.converged(tg)
				}
			})
		}
	}
}

// a put back as it was, Done, after a delete read while a's next update
// runs and a newer write, is applied after that update. Bug 5 (second review).
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

// a deleted after a round read its changes, pruned away, and put back as it
// was, Done, before the next read (so the delete never shows) is applied
// again; with rounds of one, also when the next read stops before it. The
// loop takes the prune and the round in either order: the test retries
// until the prune came first. Found by chaos after the first fix of bug 5.
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
				tg.updated = func(_ context.Context, it *item) error {
					if it.ID == "x" {
						f.remove("a") // after the round read its changes
					}
					return nil
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

// a deleted, pruned away, and put back as it was, Done, before a second
// prune, all while the loop reads nothing (every worker slot taken), is
// applied again.
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

// An object put back as read before its delete, Done, is applied again
// after 8192 more deletes; after 16384 its Done is believed (doc.go).
func TestPutBackAfterManyDeletes(t *testing.T) {
	for _, c := range []struct {
		others, perTxn int // perTxn 0: all in one
		applied        bool
		v              variant
	}{{8192, 0, true, variant{1, false}}, {8192, 500, true, variant{4, true}}, {16384, 0, false, variant{1, false}}} {
		t.Run(fmt.Sprintf("others=%d,perTxn=%d,%v", c.others, c.perTxn, c.v), func(t *testing.T) {
			tg := newTarget()
			f := c.v.fixture(t, tg, nil)
			f.start()
			f.upsert(&item{ID: "a", Value: "v1"})
			saved := f.waitKind("a", status.KindDone)
			others := items("o", c.others, "")
			keys := ids(others)
			f.upsert(others...)
			f.waitReconciled()
			f.reconciledTo(f.remove("a"))
			for len(keys) > 0 {
				n := len(keys)
				if c.perTxn > 0 {
					n = min(n, c.perTxn)
				}
				f.reconciledTo(f.remove(keys[:n]...))
				keys = keys[n:]
			}

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

// A delete and a put-back as read before it, Done, converge across a stop:
// the delete read before it, unread at it (every worker slot held), or both
// made while stopped; a delete unread at the stop runs after the start.
func TestPutBackAcrossARestart(t *testing.T) {
	for _, c := range []struct {
		when    string
		putBack bool
	}{
		{"delete read, then stop", true},
		{"delete read, stop and start, then put back", true},
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
			case "delete read, stop and start, then put back":
				f.reconciledTo(f.remove("a"))
				f.stop()
				f.start()
				f.insertAs(saved)
				f.waitApplied(tg, "a", "v1")
				return
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

// The same put-back, read while the update runs, is applied again: after
// the update, or after a stop that it answers with success (bug 4, second
// review).
func TestPutBackWhileItsUpdateRunsIsApplied(t *testing.T) {
	for _, c := range []struct {
		stop    bool
		workers int
	}{{false, 4}, {true, 2}} {
		t.Run(fmt.Sprintf("stop=%v", c.stop), func(t *testing.T) {
			tg := newTarget()
			held := tg.holdAfterApply("a", c.stop)
			f := startFixture(t, tg, nil, reconciler.WithConcurrency(c.workers), reconciler.WithPruning(0))
			f.insertAs(deleteAndPruneWhileHeld(t, f, tg, held))
			f.settle(2) // the object put back is read while the update runs
			require.False(t, tg.has("a", "v1"), "the prune removed a")
			if c.stop {
				f.stop() // the update returns success
				f.start()
			}
			held.let()
			f.waitApplied(tg, "a", "v1")
		})
	}
}

// An older version put back as it was, Done, while a newer version or a
// delete runs, is cut short by a stop or waits for a retry, is applied.
func TestOlderVersionPutBackOverANewerOneIsApplied(t *testing.T) {
	failV2 := func(tg *target) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		tg.updated = func(_ context.Context, it *item) error {
			if it.Value == "2" {
				return errors.New("applied, then failed")
			}
			return nil
		}
	}
	retrying := func(when string) func(t *testing.T, f *fixture, tg *target, was *item) {
		return func(t *testing.T, f *fixture, tg *target, was *item) {
			failV2(tg)
			f.upsert(&item{ID: "k", Value: "2"})
			f.waitKind("k", status.KindError)
			if when != "" {
				f.stop()
			}
			if when == "restart" {
				f.start()
			}
			f.insertAs(was)
			if when == "stopped" {
				f.start()
			}
		}
	}
	cutShort := func(t *testing.T, f *fixture, tg *target, was *item, succeed, beforeStop bool) {
		h := tg.holdAfterApply("k", succeed)
		f.upsert(&item{ID: "k", Value: "2"})
		h.wait(t)
		if beforeStop {
			f.insertAs(was)
		}
		f.stop()
		if !beforeStop {
			f.insertAs(was)
		}
		f.start()
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, f *fixture, tg *target, was *item)
	}{
		{"newer waiting for a retry", retrying("")},
		{"newer waiting for a retry, put back after a stop and start", retrying("restart")},
		{"newer waiting for a retry, put back while stopped", retrying("stopped")},
		{"newer running", func(t *testing.T, f *fixture, tg *target, was *item) {
			h := tg.holdAfterApply("k", false)
			f.upsert(&item{ID: "k", Value: "2"})
			h.wait(t)
			f.insertAs(was)
			h.let()
		}},
		{"newer cut short by a stop, failing, put back before it", func(t *testing.T, f *fixture, tg *target, was *item) {
			cutShort(t, f, tg, was, false, true)
		}},
		{"newer cut short by a stop, failing, put back while stopped", func(t *testing.T, f *fixture, tg *target, was *item) {
			cutShort(t, f, tg, was, false, false)
		}},
		// Succeeding as the stop cuts it, its Done is committed: put back
		// while stopped, with no delete between, v1 is believed (doc.go).
		{"newer cut short by a stop, succeeding, put back before it", func(t *testing.T, f *fixture, tg *target, was *item) {
			cutShort(t, f, tg, was, true, true)
		}},
		{"delete cut short by a stop after applying, put back while stopped", func(t *testing.T, f *fixture, tg *target, was *item) {
			del := make(chan struct{})
			tg.mu.Lock()
			tg.deleted = func(ctx context.Context, _ *item) error {
				close(del)
				<-ctx.Done()
				return ctx.Err()
			}
			tg.mu.Unlock()
			f.remove("k")
			recv(t, del, "the delete of k")
			f.stop()
			tg.mu.Lock()
			tg.deleted = nil
			tg.mu.Unlock()
			f.insertAs(was)
			f.start()
		}},
		{"delete applied, then failed, waiting for a retry", func(t *testing.T, f *fixture, tg *target, was *item) {
			failed := make(chan struct{}, 1)
			tg.mu.Lock()
			tg.deleted = func(context.Context, *item) error {
				select {
				case failed <- struct{}{}:
				default:
				}
				return errors.New("deleted, then failed")
			}
			tg.mu.Unlock()
			f.remove("k")
			recv(t, failed, "the failing Delete")
			f.insertAs(was)
		}},
	} {
		for _, v := range variants {
			t.Run(c.name+"/"+v.String(), func(t *testing.T) {
				tg := newTarget()
				f := v.fixture(t, tg, nil, reconciler.WithRetry(time.Hour, time.Hour))
				f.start()
				f.upsert(&item{ID: "k", Value: "1"})
				was := f.waitKind("k", status.KindDone)
				c.run(t, f, tg, was)
				f.converged(tg)
			})
		}
	}
}

// An object deleted and put back as it was around prunes, behind a backlog
// of fresh changes, is applied again.
func TestPutBackAroundPrunesIsApplied(t *testing.T) {
	for _, limited := range []bool{false, true} {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%v,roundsOf1At200PerSecond=%v", v, limited), func(t *testing.T) {
				var opts []reconciler.Option
				if limited {
					opts = append(opts, reconciler.WithRoundLimits(1, rate.NewLimiter(200, 1)))
				}
				tg := newTarget()
				f := v.fixture(t, tg, nil, opts...)
				f.start()
				for i := range 12 {
					id := fmt.Sprint("k", i)
					f.upsert(&item{ID: id, Value: "1"})
					f.converged(tg)
					f.upsert(items(fmt.Sprint("filler", i), 10, "1")...)
					was := f.takeOut(id)
					switch i % 4 {
					case 0: // once a prune has run
						tg.pruneNow(f)
						f.insertAs(was)
					case 1: // between two prunes
						tg.pruneNow(f)
						f.insertAs(was)
						tg.pruneNow(f)
					case 2: // while a prune is asked for
						tg.mu.Lock()
						n := tg.prunes
						tg.mu.Unlock()
						f.rec.Prune()
						f.insertAs(was)
						tg.waitPrunes(t, n+1)
					case 3: // twice, around prunes
						tg.pruneNow(f)
						f.insertAs(was)
						again := f.takeOut(id)
						tg.pruneNow(f)
						f.insertAs(again)
					}
					f.converged(tg)
				}
			})
		}
	}
}

// A prune while an object's delete is unread (behind a backlog), the
// object put back as it was, then maybe a stop or a second prune: applied.
func TestPutBackAfterAPruneWhileItsDeleteIsUnreadIsApplied(t *testing.T) {
	for _, then := range []string{"nothing", "stop after the put-back", "stop before the put-back", "second prune, then stop"} {
		for _, v := range variants {
			t.Run(then+"/"+v.String(), func(t *testing.T) {
				tg := newTarget()
				f := v.fixture(t, tg, nil, reconciler.WithRoundLimits(1, nil))
				f.start()
				for i := range 3 {
					id := fmt.Sprint("k", i)
					f.upsert(&item{ID: id, Value: "1"})
					f.converged(tg)
					was, _ := f.get(id)
					f.upsert(items(fmt.Sprint("filler", i), 2000, "1")...)
					f.remove(id)
					tg.pruneNow(f)
					switch then {
					case "nothing":
						f.insertAs(was)
					case "stop after the put-back":
						f.insertAs(was)
						f.stop()
						f.start()
					case "stop before the put-back":
						f.stop()
						f.insertAs(was)
						f.start()
					case "second prune, then stop":
						f.insertAs(was)
						tg.pruneNow(f)
						f.stop()
						f.start()
					}
					f.converged(tg)
				}
			})
		}
	}
}

// Both reconcilers of a status.Set apply again an object put back after
// its delete: read by both, pruned by one only, or at once.
func TestPutBackIsAppliedByEveryReconcilerOfASet(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			a, b := newTarget(), newTarget()
			var recB reconciler.Reconciler[*item]
			getA, setA := statusOf("a")
			f := startFixture(t, a, &with{getStatus: getA, setStatus: setA, setup: func(f *fixture) []reconciler.Option {
				getB, setB := statusOf("b")
				var err error
				recB, err = reconciler.Register(f.params, f.table, (*item).clone, setB, getB, b, nil,
					reconciler.WithName("b"), reconciler.WithConcurrency(workers), reconciler.WithPruning(0))
				require.NoError(t, err)
				return nil
			}}, reconciler.WithName("a"), reconciler.WithConcurrency(workers), reconciler.WithPruning(0))
			pending := func(id, value string) *item {
				return &item{ID: id, Value: value, Statuses: status.NewSet().Pending("a", "b")}
			}
			both := func(rev statedb.Revision) {
				f.reconciledTo(rev)
				_, _, err := recB.WaitUntilReconciled(ctxFor(t, timeout), rev)
				require.NoError(t, err)
			}
			for i := range 9 {
				id := fmt.Sprint("k", i)
				both(f.insertAs(pending(id, "1")))
				both(f.insertAs(pending("marker", fmt.Sprint(i))))
				was := f.takeOut(id)
				require.Equal(t, status.KindDone, was.Statuses.Get("a").Kind)
				require.Equal(t, status.KindDone, was.Statuses.Get("b").Kind)
				switch i % 3 {
				case 0:
					both(f.insertAs(pending("marker", fmt.Sprint("d", i))))
				case 1:
					a.pruneNow(f)
				}
				f.insertAs(was)
				both(f.insertAs(pending("marker", fmt.Sprint("x", i))))
				assert.True(t, a.has(id, "1"), "a: %s put back not applied", id)
				assert.True(t, b.has(id, "1"), "b: %s put back not applied", id)
			}
		})
	}
}

// Random writes, deletes, put-backs, prunes, pauses, stops and starts
// against a flaky target: at every quiet point the target holds the table.
func TestPutBackRandomized(t *testing.T) {
	for _, round := range []int{1000, 2} {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%v,round=%d", v, round), func(t *testing.T) {
				seed := uint64(time.Now().UnixNano())
				if s := os.Getenv("CONVERGE_PUTBACK_SEED"); s != "" {
					var err error
					seed, err = strconv.ParseUint(s, 10, 64)
					require.NoError(t, err)
				}
				t.Logf("seed %d (replay: CONVERGE_PUTBACK_SEED=%d)", seed, seed)
				rnd := rand.New(rand.NewPCG(seed, 30))
				var (
					on  atomic.Bool
					mu  sync.Mutex
					odd = rand.New(rand.NewPCG(seed, 31))
				)
				roll := func(n int) int { mu.Lock(); defer mu.Unlock(); return odd.IntN(n) }
				before := func(context.Context, *item) error {
					if !on.Load() {
						return nil
					}
					for range roll(50) {
						runtime.Gosched()
					}
					if roll(10) == 0 {
						return errors.New("flaky before")
					}
					return nil
				}
				after := func(context.Context, *item) error {
					if on.Load() && roll(10) == 0 {
						return errors.New("flaky after")
					}
					return nil
				}
				tg := newTarget()
				tg.update, tg.delete, tg.updated, tg.deleted = before, before, after, after
				f := v.fixture(t, tg, nil, reconciler.WithRoundLimits(round, nil), reconciler.WithRetry(time.Millisecond, 4*time.Millisecond))
				f.start()
				removed := map[string]*item{}
				paused := false
				var history []string
				step := func(format string, args ...any) {
					history = append(history, fmt.Sprintf(format, args...)+fmt.Sprintf("@%d", f.table.Revision(f.db.ReadTxn())))
				}
				quiet := func() {
					on.Store(false)
					if !f.up {
						f.start()
					}
					if paused {
						f.rec.Resume()
						paused = false
					}
					t.Logf("quiet point after: %v", history)
					f.converged(tg)
					history = history[:0]
				}
				for i := range 400 {
					on.Store(true)
					id := fmt.Sprint("m", rnd.IntN(6))
					switch r := rnd.IntN(100); {
					case r < 30:
						f.upsert(&item{ID: id, Value: fmt.Sprint(i)})
						step("put %s=%d", id, i)
					case r < 55:
						if o := f.takeOut(id); o != nil {
							removed[id] = o
							step("delete %s (was %q %v)", id, o.Value, o.Status)
						}
					case r < 80:
						if _, there := f.get(id); !there && removed[id] != nil {
							f.insertAs(removed[id])
							step("put back %s=%q %v", id, removed[id].Value, removed[id].Status)
						}
					case r < 88:
						f.rec.Prune()
						step("prune")
					case r < 92:
						if paused {
							f.rec.Resume()
						} else {
							f.rec.Pause()
						}
						paused = !paused
						step("paused=%v", paused)
					case r < 95:
						if f.up {
							f.stop()
						} else {
							f.start()
						}
						step("up=%v", f.up)
					case r < 97:
						quiet()
					default:
						for range rnd.IntN(2000) {
							runtime.Gosched()
						}
					}
				}
				quiet()
			})
		}
	}
}
