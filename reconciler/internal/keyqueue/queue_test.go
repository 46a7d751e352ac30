package keyqueue

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testTask(rev uint64, id uint64) Task[int] {
	return Task[int]{Obj: int(rev), Rev: rev, Asked: rev, StatusID: id, Since: time.Unix(int64(rev), 0)}
}

// The successor rules of State (invariants 11 and 13): a change back to
// the version running clears the successor, unless a delete of the key or
// a prune came between.
func TestLifecycleSuccessorRules(t *testing.T) {
	lc := New[int](nil)
	s := lc.Add(Change[int]{Key: "a", Task: testTask(1, 100)})
	require.NotNil(t, s)
	assert.Equal(t, phaseRunning, s.phase, "handed out started")
	assert.Nil(t, lc.Add(Change[int]{Key: "a", Task: testTask(2, 200)}), "a newer version waits")
	assert.True(t, s.hasNext)
	assert.Nil(t, lc.Add(Change[int]{Key: "a", Task: testTask(3, 100)}), "back to the version running")
	assert.False(t, s.hasNext, "nothing after the version running")

	assert.Nil(t, lc.Add(Change[int]{Key: "a", Task: Task[int]{Rev: 4, Delete: true}}))
	assert.True(t, s.hasNext && s.next.Delete)
	assert.Nil(t, lc.Add(Change[int]{Key: "a", Task: testTask(5, 100)}), "deleted, then the same object again")
	assert.True(t, s.hasNext, "after a delete the same identity is new work")
	assert.Equal(t, uint64(5), s.next.Rev)

	lc.Done(s, "", Task[int]{}, Outcome[int]{Ran: true, Settled: true, Written: false}, time.Now())
	assert.Equal(t, phaseQueued, s.phase, "the successor is queued")
	assert.Equal(t, []*State[int]{s}, lc.Get(FromQueue, 10, 0))
	assert.False(t, s.deleteSeen, "a new version starts afresh")
	lc.Add(Change[int]{As: Pruned, Absent: func(int) bool { return true }})
	assert.Nil(t, lc.Add(Change[int]{Key: "a", Task: testTask(6, 100)}))
	assert.True(t, s.hasNext, "after a prune the same identity is new work")
	lc.Done(s, "", Task[int]{}, Outcome[int]{Ran: true, Settled: true, Written: true}, time.Now())
	lc.Get(FromQueue, 1, 0)
	lc.Done(s, "", Task[int]{}, Outcome[int]{Ran: true, Settled: true, Written: true}, time.Now())
	assert.False(t, lc.Figures().Tracked, "done: nothing left")
	assert.Empty(t, lc.active)
}

// The version running, read again (a deferred change looks its object up),
// is no successor, even with a status without identity: else the Error
// its failure writes would leave the successor not current, and nothing
// would retry it. Chaos found this with workers, a refresh mark and a
// Pending status without identity.
func TestLifecycleSameRevisionIsNoSuccessor(t *testing.T) {
	lc := New[int](nil)
	s := lc.Add(Change[int]{Key: "a", Task: testTask(7, 0)})
	assert.Nil(t, lc.Add(Change[int]{Key: "a", Task: testTask(7, 0)}))
	assert.False(t, s.hasNext, "the very revision running is no successor")

	lc.Done(s, "", Task[int]{}, Outcome[int]{Ran: true, Err: errors.New("e"), Written: true, RetryAt: time.Now().UnixNano(), ErrID: 300}, time.Now())
	assert.Equal(t, phaseWaiting, s.phase, "the failure is retried")
	assert.Equal(t, uint64(300), s.errID)
}

// A model of the Queue driven by random moves: every State is in
// exactly one place for its phase, the counters agree, and retries come
// out of the heap in due order. With priorities, every queued State is
// in the priority heap too, at the place it records.
func TestLifecycleMatchesAModel(t *testing.T) {
	t.Run("arrival", func(t *testing.T) { testLifecycleModel(t, false) })
	t.Run("priority", func(t *testing.T) { testLifecycleModel(t, true) })
}

func testLifecycleModel(t *testing.T, priorities bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	lc := New[int](nil)
	told := map[string]*State[int]{} // as the retries table's writer keeps it
	lc.Configure(Settings[int]{FailureChanged: func(key string, s *State[int]) { told[key] = s }})
	if priorities {
		lc.Configure(Settings[int]{Priority: func(obj int) int { return obj % 5 }, Share: 0.25})
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
				require.Same(t, s, told[key], "a failing key's row is told with its State")
			}
		}
		for key, s := range told {
			if s != nil {
				require.Same(t, s, lc.byKey[key], "a row told is of the key's State")
				require.Positive(t, s.attempts, "a row told fails")
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
				require.Equal(t, priorityRank(e.s.task.Obj%5), e.rank, "the priority of the task queued")
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
			if s.attempts > 0 && (low == 0 || s.task.Asked < low) {
				low = s.task.Asked
			}
			if s.phase == phaseWaiting || s.active >= 0 {
				oldest = earliest(oldest, s.task.Since)
			}
			if s.hasNext {
				oldest = earliest(oldest, s.next.Since)
			}
		}
		require.Equal(t, low, lc.Lows().Retry)
		require.Equal(t, oldest, lc.Lows().Since)
		require.LessOrEqual(t, len(lc.lows), 2*len(lc.heap.entries)+64)
	}
	running := map[string]*State[int]{}
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
		switch rng.IntN(8) {
		case 0, 1:
			j := testTask(rev, uint64(rng.IntN(3)+1))
			if priorities {
				j.Obj = int(j.StatusID) // one status identity, one version
			}
			if rng.IntN(4) == 0 {
				j = Task[int]{Rev: rev, Asked: rev, Delete: true}
			}
			if priorities && rng.IntN(2) == 0 {
				lc.Add(Change[int]{Key: key, Task: j, As: Queued})
			} else if s := lc.Add(Change[int]{Key: key, Task: j}); s != nil {
				running[key] = s
			}
		case 2:
			j := testTask(rev, 1)
			if priorities {
				j.Obj = 1
			}
			lc.Add(Change[int]{Key: key, Task: j, As: Failed, ErrID: uint64(rng.IntN(3) + 10), Err: errors.New("e"), Now: now})
		case 3: // finish a running key
			for k, s := range running {
				delete(running, k)
				failed := rng.IntN(2) == 0
				lc.Done(s, "", Task[int]{}, Outcome[int]{Ran: true, Err: errors.New("e"), Settled: !failed, Written: true, RetryAt: now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond).UnixNano(), ErrID: 7}, now)
				break
			}
		case 4:
			now = now.Add(100 * time.Millisecond)
			var prev int64
			for {
				taken := lc.Get(Due, 1, now.UnixNano())
				if len(taken) == 0 {
					break
				}
				s := taken[0]
				require.LessOrEqual(t, s.due, now.UnixNano())
				require.GreaterOrEqual(t, s.due, prev, "popped out of order")
				prev = s.due
				running[s.key] = s
			}
		case 5:
			for _, s := range lc.Get(FromQueue, rng.IntN(4), 0) {
				running[s.key] = s
			}
		case 6: // a running key that never started goes back to the queue
			for k, s := range running {
				delete(running, k)
				lc.Done(s, "", Task[int]{}, Outcome[int]{}, now)
				break
			}
		case 7: // an untracked task of the inline executor: failed, or never started
			if _, ok := lc.byKey[key]; !ok {
				j := testTask(rev, uint64(rng.IntN(3)+1))
				if priorities {
					j.Obj = int(j.StatusID)
				}
				ran := rng.IntN(3) > 0
				lc.Done(nil, key, j, Outcome[int]{Ran: ran, Err: errors.New("e"), Written: true, RetryAt: now.UnixNano(), ErrID: 8}, now)
				want := phaseWaiting
				if !ran {
					want = phaseQueued
				}
				require.Equal(t, want, lc.byKey[key].phase)
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
	lc := New[int](nil)
	lc.Configure(Settings[int]{Priority: func(obj int) int { return obj / 100 }, Share: 0.25})
	keys := func(ss []*State[int]) (out []string) {
		for _, s := range ss {
			out = append(out, s.key)
		}
		return out
	}
	var rev uint64
	queue := func(key string, obj int) {
		rev++
		lc.Add(Change[int]{Key: key, Task: Task[int]{Obj: obj, Rev: rev}, As: Queued})
	}
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
	taken := lc.Get(FromQueue, 4, 0)
	assert.Equal(t, []string{"low1", "high1", "high2", "high3"}, keys(taken))
	assert.Equal(t, []string{"low2", "mid", "low3"}, keys(lc.queued), "arrival order kept")
	// Takes of one key: a quarter each, so one in four is by arrival.
	queue("high4", 903)
	queue("high5", 904)
	queue("high6", 905)
	var got []string
	for range 4 {
		got = append(got, keys(lc.Get(FromQueue, 1, 0))...)
	}
	assert.Equal(t, []string{"high4", "high5", "high6", "low2"}, got)
	assert.Equal(t, []string{"mid", "low3"}, keys(lc.Get(FromQueue, 5, 0)), "all: by priority")
	assert.Nil(t, lc.queued)
	assert.Zero(t, len(lc.byPriority.entries))
}

// Once a burst of failures has settled, the Queue hold no storage
// sized for it: the heaps are freed and the maps made anew.
func TestABurstOfFailuresLeavesNoMemoryHeld(t *testing.T) {
	lc := New[*int](nil)
	told := 0
	lc.Configure(Settings[*int]{FailureChanged: func(_ string, s *State[*int]) {
		if s == nil {
			told++
		}
	}})
	benchWaiting(lc, 20*shrinkAbove)
	end := time.Unix(3_000_000, 0)
	for taken := lc.Get(Due, 1, end.UnixNano()); len(taken) > 0; taken = lc.Get(Due, 1, end.UnixNano()) {
		lc.Done(taken[0], "", Task[*int]{}, Outcome[*int]{Ran: true, Settled: true, Written: true}, end)
	}
	require.Equal(t, 20*shrinkAbove, told, "rows to remove")
	assert.Nil(t, lc.heap.entries)
	assert.Nil(t, lc.lows)
	assert.Nil(t, lc.sinces)
	assert.LessOrEqual(t, lc.peak, shrinkAbove, "byKey made anew")
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
