package reconciler_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// firsts returns a func that reports whether it is called for id the
// first time.
func firsts() func(id string) bool {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		first := !seen[id]
		seen[id] = true
		return first
	}
}

// asksFirst makes the first successful Update of each key in plan ask for
// a re-check after plan's duration, with the operation's context;
// entriesAskFirst makes the first success of each key's batch entry set
// its RecheckAfter so.
func asksFirst(o *target, plan map[string]time.Duration) {
	first := firsts()
	o.setAfter(func(ctx context.Context, it *item) {
		if d, ok := plan[it.ID]; ok && first(it.ID) {
			reconciler.RecheckAfter(ctx, d)
		}
	})
}

func entriesAskFirst(o *target, plan map[string]time.Duration) {
	first := firsts()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ask = func(it *item) time.Duration {
		if d, ok := plan[it.ID]; ok && first(it.ID) {
			return d
		}
		return 0
	}
}

// clock is an object whose re-check, asked for after d, shows that at
// least d has passed on the reconciler's side (re-checks of objects asked
// for earlier with a shorter d are due before it).
const clock = "~clock"

// pastClock writes the clock and waits until its re-check has run and
// everything up to it is reconciled: re-checks asked for a shorter time
// before it have run by then.
func (f *fixture) pastClock(o *target) {
	f.t.Helper()
	f.put(clock, "0")
	o.waitUpdates(f.t, clock, 2)
	f.caughtUp()
}

// kitctxKey is a context key of the tests' own.
type kitctxKey struct{}

// Which asks re-check an object (RecheckAfter): the last ask an Update
// makes with its own context, for d > 0, once, d later, if the object still
// carries the Done status it was asked for; asks from goroutines while
// Update runs are safe. Asks that do nothing: a context not from the
// reconciler, d <= 0, one overridden by a later longer one, a huge d (it
// saturates rather than wrapping into a re-check now), a failed Update's
// (its retry decides), Delete's and Prune's. A delete drops the re-check:
// the object is never resurrected in the target or the table, and a
// re-insert is new work without the old ask; an object written back by a
// user with a Done status of its own is not re-checked.
func TestRecheckAsks(t *testing.T) {
	asks := map[string][]time.Duration{
		"zero": {0}, "negative": {-time.Second, -1 << 63}, "huge": {math.MaxInt64}, "huge-1ns": {math.MaxInt64 - 1},
		"later-longer": {10 * time.Millisecond, time.Hour}, "later-shorter": {time.Hour, 20 * time.Millisecond},
		"deleted": {200 * time.Millisecond}, "recreated": {200 * time.Millisecond}, "user-done": {200 * time.Millisecond},
		clock: {400 * time.Millisecond},
	}
	want := map[string]int{"foreign": 1, "zero": 1, "negative": 1, "huge": 1, "huge-1ns": 1, "later-longer": 1,
		"later-shorter": 2, "concurrent": 2, "deleted": 1, "recreated": 2, "user-done": 1, "failing": 1}
	o := newTarget()
	var failing atomic.Int64 // calls of failing's Update
	o.update = func(ctx context.Context, it *item) error {
		if it.ID == "failing" && failing.Add(1) == 1 {
			reconciler.RecheckAfter(ctx, 10*time.Millisecond)
			return errKitObject
		}
		return nil
	}
	first := firsts()
	o.setAfter(func(ctx context.Context, it *item) {
		if !first(it.ID) {
			return
		}
		switch it.ID {
		case "foreign":
			reconciler.RecheckAfter(context.Background(), 10*time.Millisecond)
			reconciler.RecheckAfter(context.WithValue(context.Background(), kitctxKey{}, 1), 10*time.Millisecond)
		case "concurrent":
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 50 {
						reconciler.RecheckAfter(ctx, time.Hour)
					}
				})
			}
			wg.Wait()
			reconciler.RecheckAfter(ctx, 20*time.Millisecond)
		}
		for _, d := range asks[it.ID] {
			reconciler.RecheckAfter(ctx, d)
		}
	})
	o.deleted = func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, time.Millisecond) }
	o.pruned = func(ctx context.Context) { reconciler.RecheckAfter(ctx, time.Millisecond) }
	f := variant{1, false}.start(t, o, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	keys := slices.Sorted(maps.Keys(want))
	f.upsert(kititems("1", keys...)...)
	done := f.waitKind("user-done", status.KindDone).clone()
	done.Status = status.Done()
	f.insertAs(done)
	f.waitKind("deleted", status.KindDone)
	f.waitKind("recreated", status.KindDone)
	f.remove("deleted", "recreated")
	f.caughtUp()
	f.put("recreated", "1") // before its old re-check is due
	o.pruneNow(f)
	f.pastClock(o)
	for _, k := range keys {
		assert.Len(t, o.updates(k), want[k], "updates of %s", k)
	}
	assert.Equal(t, int64(2), failing.Load(), "failing failed once, then succeeded once: its failed attempt's ask re-checked it")
	_, found := f.get("deleted")
	assert.False(t, found, "deleted resurrected in the table")
	assert.False(t, o.has("deleted", "1"), "deleted resurrected in the target")
}

// BatchEntry.RecheckAfter re-checks the entries that set it, and only
// them; a huge one saturates, with the batch's context too.
func TestRecheckBatchEntry(t *testing.T) {
	o := newTarget()
	huge := map[string]time.Duration{"huge": math.MaxInt64, "huge-1ns": math.MaxInt64 - 1}
	asksFirst(o, huge)
	entriesAskFirst(o, map[string]time.Duration{"a": 30 * time.Millisecond, "b": 30 * time.Millisecond,
		"huge": math.MaxInt64, "huge-1ns": math.MaxInt64 - 1, clock: 300 * time.Millisecond})
	f := variant{4, true}.start(t, o, nil)
	f.upsert(kititems("1", "a", "b", "c", "huge", "huge-1ns")...)
	f.pastClock(o)
	for k, n := range map[string]int{"a": 2, "b": 2, "c": 1, "huge": 1, "huge-1ns": 1} {
		assert.Len(t, o.updates(k), n, "updates of %s", k)
	}
}

// A re-check that falls due while the reconciler is paused, stopped or held
// by an open circuit breaker is not lost: it runs on Resume, after the
// start, once the target answers.
func TestRecheckDueWhileHeld(t *testing.T) {
	for _, c := range []struct {
		name         string
		v            variant
		opts         []reconciler.Option
		hold, unhold func(f *fixture, o *target, m *kitmetrics)
	}{
		{"paused", variant{1, false}, nil,
			func(f *fixture, _ *target, _ *kitmetrics) { f.rec.Pause() }, func(f *fixture, _ *target, _ *kitmetrics) { f.rec.Resume() }},
		{"stopped", variant{4, false}, nil,
			func(f *fixture, _ *target, _ *kitmetrics) { f.stop() }, func(f *fixture, _ *target, _ *kitmetrics) { f.start() }},
		{"breaker open", variant{1, false}, []reconciler.Option{reconciler.WithCircuitBreaker(2, 5*time.Millisecond, nil),
			reconciler.WithRetry(time.Millisecond, 10*time.Millisecond)},
			func(f *fixture, o *target, m *kitmetrics) {
				o.down()
				f.upsert(items("x", 3, "1")...)
				m.waitOpen(f.t, 1)
			},
			func(_ *fixture, o *target, _ *kitmetrics) { o.recover() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, m := newTarget(), newKitMetrics()
			asksFirst(o, map[string]time.Duration{"a": 100 * time.Millisecond})
			f := c.v.start(t, o, nil, append(c.opts, reconciler.WithMetrics(m))...)
			f.put("a", "1")
			f.waitKind("a", status.KindDone)
			c.hold(f, o, m)
			before := len(o.updates("a")) // 2 if the re-check came before the hold
			observe(200 * time.Millisecond)
			assert.Len(t, o.updates("a"), before, "updated while %s", c.name)
			c.unhold(f, o, m)
			o.waitUpdates(t, "a", 2)
			f.converged(o)
		})
	}
}

// Many objects asking: all are re-checked once and all end Done.
func TestRecheckMany(t *testing.T) {
	const n = 2000 // each wait scans every call: more is slow under -race
	o := newTarget()
	first := firsts()
	o.setAfter(func(ctx context.Context, it *item) {
		if first(it.ID) {
			reconciler.RecheckAfter(ctx, 200*time.Millisecond)
		}
	})
	f := variant{4, false}.start(t, o, nil)
	objs := items("m", n, "1")
	f.upsert(objs...)
	waitUntil(t, "every object updated twice", func() (bool, <-chan struct{}) {
		_, ch := o.CallsWatch()
		_, ok := count(o, reconcilertest.OpUpdate, "")
		return ok >= 2*n, ch
	})
	f.caughtUp()
	require.Equal(t, n, f.countKind(f.db.ReadTxn(), status.KindDone))
	per := map[string]int{}
	for _, c := range o.Calls() {
		if c.Op == reconcilertest.OpUpdate {
			per[c.Key]++
		}
	}
	for _, obj := range objs {
		require.Equal(t, 2, per[obj.ID], "updates of %s", obj.ID)
	}
}

// Re-checks under churn: every update asks for a re-check within a few
// milliseconds while objects are rewritten, deleted and re-inserted, and
// the hive stops and starts. No re-check may re-apply an older version or
// a deleted object, and once the asks stop, the target holds the table.
func TestRecheckChurnNeverGoesBack(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {8, true}}, func(t *testing.T, v variant) {
		o := newTarget()
		rng := rand.New(rand.NewPCG(seed(7), 7))
		var mu sync.Mutex
		pick := func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return time.Duration(1+rng.IntN(10)) * time.Millisecond
		}
		o.setAfter(func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, pick()) })
		o.ask = func(*item) time.Duration { return pick() }
		f := v.start(t, o, nil)
		churn(f, o, seed(7), false, 2*time.Millisecond)
		// The asks stop. Those asked for already fire once more: the
		// clock's, asked after them, shows they have.
		asksFirst(o, map[string]time.Duration{clock: 100 * time.Millisecond})
		entriesAskFirst(o, map[string]time.Duration{clock: 100 * time.Millisecond})
		f.pastClock(o)
		f.converged(o)
		neverWentBack(t, o)
	})
}

// RecheckAfter called after Update returned (from a goroutine it
// started) asks for nothing: least of all a re-check of the object
// updated next (b54fabb).
func TestRecheckAskAfterReturnIsIgnored(t *testing.T) {
	o := newTarget()
	bRuns, asked := make(chan struct{}), make(chan struct{})
	o.setAfter(func(ctx context.Context, it *item) {
		switch it.ID {
		case "a":
			go func() {
				<-bRuns // b's Update is under way: a's has returned
				reconciler.RecheckAfter(ctx, time.Millisecond)
				close(asked)
			}()
		case clock:
			reconciler.RecheckAfter(ctx, 2*time.Millisecond)
		}
	})
	var once sync.Once
	o.update = func(ctx context.Context, it *item) error {
		if it.ID == "b" {
			once.Do(func() {
				close(bRuns)
				recv(t, asked, "the late ask")
			})
		}
		return nil
	}
	f := variant{1, false}.start(t, o, nil)
	f.upsert(kititems("1", "a", "b")...)
	f.waitKind("b", status.KindDone)
	// The clock's re-check falls due after any of a or b would have.
	f.pastClock(o)
	assert.Equal(t, []string{"1"}, o.updates("a"), "a re-checked by a late ask")
	assert.Equal(t, []string{"1"}, o.updates("b"), "b re-checked by a's late ask")
}

// A deleted object's re-check gives its memory back once the delete is
// read, not when the re-check would have fallen due (03fe3d6).
func TestRecheckDeleteReleasesMemory(t *testing.T) {
	const n, size = 800, 64 << 10
	o := newTarget()
	o.Target = nil // keeps nothing: the heap is the reconciler's
	o.setAfter(func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, time.Hour) })
	f := startFixture(t, o, nil)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	keys := make([]string, n) // the test keeps no object: only their keys
	for i := range keys {
		keys[i] = fmt.Sprintf("m%03d", i)
		f.upsert(&item{ID: keys[i], Value: strings.Repeat(string(rune('a'+i%26)), size)})
	}
	f.waitTable("every object Done", func(txn statedb.ReadTxn) bool { return f.countKind(txn, status.KindDone) == n })
	require.GreaterOrEqual(t, heap(), base+n*size/2, "the objects are not on the heap")
	f.remove(keys...)
	f.caughtUp()
	// StateDB keeps deleted objects until every change iterator has read
	// past them and its graveyard is collected (a second or so): a later
	// write moves the reconciler's past them; then poll the heap.
	f.put("after", "")
	f.caughtUp()
	var held uint64
	waitUntil(t, "the deleted objects' memory given back", func() (bool, <-chan struct{}) {
		held = heap()
		return held < base+n*size/8, tick(50 * time.Millisecond)
	})
}

// tick returns a channel closed after d: a poll's next look.
func tick(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}
