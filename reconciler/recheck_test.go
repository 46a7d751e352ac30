package reconciler_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
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

// kitasks makes Update ask, for the n-th successful update of a key
// (from 1), the re-check that plan gives (none if absent).
func kitasks(o *target, plan map[string][]time.Duration) {
	var mu sync.Mutex
	seen := map[string]int{}
	o.setAfter(func(ctx context.Context, it *item) {
		mu.Lock()
		n := seen[it.ID]
		seen[it.ID]++
		mu.Unlock()
		if ds := plan[it.ID]; n < len(ds) && ds[n] != 0 {
			reconciler.RecheckAfter(ctx, ds[n])
		}
	})
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
	f.upsert(kititems("0", clock)...)
	o.waitUpdates(f.t, clock, 2)
	f.caughtUp()
}

// kitbatchAsks makes a batch entry's first success ask for the re-check
// plan gives its key (none if absent).
func kitbatchAsks(o *target, plan map[string]time.Duration) {
	var mu sync.Mutex
	asked := map[string]bool{}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ask = func(it *item) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if asked[it.ID] {
			return 0
		}
		asked[it.ID] = true
		return plan[it.ID]
	}
}

// A delete drops the re-check: a deleted object is never resurrected in
// the target or the table, and a re-insert is new work without the old ask.
func TestRecheckDeleteDrops(t *testing.T) {
	o := newTarget()
	kitasks(o, map[string][]time.Duration{"a": {50 * time.Millisecond}, "b": {50 * time.Millisecond}, clock: {300 * time.Millisecond}})
	f := variant{1, false}.start(t, o, nil)
	f.upsert(kititems("1", "a", "b")...)
	f.waitKind("a", status.KindDone)
	f.waitKind("b", status.KindDone)
	f.remove("a", "b")
	f.caughtUp()
	// b comes back, identical, before its old re-check is due.
	f.upsert(kititems("1", "b")...)
	f.pastClock(o)
	_, found := f.get("a")
	assert.False(t, found, "a resurrected in the table")
	_, inTarget, _ := o.Get("a")
	assert.False(t, inTarget, "a resurrected in the target")
	assert.Equal(t, []string{"1"}, o.updates("a"))
	// b: first version, then the re-insert (which asks for a re-check of
	// its own as its 2nd update is not in the plan: none).
	assert.Equal(t, []string{"1", "1"}, o.updates("b"), "b's old re-check fired on the new object")
}

// Asks that must do nothing: a context not from the reconciler, d <= 0,
// a failing Update's ask, an ask overridden by a later longer one, and an
// ask made from a goroutine after Update returned.
func TestRecheckAsksThatDoNothing(t *testing.T) {
	o := newTarget()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	late := make(chan context.Context, 1)
	o.setAfter(func(ctx context.Context, it *item) {
		switch it.ID {
		case "foreign":
			reconciler.RecheckAfter(context.Background(), 10*time.Millisecond)
			reconciler.RecheckAfter(context.WithValue(context.Background(), kitctxKey{}, 1), 10*time.Millisecond)
		case "zero":
			reconciler.RecheckAfter(ctx, 0)
		case "negative":
			reconciler.RecheckAfter(ctx, -time.Second)
			reconciler.RecheckAfter(ctx, -1<<63)
		case "later-longer":
			reconciler.RecheckAfter(ctx, 10*time.Millisecond)
			reconciler.RecheckAfter(ctx, time.Hour)
		case "late":
			select {
			case late <- ctx:
			default:
			}
		case clock:
			if len(o.updates(clock)) == 1 {
				reconciler.RecheckAfter(ctx, 400*time.Millisecond)
			}
		}
	})
	f := variant{1, false}.start(t, o, nil)
	f.upsert(kititems("1", "foreign", "zero", "negative", "later-longer", "late")...)
	ctx := recv(t, late, "late's update")
	// Its outcome is recorded: the operation is over.
	f.waitKind("late", status.KindDone)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			reconciler.RecheckAfter(ctx, time.Millisecond)
		}
	}()
	f.upsert(kititems("0", clock)...)
	o.waitUpdates(t, clock, 2)
	wg.Wait()
	f.caughtUp()
	for _, k := range []string{"foreign", "zero", "negative", "later-longer", "late"} {
		assert.Len(t, o.updates(k), 1, "%s re-checked", k)
	}
}

// A failing Update's ask is ignored: its retry decides.
func TestRecheckFailingUpdateAskIgnored(t *testing.T) {
	o := newTarget()
	var attempts atomic.Int64
	// Ask for a re-check, then fail a's first attempt.
	o.update = func(ctx context.Context, it *item) error {
		if it.ID == "a" && attempts.Add(1) == 1 {
			reconciler.RecheckAfter(ctx, 10*time.Millisecond)
			return errKitObject
		}
		return nil
	}
	f := variant{1, false}.start(t, o, nil, reconciler.WithRetry(time.Millisecond, time.Millisecond))
	kitasks(o, map[string][]time.Duration{clock: {300 * time.Millisecond}})
	f.upsert(kititems("1", "a")...)
	f.pastClock(o)
	assert.Equal(t, int64(2), attempts.Load(), "a failed once, then succeeded once; its failed attempt's ask must not re-check it")
}

// The last ask of an operation counts: a long ask then a short one
// re-checks after the short one.
func TestRecheckLastAskCounts(t *testing.T) {
	o := newTarget()
	first := true
	var mu sync.Mutex
	o.setAfter(func(ctx context.Context, it *item) {
		mu.Lock()
		defer mu.Unlock()
		if it.ID == "a" && first {
			first = false
			reconciler.RecheckAfter(ctx, time.Hour)
			reconciler.RecheckAfter(ctx, 20*time.Millisecond)
		}
	})
	f := variant{1, false}.start(t, o, nil)
	f.upsert(kititems("1", "a")...)
	o.waitUpdates(t, "a", 2)
	f.waitKind("a", status.KindDone)
}

// BatchEntry.RecheckAfter re-checks the entries that set it, and only them.
func TestRecheckBatchEntry(t *testing.T) {
	o := newTarget()
	kitbatchAsks(o, map[string]time.Duration{"a": 30 * time.Millisecond, "b": 30 * time.Millisecond, clock: 300 * time.Millisecond})
	f := variant{4, true}.start(t, o, nil)
	f.upsert(kititems("1", "a", "b", "c", clock)...)
	o.waitUpdates(t, clock, 2)
	f.caughtUp()
	assert.Len(t, o.updates("a"), 2)
	assert.Len(t, o.updates("b"), 2)
	assert.Len(t, o.updates("c"), 1)
}

// A re-check that falls due while paused is marked on Resume; one that
// falls due while the hive is stopped, at the next start.
func TestRecheckDueWhileHeld(t *testing.T) {
	for _, c := range []struct {
		name         string
		v            variant
		hold, unhold func(f *fixture)
		early        bool // the re-check may come before the hold
	}{
		{"paused", variant{1, false}, func(f *fixture) { f.rec.Pause() }, func(f *fixture) { f.rec.Resume() }, false},
		{"stopped", variant{4, false}, (*fixture).stop, (*fixture).start, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newTarget()
			kitasks(o, map[string][]time.Duration{"a": {30 * time.Millisecond}})
			f := c.v.start(t, o, nil)
			f.upsert(kititems("1", "a")...)
			f.waitKind("a", status.KindDone)
			c.hold(f)
			before := 1
			if c.early {
				before = len(o.updates("a")) // 2 if the re-check came before the stop
			}
			tm := time.NewTimer(150 * time.Millisecond) // let it fall due; not synchronisation
			<-tm.C
			assert.Len(t, o.updates("a"), before, "updated while %s", c.name)
			c.unhold(f)
			o.waitUpdates(t, "a", 2)
			f.waitKind("a", status.KindDone)
		})
	}
}

// Many objects asking: all are re-checked once and all end Done.
func TestRecheckMany(t *testing.T) {
	const n = 2000 // each wait scans every call: more is slow under -race
	o := newTarget()
	var mu sync.Mutex
	seen := map[string]bool{}
	o.setAfter(func(ctx context.Context, it *item) {
		mu.Lock()
		first := !seen[it.ID]
		seen[it.ID] = true
		mu.Unlock()
		if first {
			reconciler.RecheckAfter(ctx, 200*time.Millisecond)
		}
	})
	f := variant{4, false}.start(t, o, nil)
	objs := items("m", n, "1")
	f.upsert(objs...)
	waitUntil(t, "every object updated twice", func() (bool, <-chan struct{}) {
		calls, ch := o.CallsWatch()
		ok := 0
		for _, c := range calls {
			if c.Op == reconcilertest.OpUpdate && c.Err == nil {
				ok++
			}
		}
		return ok >= 2*n, ch
	})
	f.caughtUp()
	txn := f.db.ReadTxn()
	require.Equal(t, n, f.countKind(txn, status.KindDone))
	calls := o.Calls()
	per := map[string]int{}
	for _, c := range calls {
		if c.Op == reconcilertest.OpUpdate {
			per[c.Key]++
		}
	}
	for _, obj := range objs {
		if per[obj.ID] != 2 {
			t.Fatalf("%s updated %d times, want 2", obj.ID, per[obj.ID])
		}
	}
}

// A huge d saturates: it must not wrap into a re-check now (or spin).
func TestRecheckHugeDurationSaturates(t *testing.T) {
	forVariants(t, []variant{{1, false}, {1, true}}, func(t *testing.T, v variant) {
		o := newTarget()
		huge := time.Duration(math.MaxInt64)
		kitasks(o, map[string][]time.Duration{"a": {huge}, "b": {huge - time.Nanosecond}, clock: {300 * time.Millisecond}})
		kitbatchAsks(o, map[string]time.Duration{"a": huge, "b": huge, clock: 300 * time.Millisecond})
		f := v.start(t, o, nil)
		f.upsert(kititems("1", "a", "b")...)
		f.waitKind("a", status.KindDone)
		f.waitKind("b", status.KindDone)
		f.pastClock(o)
		assert.Len(t, o.updates("a"), 1, "a huge re-check fired at once")
		assert.Len(t, o.updates("b"), 1, "a huge re-check fired at once")
	})
}

// Re-check only "if it still carries that Done status": an object written
// back by a user with a Done status of its own is not re-checked.
func TestRecheckUserDoneReplaces(t *testing.T) {
	o := newTarget()
	kitasks(o, map[string][]time.Duration{"a": {50 * time.Millisecond}, clock: {300 * time.Millisecond}})
	f := variant{1, false}.start(t, o, nil)
	f.upsert(kititems("1", "a")...)
	obj := f.waitKind("a", status.KindDone).clone()
	obj.Value = "1"
	obj.Status = status.Done()
	f.insertAs(obj)
	f.pastClock(o)
	assert.Len(t, o.updates("a"), 1, "re-checked an object that no longer carries the Done status it was asked for")
}

// RecheckAfter called from Delete or Prune with their contexts: it is for
// Update; it must not resurrect the deleted object nor crash.
func TestRecheckFromDeleteAndPrune(t *testing.T) {
	o := newTarget()
	kitasks(o, map[string][]time.Duration{clock: {300 * time.Millisecond}})
	o.mu.Lock()
	o.deleted = func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, time.Millisecond) }
	o.pruned = func(ctx context.Context) { reconciler.RecheckAfter(ctx, time.Millisecond) }
	o.mu.Unlock()
	f := variant{1, false}.start(t, o, &with{tables: true})
	f.upsert(kititems("1", "a", "b")...)
	f.caughtUp()
	f.remove("a")
	f.caughtUp()
	f.rec.Prune()
	waitUntil(t, "the prune Prune() asked for", func() (bool, <-chan struct{}) {
		started := o.startedWatch() // before the check, not to miss a call
		return o.prunes.Load() >= 1, started
	})
	f.pastClock(o)
	_, found := f.get("a")
	assert.False(t, found)
	_, inTarget, _ := o.Get("a")
	assert.False(t, inTarget, "a resurrected in the target")
	assert.Len(t, o.updates("a"), 1)
	assert.Len(t, o.updates("b"), 1)
}

// RecheckAfter is safe for concurrent use: goroutines asking while Update
// runs, the last ask during the operation counting.
func TestRecheckConcurrentAsks(t *testing.T) {
	o := newTarget()
	var mu sync.Mutex
	first := map[string]bool{}
	o.setAfter(func(ctx context.Context, it *item) {
		mu.Lock()
		again := first[it.ID]
		first[it.ID] = true
		mu.Unlock()
		if again {
			return
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					reconciler.RecheckAfter(ctx, time.Hour)
				}
			}()
		}
		wg.Wait()
		reconciler.RecheckAfter(ctx, 20*time.Millisecond)
	})
	f := variant{4, false}.start(t, o, nil)
	f.upsert(items("c", 8, "1")...)
	for _, id := range ids(items("c", 8, "1")) {
		o.waitUpdates(t, id, 2)
	}
	f.caughtUp()
}

// Re-checks under churn: every update asks for a re-check within a few
// milliseconds while objects are rewritten, deleted and re-inserted, and
// the hive stops and starts. No re-check may re-apply an older version or
// a deleted object: per key, the revisions applied never go back, and
// once the asks stop, the target holds the table.
func TestRecheckChurnNeverGoesBack(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {8, true}}, func(t *testing.T, v variant) {
		o := newTarget()
		rng := rand.New(rand.NewPCG(kitrecheckSeed(), 7))
		var rmu sync.Mutex
		pick := func() time.Duration {
			rmu.Lock()
			defer rmu.Unlock()
			return time.Duration(1+rng.IntN(10)) * time.Millisecond
		}
		o.setAfter(func(ctx context.Context, _ *item) { reconciler.RecheckAfter(ctx, pick()) })
		o.mu.Lock()
		o.ask = func(*item) time.Duration { return pick() }
		o.mu.Unlock()
		f := v.start(t, o, nil)
		wr := rand.New(rand.NewPCG(kitrecheckSeed(), 8))
		for i := range 600 {
			key := fmt.Sprintf("w%02d", wr.IntN(30))
			switch n := wr.IntN(10); {
			case n < 6:
				f.upsert(kititems(fmt.Sprint(i), key)...)
			case n < 8:
				f.remove(key)
			default:
				if obj, ok := f.get(key); ok {
					f.insertAs(obj.clone())
				}
			}
			if i == 300 {
				f.stop()
				f.start()
			}
			if i%20 == 0 {
				pace := time.NewTimer(2 * time.Millisecond)
				select {
				case <-o.startedWatch():
				case <-pace.C:
				}
				pace.Stop()
			}
		}
		o.setAfter(nil)
		o.mu.Lock()
		o.ask = nil
		o.mu.Unlock()
		// Re-checks already asked for fire once more: a marker
		// asked after them shows they have.
		o.mu.Lock()
		o.updated = func(ctx context.Context, it *item) error {
			if it.ID == clock && len(o.updates(clock)) == 1 {
				reconciler.RecheckAfter(ctx, 100*time.Millisecond)
			}
			return nil
		}
		o.ask = func(it *item) time.Duration {
			if it.ID == clock && len(o.updates(clock)) == 1 {
				return 100 * time.Millisecond
			}
			return 0
		}
		o.mu.Unlock()
		f.upsert(kititems("0", clock)...)
		o.waitUpdates(t, clock, 2)
		f.converged(o)

		last := map[string]statedb.Revision{}
		deleted := map[string]statedb.Revision{}
		for _, c := range o.Calls() {
			if c.Err != nil {
				continue
			}
			switch c.Op {
			case reconcilertest.OpUpdate:
				if c.Revision < last[c.Key] {
					t.Errorf("%s: applied revision %d after %d (call %s)", c.Key, c.Revision, last[c.Key], c)
				}
				if c.Revision < deleted[c.Key] {
					t.Errorf("%s: applied revision %d after its delete at %d (call %s)", c.Key, c.Revision, deleted[c.Key], c)
				}
				last[c.Key] = c.Revision
			case reconcilertest.OpDelete:
				deleted[c.Key] = max(deleted[c.Key], c.Revision)
			}
		}
	})
}

// kitrecheckSeed is the churn's seed: Kit_SEED, to explore, else 7.
func kitrecheckSeed() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("Kit_SEED"), 10, 64); err == nil {
		return s
	}
	return 7
}

// kitctxKey is a context key of the tests' own.
type kitctxKey struct{}

// A re-check that falls due while the circuit breaker is open is not lost:
// once the target is back, the object is updated again and ends Done.
func TestRecheckDueWhileBreakerOpen(t *testing.T) {
	o, m := newTarget(), newKitMetrics()
	kitasks(o, map[string][]time.Duration{"a": {100 * time.Millisecond}})
	f := variant{1, false}.start(t, o, &with{tables: true}, reconciler.WithMetrics(m),
		reconciler.WithCircuitBreaker(2, 5*time.Millisecond, nil), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
	f.upsert(kititems("1", "a")...)
	f.waitKind("a", status.KindDone)
	o.down()
	f.upsert(items("x", 3, "1")...)
	m.waitOpen(t, 1)
	tm := time.NewTimer(200 * time.Millisecond) // let the re-check fall due while open
	<-tm.C
	o.recover()
	o.waitUpdates(t, "a", 2)
	f.converged(o)
}

// RecheckAfter called after Update returned (from a goroutine it
// started) asks for nothing: least of all a re-check of the object
// updated next.
func TestRecheckAskAfterReturnIsIgnored(t *testing.T) {
	o := newTarget()
	var (
		late  context.Context
		once  sync.Once
		bRuns = make(chan struct{})
		asked = make(chan struct{})
	)
	o.setAfter(func(ctx context.Context, it *item) {
		switch it.ID {
		case "a":
			late = ctx
			go func() {
				<-bRuns // b's Update is under way: a's has returned
				reconciler.RecheckAfter(late, time.Millisecond)
				close(asked)
			}()
		case clock:
			reconciler.RecheckAfter(ctx, 2*time.Millisecond)
		}
	})
	o.mu.Lock()
	o.update = func(ctx context.Context, it *item) error {
		if it.ID == "b" {
			once.Do(func() {
				close(bRuns)
				recv(t, asked, "the late ask")
			})
		}
		return nil
	}
	o.mu.Unlock()
	f := variant{1, false}.start(t, o, nil)
	f.upsert(kititems("1", "a", "b")...)
	f.waitKind("b", status.KindDone)
	// The clock's re-check falls due after any of a or b would have: once
	// it ran and everything up to it is reconciled, a re-check of a or b
	// would have run too.
	f.pastClock(o)
	assert.Equal(t, []string{"1"}, o.updates("a"), "a re-checked by a late ask")
	assert.Equal(t, []string{"1"}, o.updates("b"), "b re-checked by a's late ask")
}

// A deleted object's re-check gives its memory back once the delete is
// read, not when the re-check would have fallen due.
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
	for i := range n {
		f.upsert(&item{ID: fmt.Sprintf("m%03d", i), Value: strings.Repeat(string(rune('a'+i%26)), size)})
	}
	f.waitTable("every object Done", func(txn statedb.ReadTxn) bool {
		return f.countKind(txn, status.KindDone) == n
	})
	require.GreaterOrEqual(t, heap(), base+n*size/2, "the objects are not on the heap")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%03d", i)
	}
	f.remove(ids...)
	f.caughtUp()
	// StateDB keeps deleted objects until every change iterator has
	// read past them and its graveyard is collected (a second or so): a
	// later write moves the reconciler's past them; then poll the heap.
	f.upsert(&item{ID: "after"})
	f.caughtUp()
	var held uint64
	waitUntil(t, "the deleted objects' memory given back", func() (bool, <-chan struct{}) {
		held = heap()
		return held < base+n*size/8, tick(50 * time.Millisecond)
	})
	assert.Less(t, held, base+n*size/8)
}

// tick returns a channel closed after d: a poll's next look.
func tick(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}
