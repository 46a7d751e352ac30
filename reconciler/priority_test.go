package reconciler_test

// WithPriority end to end: each test pins a promise of its doc comment and
// of docs/control.md (the queue's own ordering: keyqueue's
// TestTakeQueuedByPriority; Register's refusals: TestRegisterRejectsBadInput;
// the order of rounds with a share: testdata/priority.txtar; WithPriority
// under chaos, its functions at the edges and panicking: TestChaos).

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// ppPrio reads an item's priority from its value: the integer before the
// first ".", 0 if there is none.
func ppPrio(it *item) int {
	v, _, _ := strings.Cut(it.Value, ".")
	p, _ := strconv.Atoi(v)
	return p
}

// priorityByPrefix is a priority function: objects whose ID starts with
// "high" come first.
func priorityByPrefix(it *item) int {
	if strings.HasPrefix(it.ID, "high") {
		return 1
	}
	return 0
}

// roundHook is metrics whose Round calls a function, on the reconciler's
// goroutine, at the end of every round.
type roundHook struct {
	*metrics.ExpVar
	round func(metrics.RoundStats)
}

func (m *roundHook) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) { m.round(s) }

// applies returns the words of tg.applied for updates of objs.
func applies(objs []*item) []string {
	words := make([]string, len(objs))
	for i, o := range objs {
		words[i] = "update " + o.ID + "=" + o.Value
	}
	return words
}

// countReads returns prio counting its reads (of Pending versions only,
// if pending) by "key=value", and a copy of the counts.
func countReads(prio func(*item) int, pending bool) (func(*item) int, func() map[string]int) {
	var mu sync.Mutex
	reads := map[string]int{}
	return func(it *item) int {
			if !pending || it.Status.Kind == status.KindPending {
				mu.Lock()
				reads[it.ID+"="+it.Value]++
				mu.Unlock()
			}
			return prio(it)
		}, func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(reads)
		}
}

// While one held operation keeps the reconciler (one worker) from reading,
// changes of three priorities, deletes of priority-9 objects and a newer
// version of priority 7 are written. Those of one priority are applied
// first written first, deletes too, across rounds and beyond the
// read-ahead, whatever the share; the newer version is ranked anew, and
// each version's priority read once. With everything in one round, higher
// priority goes first, a delete ranked as the object it deletes, and only
// the share's oldest (l-00000) ahead of its rank. 4bbc854: a key taken for its
// age ran after younger keys of its priority taken in the same round.
func TestPriorityOrder(t *testing.T) {
	for _, c := range []struct {
		R     int
		share float64
		batch bool
	}{{1000, 0.001, false}, {4, 0.001, false}, {4, 0, true}, {4, 0.5, false}, {4, 0.5, true}, {4, 1, false}} {
		t.Run(fmt.Sprintf("R=%d,share=%v,batch=%v", c.R, c.share, c.batch), func(t *testing.T) {
			tg := newTarget()
			prio, reads := countReads(ppPrio, true)
			f := variant{1, c.batch}.start(t, tg, nil, reconciler.WithRoundLimits(c.R, nil), reconciler.WithPriority(prio, c.share))
			f.upsert(kititems("9", "d0", "d1", "d2")...) // to delete, at priority 9
			f.caughtUp()
			h := tg.hold("s")
			f.upsert(&item{ID: "s", Value: "0"})
			h.wait(t)
			ls, ms, hs := items("l", 30, "1"), items("m", 30, "5"), items("h", 30, "9")
			f.upsert(ls...)
			f.remove("d0", "d1", "d2")
			f.upsert(ms...)
			f.upsert(hs...)
			f.upsert(&item{ID: "l-00003", Value: "7"}) // ranked anew: after the 9s, before the 5s
			h.let()
			f.caughtUp()

			applied := tg.applied()
			seq := applied[slices.Index(applied, "update s=0")+1:]
			pos := map[string]int{}
			for i, w := range seq {
				pos[w] = i
			}
			assert.Empty(t, tg.appliedTwice())
			// Each priority's changes, in the order written.
			for _, words := range [][]string{applies(slices.Delete(ls, 3, 4)), applies(ms), applies(hs), {"delete d0", "delete d1", "delete d2"}} {
				for i, w := range words {
					require.Contains(t, pos, w, "never applied")
					if i > 0 {
						assert.Less(t, pos[words[i-1]], pos[w], "%s applied after %s, though written first", words[i-1], w)
					}
				}
			}
			if p, ok := pos["update l-00003=1"]; ok {
				assert.Less(t, p, pos["update l-00003=7"], "l-00003's versions applied out of revision order")
			}
			if c.R == 1000 {
				rank := func(w string) int { // a delete's is its object's, 9
					_, v, update := strings.Cut(w, "=")
					return map[bool]int{false: 9, true: ppPrio(&item{Value: v})}[update]
				}
				for i := range seq {
					for j := i + 1; j < len(seq); j++ {
						if rank(seq[i]) < rank(seq[j]) && seq[i] != "update l-00000=1" {
							t.Errorf("%q (priority %d) before %q (priority %d)", seq[i], rank(seq[i]), seq[j], rank(seq[j]))
						}
					}
				}
			}
			for v, n := range reads() {
				assert.LessOrEqual(t, n, 1, "the priority of version %s was read %d times", v, n)
			}
			assert.Equal(t, 1, reads()["l-00003=7"], "the newer version of l-00003 was not ranked anew")
		})
	}
}

// No starvation: under a stream of urgent writes filling every round, a
// low-priority change with n changes ahead of it in arrival order is taken
// within ⌈(n+1)/(share·R)⌉ rounds of R, two more but in the exact case.
// Rounds are the reconciler's own, counted by its round metrics, which
// write the stream between rounds (or each urgent object applied writes
// another, from inside Update): with one worker the same rounds every run.
// With workers a round has only the room they left (90d70f4): the objects
// taken before low are then at most (n+1)/share, and two rounds. 281a02f:
// with the share forced to zero, low waited 203 rounds against a bound of 16.
func TestPriorityDoesNotStarveLowerPriorities(t *testing.T) {
	for _, c := range []struct {
		R, workers    int
		share         float64
		batch         bool
		ahead, before int // urgent, then low-priority, changes written just before low
		update, exact bool
	}{
		{R: 10, share: 0.2, before: 30, exact: true},
		{R: 10, share: 1, ahead: 30, before: 20},
		{R: 16, ahead: 48, before: 20}, // the default share
		{R: 4, share: 0.001, ahead: 12},
		{R: 1, share: 0.5, ahead: 3, before: 20},
		{R: 1, share: 0.01, ahead: 3},
		{R: math.MaxInt, share: 0.1, ahead: 600},
		{R: 16, workers: 8, share: 0.25, ahead: 48, before: 20},
		{R: 16, workers: 8, share: 0.01, ahead: 48},
		{R: 16, share: 0.25, batch: true, ahead: 48},
		{R: 16, workers: 4, share: 0.125, batch: true, ahead: 48, before: 20},
		{R: 8, share: 0.05, ahead: 24, before: 300},
		{R: 8, ahead: 16, update: true},
		{R: 8, share: 0.05, ahead: 16, update: true},
		{R: 1, share: 0.25, ahead: 2, update: true},
		{R: 16, workers: 8, share: 0.125, ahead: 32, update: true},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			share, per, n := cmp.Or(c.share, 1.0/8), min(c.R, 200), c.ahead+c.before
			bound := int(math.Ceil(float64(n+1)/(share*float64(min(c.R, math.MaxInt32))))) + map[bool]int{false: 2}[c.exact]
			most := int64(math.Ceil(float64(n+1)/share)) + 2*int64(per)
			var (
				f                         *fixture
				rounds, doneAt, highsDone int  // on the reconciler's goroutine; urgent objects Done with low
				written                   = -1 // the round after which low was written
				adds, addsAt, addsLow     atomic.Int64
				next                      atomic.Int64
				stop                      atomic.Bool
				done                      = make(chan struct{})
			)
			urgent := func(k int) { f.upsert(items(fmt.Sprint("u", next.Add(1)), k, "100")...) }
			hook := &roundHook{ExpVar: metrics.NewUnpublishedExpVar(), round: func(s metrics.RoundStats) {
				if doneAt > 0 {
					return
				}
				if s.Adds > 0 {
					rounds++
					adds.Add(int64(s.Adds))
				}
				if low, _ := f.get("low"); written < 0 {
					urgent(c.ahead)
					f.upsert(append(items("early", c.before, "0"), &item{ID: "low", Value: "0"})...)
					written = rounds
					addsAt.Store(adds.Load())
				} else if low.Status.Kind == status.KindDone {
					doneAt = rounds
					for it := range f.table.List(f.db.ReadTxn(), f.index.Query(status.KindDone)) {
						highsDone += map[bool]int{true: 1}[strings.HasPrefix(it.ID, "u")]
					}
					stop.Store(true)
					close(done)
					return
				}
				if rounds > 3*bound+50 {
					stop.Store(true)
				}
				if !c.update && !stop.Load() {
					urgent(per)
				}
			}}
			tg := newTarget()
			tg.setAfter(func(_ context.Context, it *item) {
				if it.ID == "low" {
					addsLow.Store(adds.Load())
				} else if c.update && strings.HasPrefix(it.ID, "u") && !stop.Load() {
					urgent(1)
				}
			})
			f = variant{max(c.workers, 1), c.batch}.fixture(t, tg, nil, reconciler.WithMetrics(hook),
				reconciler.WithRoundLimits(c.R, nil), reconciler.WithPriority(ppPrio, c.share))
			f.start()
			recv(t, done, "the low-priority object to be Done")
			taken := addsLow.Load() - addsAt.Load()
			t.Logf("low waited %d rounds (bound %d), %d objects taken before it (bound %d), with %d ahead", doneAt-written, bound, taken, most, n)
			if c.exact {
				assert.GreaterOrEqual(t, float64(highsDone), float64(doneAt-written-1)*float64(c.R)*(1-share), "urgent objects written after low went first")
			}
			if c.workers <= 1 {
				assert.LessOrEqual(t, doneAt-written, bound, "rounds the low-priority object waited")
			} else {
				assert.LessOrEqual(t, taken, most, "objects taken before the low-priority one")
			}
			f.converged(tg)
		})
	}
}

// Memory bounded: with 200k Pending objects and a slow target, the
// reconciler reads at most about four rounds of changes ahead of what it
// started. Nothing documented shows the size of what is queued (Depth
// counts collected operations), but the priority is read once per version
// as its change is read, so its calls tell how far it has read.
func TestPriorityReadAheadBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("200k objects")
	}
	const R, total = 100, 200_000
	var read, started, worst atomic.Int64
	rounds := 0
	enough := make(chan struct{})
	hook := &roundHook{ExpVar: metrics.NewUnpublishedExpVar(), round: func(metrics.RoundStats) {
		if ahead := read.Load() - started.Load(); ahead > worst.Load() {
			worst.Store(ahead) // only this goroutine stores
		}
		if rounds++; rounds == 60 {
			close(enough)
		}
	}}
	o := newTarget()
	o.update = func(ctx context.Context, it *item) error {
		started.Add(1)
		select { // a slow target
		case <-ctx.Done():
		case <-time.After(200 * time.Microsecond):
		}
		return nil
	}
	prio := func(it *item) int {
		if it.Status.Kind == status.KindPending {
			read.Add(1)
		}
		return ppPrio(it)
	}
	f := variant{2, false}.start(t, o, nil, reconciler.WithMetrics(hook), reconciler.WithRoundLimits(R, nil), reconciler.WithPriority(prio, 0))
	for i := 0; i < total; i += 10_000 {
		f.upsert(items(fmt.Sprintf("b%02d", i/10_000), 10_000, "1")...)
	}
	recv(t, enough, "60 rounds")
	t.Logf("read ahead of what was started: at most %d (read %d, started %d)", worst.Load(), read.Load(), started.Load())
	assert.LessOrEqual(t, worst.Load(), int64(6*R), "read %d changes ahead of what it started, more than four rounds of %d", worst.Load(), R)
	assert.Less(t, read.Load(), int64(total/2), "read %d of %d changes with only %d started", read.Load(), total, started.Load())
}

// WaitUntilReconciled with reordering: urgent changes written after low
// ones are applied first, yet a wait for any revision returns only once
// every change up to it, the low ones included, has its outcome recorded.
// The reconciler is held by an operation on s (one worker, so it reads
// nothing meanwhile), or paused, while everything is written in one
// transaction. Fresh changes written while paused are fresh changes like
// any others (exact): on Resume, with one worker, they are applied by
// priority, first written first within a priority. (That misordering was
// intermittent, one run in five, so those run 25 times;
// TestPriorityStopCarriesTheReadAheadOverInTurn shows its cause every run.)
func TestPriorityWaitUntilReconciledCountsReordered(t *testing.T) {
	for _, c := range []struct {
		v            variant
		pause, exact bool
		runs         int
	}{{variant{1, false}, false, false, 1}, {variant{1, true}, false, false, 1}, {variant{4, false}, true, false, 1},
		{variant{4, true}, true, false, 1}, {variant{1, false}, true, true, 25}, {variant{1, true}, true, true, 25}} {
		for i := range c.runs {
			t.Run(fmt.Sprint(c.v, ",pause=", c.pause, ",exact=", c.exact, "#", i), func(t *testing.T) { ppWaitReordered(t, c.v, c.pause, c.exact) })
		}
	}
}

func ppWaitReordered(t *testing.T, v variant, pause, exactOrder bool) {
	tg := newTarget()
	f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, 0.001))
	release := f.rec.Resume
	if pause {
		// What the table holds when the reconciler first runs is the
		// backlog, which priorities do not order: wait until it runs.
		f.upsert(&item{ID: "m", Value: "0"})
		f.caughtUp()
		f.rec.Pause()
	} else {
		h := tg.hold("s")
		f.upsert(&item{ID: "s", Value: "0"})
		h.wait(t)
		release = h.let
	}
	// One transaction, so that the reconciler reads them all at once: the
	// low ones first (lower revisions), then 80 urgent ones.
	lows, highs := items("low", 5, "0"), items("high", 80, "9")
	f.upsert(append(slices.Clone(lows), highs...)...)
	_, lowRev, _ := f.table.Get(f.db.ReadTxn(), itemID.Query("low-00004"))
	_, firstHigh, _ := f.table.Get(f.db.ReadTxn(), itemID.Query("high-00000"))
	require.Less(t, lowRev, firstHigh)
	check := func(until statedb.Revision) {
		t.Helper()
		got := make(chan error, 1)
		go func() {
			_, _, err := f.rec.WaitUntilReconciled(ctxFor(t, timeout), until)
			got <- err
		}()
		release()
		require.NoError(t, recv(t, got, "WaitUntilReconciled"))
		for obj, rev := range f.table.All(f.db.ReadTxn()) {
			if rev <= until && obj.ID != "s" {
				// Its change is at or below until: its outcome is recorded.
				assert.Equal(t, status.KindDone, obj.Status.Kind, "WaitUntilReconciled(%d) returned with %s (rev %d) %s", until, obj.ID, rev, obj.Status.Kind)
			}
		}
		for _, l := range lows {
			assert.True(t, tg.has(l.ID, "0"), "WaitUntilReconciled(%d) returned before %s was applied", until, l.ID)
		}
	}
	check(firstHigh)
	check(lowRev)
	f.caughtUp()
	order := slices.DeleteFunc(tg.applied(), func(c string) bool { return c == "update s=0" || c == "update m=0" })
	want := applies(append(slices.Clone(highs), lows...))
	switch {
	case exactOrder:
		// With one worker the order is the reconciler's: a share of 0.001
		// of rounds of 4 gives arrival order one pick per 250 rounds, and
		// there are 22.
		assert.Equal(t, want, order, "not by priority, first written first")
	case v.workers == 1:
		// The wait was sharp only if urgent changes overtook the low ones.
		require.Less(t, slices.Index(order, want[0]), slices.Index(order, want[len(highs)]), "no reordering: %v", order)
	}
}

// The priority of a version is read once, when its change is read,
// whatever the function (hostile: one that panics, returns int's extremes
// or a new answer every call) or share: requeues of that version (held by
// the breaker, cut by Pause or a stop, WithMaxAttempts counting) do not
// read it again, and every version is applied once, nothing given up.
// cf0b67c: up to four reads per version. (WithPriority under faults,
// deletes, reverts and more, its settings drawn at random: TestChaos.)
func TestPriorityReadOncePerVersion(t *testing.T) {
	var panics atomic.Int64
	hostile := func(it *item) int {
		h := fnv.New32a()
		h.Write([]byte(it.ID))
		switch h.Sum32() % 5 {
		case 0:
			panics.Add(1)
			panic("priority: " + it.ID)
		case 1:
			return math.MinInt
		case 2:
			return math.MaxInt
		case 3:
			return rand.Int() - math.MaxInt/2
		}
		return priorityByPrefix(it)
	}
	for _, c := range []struct {
		name    string
		v       variant
		share   float64
		hostile bool
		max     int
	}{
		{"1 worker", variant{1, false}, 0, false, 0}, {"4 workers", variant{4, false}, 0, false, 0},
		{"4 workers, batch", variant{4, true}, 0, false, 0}, {"max attempts", variant{4, false}, 0.25, false, 3},
		{"tiniest share, 8 workers, batch", variant{8, true}, math.SmallestNonzeroFloat64, false, 0},
		{"share 1", variant{1, false}, 1, false, 0}, {"hostile", variant{1, false}, 0.01, true, 0},
		{"hostile, 8 workers, batch", variant{8, true}, 0.01, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			prio, reads := countReads(map[bool]func(*item) int{false: priorityByPrefix, true: hostile}[c.hostile], false)
			panics.Store(0)
			o, m, f := startBreaker(t, c.v, 2, time.Millisecond, 4*time.Millisecond, reconciler.WithPriority(prio, c.share),
				reconciler.WithMaxAttempts(c.max))
			o.down()
			f.upsert(items("low", 10, "1")...)
			f.upsert(items("high", 10, "1")...)
			m.waitOpen(t, 1)
			o.waitCalls(t, o.calls.Load()+20) // probes, held and requeued
			f.rec.Pause()
			f.rec.Resume()
			f.stop()
			f.start()
			o.waitCalls(t, o.calls.Load()+5)
			o.recover()
			f.converged(o)
			for version, n := range reads() {
				assert.Equal(t, 1, n, "priority of %s read %d times", version, n)
			}
			assert.Len(t, reads(), 20)
			assert.Empty(t, o.appliedTwice(), "versions applied twice")
			for obj := range f.table.All(f.db.ReadTxn()) {
				assert.False(t, obj.Status.Terminal, "%s gave up: %s", obj.ID, obj.Status.Error)
			}
			if c.hostile {
				assert.NotZero(t, panics.Load(), "no priority panicked")
			}
		})
	}
}

// A stop with changes read ahead and queued by priority (deletes and a
// version ranked anew among them) carries them over: after the start,
// WaitUntilReconciled counts them. A round it cuts short gives the changes
// that never started back their turn, first read first within their
// priority, not behind those read after them. 96a1f61: they were requeued
// behind everything of their priority read since (the intermittent
// misorder of TestPriorityWaitUntilReconciledCountsReordered's exact runs).
func TestPriorityStopCarriesTheReadAheadOverInTurn(t *testing.T) {
	forVariants(t, []variant{{1, false}, {4, false}, {1, true}}, func(t *testing.T, v variant) {
		tg := newTarget()
		f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, 0.001))
		f.upsert(kititems("8", "d0", "d1", "d2", "d3")...)
		f.caughtUp()
		h, cut := tg.hold("s"), tg.hold("high-00000")
		f.upsert(&item{ID: "s", Value: "0"})
		h.wait(t)                           // one worker: nothing is read meanwhile
		f.upsert(items("high", 12, "9")...) // a round of 4 starts with the first
		f.remove("d0", "d1", "d2", "d3")
		for i := range 30 {
			f.upsert(&item{ID: fmt.Sprintf("o%02d", i), Value: strconv.Itoa(i % 4)})
		}
		f.upsert(&item{ID: "o07", Value: "7.again"})
		h.let()
		cut.wait(t)
		f.stop() // with one worker, the other three of the round never start
		f.upsert(&item{ID: "o08", Value: "3.meanwhile"})
		rev := f.remove("o09")
		f.start()
		f.reconciledTo(rev)
		txn := f.db.ReadTxn()
		for obj := range f.table.All(txn) {
			assert.Equal(t, status.KindDone, obj.Status.Kind, "WaitUntilReconciled(%d) returned with %s %s", rev, obj.ID, obj.Status.Kind)
		}
		assert.Empty(t, tg.Diff(txn, f.table), "the target differs once WaitUntilReconciled returned")
		f.caughtUp()
		if v.workers == 1 {
			order := slices.DeleteFunc(tg.applied(), func(c string) bool { return !strings.HasPrefix(c, "update high") })
			assert.Equal(t, applies(items("high", 12, "9")), order, "the highs not applied first read first")
		}
	})
}
