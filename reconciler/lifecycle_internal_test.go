package reconciler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

func TestBackoffDoublesUpToTheMaximum(t *testing.T) {
	const lo, hi = 10 * time.Millisecond, 100 * time.Millisecond
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, backoff(i+1, lo, hi, 0, 0.5), "attempt %d", i+1)
	}
	assert.Equal(t, hi, backoff(1000, lo, hi, 0, 0.5), "huge attempt counts do not overflow")
	assert.Equal(t, lo, backoff(0, lo, hi, 0, 0.5), "attempt 0 counts as the first")
}

func TestBackoffJitterStaysInBounds(t *testing.T) {
	const lo, hi, jitter = 10 * time.Millisecond, 100 * time.Millisecond, 0.25
	for attempt := 1; attempt <= 8; attempt++ {
		base := backoff(attempt, lo, hi, 0, 0)
		for _, u := range []float64{0, 0.1, 0.5, 0.9, 0.999999} {
			d := backoff(attempt, lo, hi, jitter, u)
			require.GreaterOrEqual(t, d, time.Duration(float64(base)*(1-jitter)), "attempt %d u %v", attempt, u)
			require.Less(t, d, time.Duration(float64(base)*(1+jitter))+1, "attempt %d u %v", attempt, u)
			require.GreaterOrEqual(t, d, time.Duration(float64(lo)*(1-jitter)))
			require.LessOrEqual(t, d, time.Duration(float64(hi)*(1+jitter)))
		}
		assert.NotEqual(t, backoff(attempt, lo, hi, jitter, 0.1), backoff(attempt, lo, hi, jitter, 0.9),
			"jitter spreads retries")
	}
}

func TestBackoffAndDueTimesSaturate(t *testing.T) {
	// Bug 9 of the outside review: maxima near MaxInt64 overflowed the
	// jitter, and a due time past 2262 wrapped into the past.
	huge := time.Duration(math.MaxInt64)
	for _, u := range []float64{0, 0.5, 0.999999} {
		d := backoff(70, time.Millisecond, huge, 0.9, u)
		assert.GreaterOrEqual(t, d, time.Duration(0), "u=%v", u)
	}
	assert.Equal(t, huge, backoff(200, huge, huge, 0.9, 0.999999), "saturates at MaxInt64")
	now := time.Now().UnixNano()
	assert.Equal(t, int64(math.MaxInt64), addSat(now, huge), "a retry centuries away stays in the future")
	assert.Equal(t, now+5, addSat(now, 5))
	assert.Equal(t, time.Duration(0), durationOf(math.NaN()))
	assert.Equal(t, huge, durationOf(math.Inf(1)))
}

func testTask(rev uint64, id uint64) task[int] {
	return task[int]{obj: int(rev), rev: rev, asked: rev, statusID: id, since: time.Unix(int64(rev), 0)}
}

// The successor rules of keyState (invariants 11 and 13): a change back to
// the version running clears the successor, unless a delete of the key or
// a prune came between.
func TestLifecycleSuccessorRules(t *testing.T) {
	lc := newLifecycles[int]()
	s := lc.observe("a", testTask(1, 100))
	require.NotNil(t, s)
	lc.start(s)
	assert.Nil(t, lc.observe("a", testTask(2, 200)), "a newer version waits")
	assert.True(t, s.hasNext)
	assert.Nil(t, lc.observe("a", testTask(3, 100)), "back to the version running")
	assert.False(t, s.hasNext, "nothing after the version running")

	assert.Nil(t, lc.observe("a", task[int]{rev: 4, delete: true}))
	assert.True(t, s.hasNext && s.next.delete)
	assert.Nil(t, lc.observe("a", testTask(5, 100)), "deleted, then the same object again")
	assert.True(t, s.hasNext, "after a delete the same identity is new work")
	assert.Equal(t, uint64(5), s.next.rev)

	lc.settle(s, nil, true, false, true, 0, 0, time.Now())
	assert.Equal(t, phaseQueued, s.phase, "the successor is queued")
	assert.Equal(t, []*keyState[int]{s}, lc.takeQueued(10))
	lc.start(s)
	assert.False(t, s.deleteSeen, "a new version starts afresh")
	lc.markPruned(s)
	assert.Nil(t, lc.observe("a", testTask(6, 100)))
	assert.True(t, s.hasNext, "after a prune the same identity is new work")
	lc.settle(s, nil, true, true, true, 0, 0, time.Now())
	lc.start(lc.takeQueued(1)[0])
	lc.settle(s, nil, true, true, true, 0, 0, time.Now())
	assert.False(t, lc.tracked(), "done: nothing left")
	assert.Empty(t, lc.active)
}

// The version running, read again (a deferred change looks its object up),
// is no successor, even with a status without identity: else the Error
// its failure writes would leave the successor not current, and nothing
// would retry it. Chaos found this with workers, a refresh mark and a
// Pending status without identity.
func TestLifecycleSameRevisionIsNoSuccessor(t *testing.T) {
	lc := newLifecycles[int]()
	s := lc.observe("a", testTask(7, 0))
	lc.start(s)
	assert.Nil(t, lc.observe("a", testTask(7, 0)))
	assert.False(t, s.hasNext, "the very revision running is no successor")

	lc.settle(s, errors.New("e"), false, true, true, time.Now().UnixNano(), 300, time.Now())
	assert.Equal(t, phaseWaiting, s.phase, "the failure is retried")
	assert.Equal(t, uint64(300), s.errID)
}

// A model of the lifecycles driven by random moves: every keyState is in
// exactly one place for its phase, the counters agree, and retries come
// out of the heap in due order. With priorities, every queued keyState is
// in the priority heap too, at the place it records.
func TestLifecycleMatchesAModel(t *testing.T) {
	t.Run("arrival", func(t *testing.T) { testLifecycleModel(t, false) })
	t.Run("priority", func(t *testing.T) { testLifecycleModel(t, true) })
}

func testLifecycleModel(t *testing.T, priorities bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	lc := newLifecycles[int]()
	lc.trackOutdated()
	if priorities {
		lc.setPriority(func(obj int) int { return obj % 5 }, 0.25)
	}
	now := time.Unix(1000, 0)
	check := func() {
		queued, active, waiting, retrying := 0, 0, 0, 0
		for key, s := range lc.byKey {
			require.Equal(t, key, s.key)
			switch s.phase {
			case phaseQueued:
				queued++
				require.GreaterOrEqual(t, s.active, 0)
				require.Less(t, s.pos[inRetries], 0)
			case phaseRunning:
				require.GreaterOrEqual(t, s.active, 0)
				require.Less(t, s.pos[inRetries], 0)
			case phaseWaiting:
				waiting++
				require.GreaterOrEqual(t, s.pos[inRetries], 0)
				require.Less(t, s.active, 0)
			default:
				t.Fatalf("key %s in phase %d", key, s.phase)
			}
			if s.active >= 0 {
				active++
			}
			if s.attempts > 0 {
				retrying++
			}
		}
		require.Equal(t, active, len(lc.active))
		require.Equal(t, waiting, len(lc.heap.entries))
		require.Equal(t, retrying, lc.retrying)
		for i, e := range lc.heap.entries {
			require.Equal(t, i, e.s.pos[inRetries])
			require.Equal(t, e.s.due, e.rank, "ranked by due time")
			if i > 0 {
				require.False(t, e.before(lc.heap.entries[(i-1)/2]), "heap order")
			}
		}
		for i, s := range lc.active {
			require.Equal(t, i, s.active)
		}
		require.Equal(t, queued, len(lc.queued), "every queued key is in the queue")
		if priorities {
			require.Equal(t, len(lc.queued), len(lc.byPriority.entries))
			for _, s := range lc.queued {
				require.Equal(t, phaseQueued, s.phase)
				require.Same(t, s, lc.byPriority.entries[s.pos[inPriority]].s)
			}
			for i, e := range lc.byPriority.entries {
				require.Equal(t, i, e.s.pos[inPriority])
				require.Equal(t, priorityRank(e.s.task.obj%5), e.rank, "the priority of the task queued")
				if i > 0 {
					require.False(t, e.before(lc.byPriority.entries[(i-1)/2]), "heap order")
				}
			}
		}
		for _, s := range lc.byKey {
			if s.phase != phaseQueued || !priorities {
				require.Less(t, s.pos[inPriority], 0)
			}
		}
		// The lowest revision and earliest time of those failing, as a
		// scan finds them.
		var low uint64
		var oldest time.Time
		for _, s := range lc.byKey {
			if s.attempts > 0 && (low == 0 || s.task.asked < low) {
				low = s.task.asked
			}
			if s.phase == phaseWaiting || s.active >= 0 {
				oldest = earliest(oldest, s.task.since)
			}
			if s.hasNext {
				oldest = earliest(oldest, s.next.since)
			}
		}
		require.Equal(t, low, lc.retryLowWatermark())
		require.Equal(t, oldest, lc.oldestSince())
		require.LessOrEqual(t, len(lc.lows), 2*len(lc.heap.entries)+64)
	}
	running := map[string]*keyState[int]{}
	steps := 5000 // CONVERGE_LONG=1: 20000, as CI's scheduled run does
	if os.Getenv("CONVERGE_LONG") != "" {
		steps = 20000
	}
	if priorities {
		steps /= 2 // the arrival-order moves are the same: half as many
	}
	for step := range steps {
		key := fmt.Sprintf("k%d", rng.IntN(50))
		rev := uint64(step + 1)
		switch rng.IntN(6) {
		case 0, 1:
			j := testTask(rev, uint64(rng.IntN(3)+1))
			if priorities {
				j.obj = int(j.statusID) // one status identity, one version
			}
			if rng.IntN(4) == 0 {
				j = task[int]{rev: rev, asked: rev, delete: true}
			}
			if priorities && rng.IntN(2) == 0 {
				lc.queue(key, j)
			} else if s := lc.observe(key, j); s != nil {
				lc.start(s)
				running[key] = s
			}
		case 2:
			j := testTask(rev, 1)
			if priorities {
				j.obj = 1
			}
			lc.adopt(key, j, uint64(rng.IntN(3)+10), errors.New("e"), now)
		case 3: // finish a running key
			for k, s := range running {
				delete(running, k)
				failed := rng.IntN(2) == 0
				lc.settle(s, errors.New("e"), !failed, true, true, now.Add(time.Duration(rng.IntN(1000))*time.Millisecond).UnixNano(), 7, now)
				break
			}
		case 4:
			now = now.Add(100 * time.Millisecond)
			var prev int64
			for {
				s, ok := lc.popDue(now.UnixNano())
				if !ok {
					break
				}
				require.LessOrEqual(t, s.due, now.UnixNano())
				require.GreaterOrEqual(t, s.due, prev, "popped out of order")
				prev = s.due
				lc.start(s)
				running[s.key] = s
			}
		case 5:
			for _, s := range lc.takeQueued(rng.IntN(4)) {
				lc.start(s)
				running[s.key] = s
			}
		}
		for k, s := range running {
			if s.phase != phaseRunning || lc.byKey[k] != s {
				delete(running, k)
			}
		}
		check()
	}
}

// takeQueued with priorities takes a share of each take oldest first and
// the rest highest priority first, FIFO within one priority; the share is
// counted across takes, so takes of one key serve arrival order in turn;
// a newer change of a queued key keeps its place but takes its priority.
func TestTakeQueuedByPriority(t *testing.T) {
	lc := newLifecycles[int]()
	lc.setPriority(func(obj int) int { return obj / 100 }, 0.25)
	keys := func(ss []*keyState[int]) (out []string) {
		for _, s := range ss {
			out = append(out, s.key)
		}
		return out
	}
	var rev statedb.Revision
	queue := func(key string, obj int) { rev++; lc.queue(key, task[int]{obj: obj, rev: rev}) }
	queue("low1", 1)
	queue("low2", 2)
	queue("mid", 150)
	queue("high1", 900)
	queue("high2", 901)
	queue("low3", 3)
	queue("high3", 902)
	queue("low1", 999) // low1 becomes the most urgent, and stays the oldest
	// 4 keys: one oldest (low1, now as urgent as the highs), then three by
	// priority; in priority order, first queued first within one priority.
	taken := lc.takeQueued(4)
	assert.Equal(t, []string{"low1", "high1", "high2", "high3"}, keys(taken))
	for _, s := range taken {
		lc.start(s)
	}
	assert.Equal(t, []string{"low2", "mid", "low3"}, keys(lc.queued), "arrival order kept")
	// Takes of one key: a quarter each, so one in four is by arrival.
	queue("high4", 903)
	queue("high5", 904)
	queue("high6", 905)
	var got []string
	for range 4 {
		got = append(got, keys(lc.takeQueued(1))...)
	}
	assert.Equal(t, []string{"high4", "high5", "high6", "low2"}, got)
	assert.Equal(t, []string{"mid", "low3"}, keys(lc.takeQueued(5)), "all: by priority")
	assert.Nil(t, lc.queued)
	assert.Zero(t, len(lc.byPriority.entries))
}

// TestStaleAfterDelete checks the cuts of staleness: a status created
// before a delete of its key was read is stale, one created after is not,
// a commit's cut lies just below the version it applied, and between one
// and two generations of keys are kept.
func TestStaleAfterDelete(t *testing.T) {
	var lc staleness
	before := status.Done()
	assert.False(t, lc.cut([]byte("a"), before.ID()), "nothing recorded yet")

	lc.sawDelete([]byte("a"))
	after := status.Done()
	assert.True(t, lc.cut([]byte("a"), before.ID()), "created before the delete was read")
	assert.False(t, lc.cut([]byte("a"), after.ID()), "created after")
	assert.False(t, lc.cut([]byte("b"), before.ID()), "another key")
	assert.True(t, lc.cut([]byte("a"), 0), "no identity: no age, stale")
	assert.False(t, lc.cut([]byte("a"), 0), "no identity: stale once per delete")
	assert.True(t, lc.cut([]byte("a"), before.ID()), "identities are still compared")
	assert.False(t, lc.cut([]byte("b"), 0), "no identity, another key")

	applied := status.Pending()
	lc.sawOlder([]byte("c"), applied.ID())
	assert.True(t, lc.cut([]byte("c"), after.ID()), "older than the version applied")
	assert.False(t, lc.cut([]byte("c"), applied.ID()), "the version applied itself")
	lc.sawOlder([]byte("a"), after.ID())
	assert.False(t, lc.cut([]byte("a"), after.ID()), "a later cut never lowers")

	lc.sawDelete([]byte("a"))
	assert.True(t, lc.cut([]byte("a"), 0), "no identity: stale again after another delete")

	for i := range supersededGeneration - 2 {
		lc.sawDelete(fmt.Appendf(nil, "k%d", i))
	}
	assert.True(t, lc.cut([]byte("a"), before.ID()), "one generation is kept whole")
	for i := range supersededGeneration {
		lc.sawDelete(fmt.Appendf(nil, "m%d", i))
	}
	assert.True(t, lc.cut([]byte("k0"), before.ID()), "the previous generation is kept")
	for i := range supersededGeneration {
		lc.sawDelete(fmt.Appendf(nil, "n%d", i))
	}
	assert.False(t, lc.cut([]byte("k0"), before.ID()), "two generations back are dropped")
	assert.LessOrEqual(t, len(lc.cur)+len(lc.old), 2*supersededGeneration)
}

// Once a burst of failures has settled, the lifecycles hold no storage
// sized for it: the heaps are freed and the maps made anew.
func TestABurstOfFailuresLeavesNoMemoryHeld(t *testing.T) {
	lc := newLifecycles[*benchObj]()
	lc.trackOutdated()
	benchWaiting(lc, 20*shrinkAbove)
	lc.takeOutdated()
	end := time.Unix(3_000_000, 0)
	for s, ok := lc.popDue(end.UnixNano()); ok; s, ok = lc.popDue(end.UnixNano()) {
		lc.start(s)
		lc.settle(s, nil, true, true, true, 0, 0, end)
	}
	require.Equal(t, 20*shrinkAbove, len(lc.takeOutdated()), "rows to remove")
	require.Equal(t, 0, len(lc.takeOutdated()))
	assert.Nil(t, lc.heap.entries)
	assert.Nil(t, lc.lows)
	assert.Nil(t, lc.sinces)
	assert.LessOrEqual(t, lc.peak, shrinkAbove, "byKey made anew")
	assert.Equal(t, 0, len(lc.spare), "the map the last call returned is dropped")
}

func TestUnixNanoSaturates(t *testing.T) {
	assert.Equal(t, int64(math.MinInt64), unixNanoSat(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)))
	assert.Equal(t, int64(math.MaxInt64), unixNanoSat(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)))
	assert.Equal(t, int64(5), unixNanoSat(time.Unix(0, 5)))
}

// The priority heap ranks by ^priority: the highest priority first, over
// the whole range of int, with no overflow at its ends.
func TestPriorityRankOrdersHighestFirst(t *testing.T) {
	prios := []int{math.MinInt, -1, 0, 1, math.MaxInt}
	for i := 1; i < len(prios); i++ {
		assert.Less(t, priorityRank(prios[i]), priorityRank(prios[i-1]), "%d before %d", prios[i], prios[i-1])
	}
}
