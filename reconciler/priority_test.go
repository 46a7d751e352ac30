package reconciler_test

// WithPriority end to end: each test pins one promise of its doc comment
// and of docs/control.md (the queue's own ordering: keyqueue's
// TestTakeQueuedByPriority; Register's refusals: TestRegisterRejectsBadInput).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// ppPrio reads an item's priority from its value: the integer before the
// first ".", 0 if there is none.
func ppPrio(it *item) int {
	v, _, _ := strings.Cut(it.Value, ".")
	p, _ := strconv.Atoi(v)
	return p
}

// Higher priority first, FIFO within a priority, a delete ranks as the
// deleted object, a newer version is ranked anew, and each version's
// priority is read once.
func TestPriorityOrder(t *testing.T) {
	tg := newTarget()
	var mu sync.Mutex
	reads := map[string]int{} // "key=value" of Pending versions -> priority calls
	prio := func(it *item) int {
		if it.Status.Kind == status.KindPending {
			mu.Lock()
			reads[it.ID+"="+it.Value]++
			mu.Unlock()
		}
		return ppPrio(it)
	}
	// A round big enough to hold everything, and a share of one object per
	// round for the longest waiting.
	f := startFixture(t, tg, nil, reconciler.WithPruning(0), reconciler.WithRoundLimits(1000, nil),
		reconciler.WithPriority(prio, 0.001))

	// Objects to delete later, at priority 9.
	f.upsert(kititems("9", "d0", "d1", "d2")...)
	f.caughtUp()

	h := tg.hold("s")
	f.upsert(&item{ID: "s", Value: "0"})
	h.wait(t)
	// With one worker the reconciler reads nothing while s is held.
	for i := range 10 {
		id := fmt.Sprintf("l%d", i)
		f.upsert(&item{ID: id, Value: "1"})
	}
	f.remove("d0", "d1", "d2")
	for i := range 10 {
		f.upsert(&item{ID: fmt.Sprintf("m%d", i), Value: "5"})
	}
	for i := range 10 {
		f.upsert(&item{ID: fmt.Sprintf("h%d", i), Value: "9"})
	}
	f.upsert(&item{ID: "l3", Value: "7"}) // re-ranked: after the 9s, before the 5s
	h.let()
	f.caughtUp()

	applied := tg.applied()
	start := -1
	for i, w := range applied {
		if w == "update s=0" {
			start = i
		}
	}
	require.GreaterOrEqual(t, start, 0, "s not applied: %v", applied)
	seq := applied[start+1:]
	t.Logf("applied: %v", seq)
	pos := map[string]int{}
	for i, w := range seq {
		pos[w] = i
	}
	for _, w := range []string{"update l3=7", "delete d0", "delete d1", "delete d2", "update h9=9", "update m9=5", "update l9=1"} {
		require.Contains(t, pos, w, "never applied")
	}
	if p, ok := pos["update l3=1"]; ok {
		assert.Less(t, p, pos["update l3=7"], "l3's versions applied out of revision order")
	}
	rank := func(w string) int {
		switch {
		case strings.HasPrefix(w, "delete d"), strings.HasSuffix(w, "=9"):
			return 9
		case w == "update l3=7":
			return 7
		case strings.HasSuffix(w, "=5"):
			return 5
		default:
			return 1
		}
	}
	// The share of the longest waiting (one object a round here) may take
	// l0, the first written, ahead of its rank; nothing else may be.
	for i := range seq {
		for j := i + 1; j < len(seq); j++ {
			if rank(seq[i]) < rank(seq[j]) && seq[i] != "update l0=1" {
				t.Errorf("%q (priority %d) before %q (priority %d)", seq[i], rank(seq[i]), seq[j], rank(seq[j]))
			}
		}
	}
	// FIFO within a priority (updates by arrival; deletes by arrival).
	inOrder := func(words ...string) {
		for i := 1; i < len(words); i++ {
			assert.Less(t, pos[words[i-1]], pos[words[i]], "%s applied after %s, though written first", words[i-1], words[i])
		}
	}
	var ls, ms, hs []string
	for i := range 10 {
		if i != 3 {
			ls = append(ls, fmt.Sprintf("update l%d=1", i))
		}
		ms = append(ms, fmt.Sprintf("update m%d=5", i))
		hs = append(hs, fmt.Sprintf("update h%d=9", i))
	}
	inOrder(ls...)
	inOrder(ms...)
	inOrder(hs...)
	inOrder("delete d0", "delete d1", "delete d2")
	// The deletes of priority-9 objects go before every priority-5 change.
	assert.Less(t, pos["delete d2"], pos["update m0=5"], "a delete was not ranked as the deleted object")

	mu.Lock()
	defer mu.Unlock()
	for v, n := range reads {
		assert.LessOrEqual(t, n, 1, "the priority of version %s was read %d times", v, n)
	}
	assert.Equal(t, 1, reads["l3=7"], "the newer version of l3 was not ranked anew")
}

// ppStream is a metrics.RoundMetrics that keeps a steady stream of urgent
// writes going between rounds, writes one low-priority object once the
// stream is established, and records how many rounds it waits.
type ppStream struct {
	f        *fixture
	perRound int // urgent writes per round
	backlog  int // most urgent writes waiting at once
	cap      int // rounds after which the stream stops regardless
	lows     int // low-priority objects written at once; the last is "low"

	applied atomic.Int64 // urgent updates applied
	lowDone atomic.Bool

	mu       sync.Mutex
	rounds   int
	written  int
	lowAt    int // the round after which low was written; 0 before
	lowN     int // urgent changes written before low, not applied then
	lowRound int // the round low was applied in
	adds     int // objects the rounds took (RoundStats.Adds)
	lowAtAdd int // adds when low was written
	lowAdd   int // adds when low was applied
	stopped  bool
	done     chan struct{}
}

func (s *ppStream) ReconciliationDuration(cell.FullModuleID, string, string, time.Duration) {}
func (s *ppStream) ReconciliationErrors(cell.FullModuleID, string, int, int)                {}
func (s *ppStream) PruneError(cell.FullModuleID, string, error)                             {}
func (s *ppStream) PruneDuration(cell.FullModuleID, string, time.Duration)                  {}

// Round counts the rounds that took work (Adds > 0): with workers, rounds
// that only commit results give no room to anything.
func (s *ppStream) Round(_ cell.FullModuleID, _ string, st metrics.RoundStats) {
	s.mu.Lock()
	if st.Adds > 0 {
		s.rounds++
		s.adds += st.Adds
	}
	if s.stopped || s.f == nil {
		s.mu.Unlock()
		return
	}
	if s.lowDone.Load() || s.rounds > s.cap {
		s.stopped = true
		close(s.done)
		s.mu.Unlock()
		return
	}
	n := min(s.perRound, s.backlog-(s.written-int(s.applied.Load())))
	first := s.written
	s.written += max(n, 0)
	writeLow := s.lowAt == 0 && s.rounds >= 6
	s.mu.Unlock()

	if n > 0 {
		objs := make([]*item, n)
		for i := range objs {
			objs[i] = &item{ID: fmt.Sprintf("u%08d", first+i), Value: "100"}
		}
		s.f.upsert(objs...)
	}
	if writeLow {
		s.mu.Lock()
		s.lowN = s.written - int(s.applied.Load()) + max(s.lows, 1) - 1
		s.lowAt = s.rounds
		s.lowAtAdd = s.adds
		s.mu.Unlock()
		var objs []*item
		for i := range max(s.lows, 1) - 1 {
			objs = append(objs, &item{ID: fmt.Sprintf("lowa%03d", i), Value: "0"})
		}
		s.f.upsert(append(objs, &item{ID: "low", Value: "0"})...)
	}
}

// No starvation: with a steady stream of urgent writes, a low-priority
// change with n changes before it still waiting is applied within about
// (n+1)/(share·R) rounds. Rounds are counted with RoundMetrics.
func TestPriorityNoStarvationInEveryVariant(t *testing.T) {
	cases := []struct {
		name    string
		R       int
		share   float64
		workers int
		batch   bool
		lows    int
	}{
		{"share 1", 10, 1, 1, false, 0},
		{"default share", 16, 0, 1, false, 0},
		{"share 0.001", 4, 0.001, 1, false, 0},
		{"round size 1", 1, 0.5, 1, false, 0},
		{"round size 1 tiny share", 1, 0.01, 1, false, 0},
		{"huge round size", math.MaxInt, 0.1, 1, false, 0},
		{"8 workers", 16, 0.25, 8, false, 0},
		{"8 workers tiny share", 16, 0.01, 8, false, 0},
		{"batches", 16, 0.25, 1, true, 0},
		{"batches 4 workers", 16, 0.125, 4, true, 0},
		{"20 lows share 1", 10, 1, 1, false, 20},
		{"20 lows default share", 16, 0, 1, false, 20},
		{"20 lows round size 1", 1, 0.5, 1, false, 20},
		{"20 lows 8 workers", 16, 0.25, 8, false, 20},
		{"20 lows batches", 16, 0.25, 4, true, 20},
		{"300 lows small share", 8, 0.05, 1, false, 300},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			share := c.share
			if share == 0 {
				share = 1.0 / 8
			}
			per := min(c.R, 200)
			s := &ppStream{perRound: per, backlog: 3 * per, lows: c.lows, done: make(chan struct{})}
			// The longest the bound can be with backlog changes ahead.
			room := share * float64(min(c.R, math.MaxInt32))
			worst := math.Ceil(float64(s.backlog+c.lows+1)/room) + 2
			s.cap = int(worst)*3 + 50

			o := newTarget()
			o.setAfter(func(_ context.Context, it *item) {
				if it.ID == "low" {
					s.mu.Lock()
					s.lowRound = s.rounds + 1
					s.lowAdd = s.adds
					s.mu.Unlock()
					s.lowDone.Store(true)
				} else if strings.HasPrefix(it.ID, "u") {
					s.applied.Add(1)
				}
			})
			v := variant{c.workers, c.batch}
			f := v.start(t, o, nil, reconciler.WithMetrics(s), reconciler.WithRoundLimits(c.R, nil),
				reconciler.WithPriority(ppPrio, c.share))
			s.mu.Lock()
			s.f = f
			s.mu.Unlock()
			f.upsert(&item{ID: "go", Value: "100"}) // the first round
			select {
			case <-s.done:
			case <-time.After(3 * timeout):
				t.Fatalf("the stream did not end")
			}
			s.mu.Lock()
			lowAt, lowN, lowRound, rounds, taken := s.lowAt, s.lowN, s.lowRound, s.rounds, s.lowAdd-s.lowAtAdd
			s.mu.Unlock()
			require.NotZero(t, lowAt, "the low object was never written")
			bound := int(math.Ceil(float64(lowN+1)/room)) + 2
			require.True(t, s.lowDone.Load(), "low (written after round %d with %d changes ahead) not applied after %d rounds; bound about %d",
				lowAt, lowN, rounds-lowAt, bound)
			waited := lowRound - lowAt
			t.Logf("low waited %d rounds, %d objects taken, with %d ahead (bound %d rounds)", waited, taken, lowN, bound)
			if c.workers == 1 {
				assert.LessOrEqual(t, waited, bound, "low waited %d rounds with %d changes ahead, bound about %d", waited, lowN, bound)
			} else {
				// A round has the room its workers left, often less than
				// R under load: count the objects taken before low
				// instead. share of each take goes by arrival, so low is
				// taken once about (n+1)/share objects were, give or take
				// the rounds in flight.
				most := int(math.Ceil(float64(lowN+1)/share)) + 2*per
				assert.LessOrEqual(t, taken, most, "%d objects were taken before low, with %d changes ahead; bound about %d", taken, lowN, most)
			}
			f.converged(o)
		})
	}
}

// ppWorkload writes, deletes, re-inserts identically and reverts objects at
// random, with the reconciler paused and resumed, the hive stopped and
// started and the target down at times, and checks at the end that the
// target holds exactly the table.
func TestPriorityLosesNothing(t *testing.T) {
	type opt struct {
		name    string
		v       variant
		breaker bool
		max     int
		share   float64
	}
	cases := []opt{
		{"1 worker", variant{1, false}, false, 0, 0.25},
		{"8 workers", variant{8, false}, false, 0, 0.25},
		{"batch", variant{1, true}, false, 0, 0.25},
		{"breaker", variant{1, false}, true, 0, 0.25},
		{"breaker 8 workers batch", variant{8, true}, true, 3, 0.25},
		{"max attempts", variant{4, false}, false, 3, 0.25},
		{"tiniest share", variant{1, false}, false, 0, math.SmallestNonzeroFloat64},
		{"tiniest share 8 workers batch breaker", variant{8, true}, true, 0, math.SmallestNonzeroFloat64},
		{"share 1", variant{4, false}, true, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(33, uint64(len(c.name))))
			o := newTarget()
			var down atomic.Bool
			var fmu sync.Mutex
			failedOnce := map[string]bool{}
			o.setFail(func(op reconcilertest.Op, it *item) error {
				if down.Load() {
					return errKitDown
				}
				if op != reconcilertest.OpUpdate || it == nil {
					return nil
				}
				// Each version whose value ends in 7 fails once.
				fmu.Lock()
				defer fmu.Unlock()
				k := it.ID + "=" + it.Value
				if strings.HasSuffix(it.Value, "7") && !failedOnce[k] {
					failedOnce[k] = true
					return errKitObject
				}
				return nil
			})
			opts := []reconciler.Option{
				reconciler.WithRoundLimits(4, nil),
				reconciler.WithRetry(time.Millisecond, 4*time.Millisecond),
				reconciler.WithPriority(ppPrio, c.share),
			}
			if c.breaker {
				opts = append(opts, reconciler.WithCircuitBreaker(3, time.Millisecond,
					func(err error) bool { return errors.Is(err, errKitDown) }))
			}
			if c.max > 0 {
				opts = append(opts, reconciler.WithMaxAttempts(c.max))
			}
			f := c.v.start(t, o, nil, opts...)

			keys := make([]string, 30)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%02d", i)
			}
			history := map[string][]string{}
			seq := 0
			paused := false
			for step := range 600 {
				k := keys[rng.IntN(len(keys))]
				switch r := rng.IntN(100); {
				case r < 50:
					seq++
					v := fmt.Sprintf("%d.%d", rng.IntN(5)-2, seq)
					history[k] = append(history[k], v)
					f.upsert(&item{ID: k, Value: v})
				case r < 65:
					f.remove(k)
				case r < 75:
					if cur, ok := f.get(k); ok {
						f.insertAs(cur.clone()) // identical re-insert
					}
				case r < 85:
					if h := history[k]; len(h) > 1 {
						f.upsert(&item{ID: k, Value: h[rng.IntN(len(h)-1)]}) // revert
					}
				case r < 90:
					if paused {
						f.rec.Resume()
					} else {
						f.rec.Pause()
					}
					paused = !paused
				case r < 93:
					down.Store(!down.Load())
				case r < 95 && step > 0:
					f.stop()
					f.start()
				}
			}
			if paused {
				f.rec.Resume()
			}
			down.Store(false)
			f.converged(o)
			for obj := range f.table.All(f.db.ReadTxn()) {
				assert.False(t, obj.Status.Terminal, "%s gave up: %s", obj.ID, obj.Status.Error)
			}
		})
	}
}

// ppHash is a stable hash of a key.
func ppHash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// A priority function that panics, returns the extremes of int or a new
// answer every call loses and duplicates nothing: every version written is
// applied at most once, versions of a key in the order written, and the
// target ends up holding the table.
func TestPriorityHostileFunctionLosesNothing(t *testing.T) {
	forVariants(t, []variant{{1, false}, {8, false}, {1, true}, {4, true}}, func(t *testing.T, v variant) {
		var calls, panics atomic.Int64
		prio := func(it *item) int {
			calls.Add(1)
			switch ppHash(it.ID) % 5 {
			case 0:
				panics.Add(1)
				panic("priority: " + it.ID)
			case 1:
				return math.MinInt
			case 2:
				return math.MaxInt
			case 3:
				return rand.Int() - math.MaxInt/2
			default:
				return ppPrio(it)
			}
		}
		o := newTarget()
		f := v.start(t, o, nil, reconciler.WithRoundLimits(8, nil), reconciler.WithPriority(prio, 0.01))
		// Past the backlog (what the table holds at the first run),
		// which priorities do not order.
		f.upsert(&item{ID: "m", Value: "0.000000"})
		f.caughtUp()
		rng := rand.New(rand.NewPCG(7, 33))
		seq := 0
		for range 40 {
			var batch []*item
			for range 1 + rng.IntN(20) {
				seq++
				batch = append(batch, &item{ID: fmt.Sprintf("k%02d", rng.IntN(40)), Value: fmt.Sprintf("%d.%06d", rng.IntN(3), seq)})
			}
			f.upsert(batch...)
			if rng.IntN(3) == 0 {
				f.remove(fmt.Sprintf("k%02d", rng.IntN(40)))
			}
		}
		f.converged(o)
		require.NotZero(t, calls.Load(), "priority never called")
		require.NotZero(t, panics.Load(), "no priority panicked")

		seen := map[string]bool{}
		last := map[string]string{}
		for _, c := range o.Calls() {
			if c.Op != reconcilertest.OpUpdate || c.Err != nil {
				continue
			}
			kv := c.Key + "=" + c.Value
			assert.False(t, seen[kv], "version %s applied twice", kv)
			seen[kv] = true
			_, n, _ := strings.Cut(c.Value, ".")
			_, p, _ := strings.Cut(last[c.Key], ".")
			assert.Greater(t, n, p, "%s applied after the newer %s", kv, last[c.Key])
			last[c.Key] = c.Value
		}
	})
}

// ppReadAhead counts the priority calls on Pending versions and checks at
// every round that no more than a few rounds beyond what was taken have
// been read.
type ppReadAhead struct {
	*kitmetrics
	read    atomic.Int64 // priority calls on Pending objects
	started atomic.Int64 // updates started
	mu      sync.Mutex
	worst   int64
	rounds  int
}

func (m *ppReadAhead) Round(id cell.FullModuleID, name string, s metrics.RoundStats) {
	ahead := m.read.Load() - m.started.Load()
	m.mu.Lock()
	m.worst = max(m.worst, ahead)
	m.rounds++
	m.mu.Unlock()
	m.kitmetrics.Round(id, name, s)
}

// Memory bounded: with 200k Pending objects and a slow target, the
// reconciler reads at most four rounds of changes ahead. Nothing documented
// shows the size of what is queued (Depth counts collected operations, not
// the read-ahead), but the priority is read once per version as its change
// is read, so the priority calls tell how far it has read.
func TestPriorityReadAheadBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("200k objects")
	}
	const R = 100
	m := &ppReadAhead{kitmetrics: newKitMetrics()}
	o := newTarget()
	o.mu.Lock()
	o.update = func(ctx context.Context, it *item) error {
		m.started.Add(1)
		// A slow target.
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Microsecond):
		}
		return nil
	}
	o.mu.Unlock()
	prio := func(it *item) int {
		if it.Status.Kind == status.KindPending {
			m.read.Add(1)
		}
		return ppPrio(it)
	}
	f := variant{2, false}.start(t, o, nil, reconciler.WithMetrics(m), reconciler.WithRoundLimits(R, nil),
		reconciler.WithPriority(prio, 0))
	const total = 200_000
	for i := 0; i < total; i += 10_000 {
		f.upsert(items(fmt.Sprintf("b%02d", i/10_000), 10_000, "1")...)
	}
	m.waitRound(t, "60 rounds", func(metrics.RoundStats) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.rounds >= 60
	})
	m.mu.Lock()
	worst, rounds := m.worst, m.rounds
	m.mu.Unlock()
	t.Logf("read ahead of what was started: at most %d over %d rounds (read %d, started %d)", worst, rounds, m.read.Load(), m.started.Load())
	assert.LessOrEqual(t, worst, int64(6*R), "read %d changes ahead of what it started, more than four rounds of %d", worst, R)
	assert.Less(t, m.read.Load(), int64(total/2), "read %d of %d changes with only %d started", m.read.Load(), total, m.started.Load())
}

// FIFO within one priority holds across rounds and beyond the read-ahead:
// with rounds of 4 and 300 changes waiting, each priority's changes are
// applied in the order written, whatever the share. WithPriority's doc:
// "those of higher priority, and among equal priorities the first read".
func TestPriorityFIFOAcrossRounds(t *testing.T) {
	for _, share := range []float64{0.001, 0, 0.5, 1} {
		// One worker: with more, operations on different objects overlap
		// and the target's order of calls says nothing.
		for _, v := range []variant{{1, false}, {1, true}} {
			t.Run(fmt.Sprint("share ", share, " ", v), func(t *testing.T) {
				tg := newTarget()
				f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, share))
				h := tg.hold("s")
				f.upsert(&item{ID: "s", Value: "0"})
				h.wait(t)
				var written []string
				for i := range 300 {
					it := &item{ID: fmt.Sprintf("o%03d", i), Value: strconv.Itoa(1 + i%3)}
					written = append(written, "update "+it.ID+"="+it.Value)
					f.upsert(it)
				}
				h.let()
				f.caughtUp()
				pos := map[string]int{}
				if testing.Verbose() {
					t.Logf("applied: %v", tg.applied())
				}
				for i, w := range tg.applied() {
					if _, dup := pos[w]; dup {
						t.Errorf("%s applied twice", w)
					}
					pos[w] = i
				}
				last := map[byte]string{}
				for _, w := range written {
					p, ok := pos[w]
					if !assert.True(t, ok, "%s never applied", w) {
						continue
					}
					class := w[len(w)-1]
					if prev, ok := last[class]; ok {
						assert.Less(t, pos[prev], p, "%s was written before %s, same priority, but applied after it", prev, w)
					}
					last[class] = w
				}
			})
		}
	}
}

// No starvation when the stream of urgent writes comes from inside Update:
// each urgent object applied writes another, and a low-priority object
// written once the stream runs is applied within the bound.
func TestPriorityNoStarvationWhenUpdateWritesTheStream(t *testing.T) {
	for _, c := range []struct {
		R       int
		share   float64
		workers int
	}{{8, 0, 1}, {8, 0.05, 1}, {1, 0.25, 1}, {16, 0.125, 8}} {
		t.Run(fmt.Sprint("R=", c.R, " share=", c.share, " workers=", c.workers), func(t *testing.T) {
			share := c.share
			if share == 0 {
				share = 1.0 / 8
			}
			room := share * float64(c.R)
			s := &ppStream{done: make(chan struct{})}
			backlog := 2 * c.R
			o := newTarget()
			var f *fixture
			var fmu sync.Mutex
			var next atomic.Int64
			next.Store(int64(backlog))
			var lowN, lowAt, lowRound atomic.Int64
			var stop atomic.Bool
			o.setAfter(func(_ context.Context, it *item) {
				fmu.Lock()
				ff := f
				fmu.Unlock()
				if it.ID == "low" {
					s.mu.Lock()
					lowRound.Store(int64(s.rounds + 1))
					s.mu.Unlock()
					s.lowDone.Store(true)
					stop.Store(true)
					return
				}
				if stop.Load() {
					return
				}
				applied := s.applied.Add(1)
				n := next.Add(1) - 1
				ff.upsert(&item{ID: fmt.Sprintf("w%08d", n), Value: "100"})
				if applied == int64(4*c.R) {
					s.mu.Lock()
					lowAt.Store(int64(s.rounds + 1))
					s.mu.Unlock()
					lowN.Store(next.Load() - applied)
					ff.upsert(&item{ID: "low", Value: "0"})
				}
				s.mu.Lock()
				over := s.rounds > 20000
				s.mu.Unlock()
				if over {
					stop.Store(true)
				}
			})
			fx := variant{c.workers, false}.fixture(t, o, nil, reconciler.WithMetrics(s), reconciler.WithRoundLimits(c.R, nil),
				reconciler.WithPriority(ppPrio, c.share))
			fmu.Lock()
			f = fx
			fmu.Unlock()
			fx.start()
			fx.upsert(items("w", backlog, "100")...)
			waitUntil(t, "low applied", func() (bool, <-chan struct{}) {
				_, ch := o.CallsWatch()
				return s.lowDone.Load() || stop.Load(), ch
			})
			require.True(t, s.lowDone.Load(), "low never applied")
			bound := int64(math.Ceil(float64(lowN.Load()+1)/room)) + 2
			waited := lowRound.Load() - lowAt.Load()
			t.Logf("low waited %d rounds with %d ahead (bound %d)", waited, lowN.Load(), bound)
			assert.LessOrEqual(t, waited, bound, "low waited %d rounds with %d changes ahead, bound about %d", waited, lowN.Load(), bound)
			fx.converged(o)
		})
	}
}

// WaitUntilReconciled with reordering: urgent changes written after low
// ones are applied first, yet a wait for any revision returns only once
// every change up to it, the low ones included, has its outcome recorded.
// The reconciler is held by an operation on s (one worker, so it reads
// nothing meanwhile), or paused (pause: true), while everything is written
// in one transaction.
func TestPriorityWaitUntilReconciledCountsReordered(t *testing.T) {
	for _, c := range []struct {
		v     variant
		pause bool
	}{{variant{1, false}, false}, {variant{1, true}, false}, {variant{4, false}, true}, {variant{4, true}, true}} {
		t.Run(fmt.Sprint(c.v, " pause=", c.pause), func(t *testing.T) {
			ppWaitReordered(t, c.v, c.pause, false)
		})
	}
}

// Fresh changes written while the reconciler is paused are fresh changes
// like any others: on Resume, with one worker, they are applied by
// priority, first written first within a priority. The misordering seen
// is intermittent (about one run in five), so each variant runs 25 times.
func TestPriorityOrderAfterPause(t *testing.T) {
	for _, v := range []variant{{1, false}, {1, true}} {
		for i := range 25 {
			t.Run(fmt.Sprint(v, "#", i), func(t *testing.T) {
				ppWaitReordered(t, v, true, true)
			})
		}
	}
}

func ppWaitReordered(t *testing.T, v variant, pause, exactOrder bool) {
	tg := newTarget()
	f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, 0.001))
	release := f.rec.Resume
	if pause {
		// What the table holds when the reconciler first runs is the
		// backlog, which priorities do not order (see WithPriority): wait
		// until it runs.
		f.upsert(&item{ID: "m", Value: "0"})
		f.caughtUp()
		f.rec.Pause()
	} else {
		h := tg.hold("s")
		f.upsert(&item{ID: "s", Value: "0"})
		h.wait(t)
		release = h.let
	}
	// One transaction, so that the reconciler reads them all at once:
	// the low ones first (lower revisions), then 80 urgent ones.
	var lows []*item
	for i := range 5 {
		lows = append(lows, &item{ID: fmt.Sprintf("low%d", i), Value: "0"})
	}
	all := slices.Clone(lows)
	for i := range 80 {
		all = append(all, &item{ID: fmt.Sprintf("high%03d", i), Value: "9"})
	}
	f.upsert(all...)
	_, lowRev, _ := f.table.Get(f.db.ReadTxn(), itemID.Query("low4"))
	_, firstHigh, _ := f.table.Get(f.db.ReadTxn(), itemID.Query("high000"))
	require.Less(t, lowRev, firstHigh)
	type res struct {
		rev statedb.Revision
		err error
	}
	check := func(until statedb.Revision) {
		t.Helper()
		got := make(chan res, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			r, _, err := f.rec.WaitUntilReconciled(ctx, until)
			got <- res{r, err}
		}()
		release()
		r := recv(t, got, "WaitUntilReconciled")
		require.NoError(t, r.err)
		txn := f.db.ReadTxn()
		for obj, rev := range f.table.All(txn) {
			if rev <= until && obj.ID != "s" {
				// Its change is at or below until: handed over and its
				// outcome recorded, so it is Done now.
				assert.Equal(t, status.KindDone, obj.Status.Kind, "WaitUntilReconciled(%d) returned %d with %s (rev %d) %s", until, r.rev, obj.ID, rev, obj.Status.Kind)
			}
		}
		for _, l := range lows {
			if _, ok, _ := tg.Get(l.ID); !ok {
				t.Errorf("WaitUntilReconciled(%d) returned %d before %s was applied", until, r.rev, l.ID)
			}
		}
	}
	check(firstHigh)
	check(lowRev)
	f.caughtUp()
	order := tg.applied()
	if !pause && len(order) > 0 {
		require.Equal(t, "update s=0", order[0])
		order = order[1:]
	}
	if !exactOrder {
		if v.workers == 1 {
			// The wait was sharp only if urgent changes overtook the low ones.
			require.Less(t, slices.Index(order, "update high000=9"), slices.Index(order, "update low0=0"), "no reordering: %v", order)
		}
		return
	}
	// With one worker the order is the reconciler's: every urgent change
	// in the order written, then the low ones (a share of 0.001 of rounds
	// of 4 gives arrival order one pick per 250 rounds, and there are 22).
	var want []string
	for i := range 80 {
		want = append(want, fmt.Sprintf("update high%03d=9", i))
	}
	for i := range 5 {
		want = append(want, fmt.Sprintf("update low%d=0", i))
	}
	order = slices.DeleteFunc(order, func(c string) bool { return c == "update m=0" }) // the marker
	assert.Equal(t, want, order, "not by priority, first written first")
}

// Changes read ahead and queued by priority when the hive stops are carried
// over: after a start, WaitUntilReconciled counts them and they converge.
func TestPriorityStopWithReadAheadCarriesItOver(t *testing.T) {
	forVariants(t, []variant{{1, false}, {4, false}, {1, true}}, func(t *testing.T, v variant) {
		tg := newTarget()
		f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, 0.25))
		f.upsert(kititems("9", "d0", "d1", "d2", "d3")...)
		f.caughtUp()
		h := tg.hold("s")
		f.upsert(&item{ID: "s", Value: "0"})
		h.wait(t)
		for i := range 60 {
			f.upsert(&item{ID: fmt.Sprintf("o%02d", i), Value: strconv.Itoa(i % 4)})
		}
		f.remove("d0", "d1", "d2", "d3")
		f.upsert(&item{ID: "o07", Value: "8.again"})
		// Let some rounds run, then stop in the middle.
		h.let()
		waitCalls(t, tg, reconcilertest.OpUpdate, "", 10)
		f.stop()
		f.upsert(&item{ID: "o08", Value: "3.meanwhile"})
		rev2 := f.remove("o09")
		f.start()
		f.reconciledTo(rev2)
		txn := f.db.ReadTxn()
		for obj := range f.table.All(txn) {
			assert.Equal(t, status.KindDone, obj.Status.Kind, "WaitUntilReconciled(%d) returned with %s %s", rev2, obj.ID, obj.Status.Kind)
		}
		assert.Empty(t, tg.Diff(txn, f.table), "the target differs once WaitUntilReconciled returned")
		f.caughtUp()
	})
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

// A steady stream of high-priority writes, enough to fill every round,
// never holds a low-priority one back for more rounds than WithPriority's
// bound: with n changes before it and a share of s of rounds of R objects,
// ⌈(n+1)/(s·R)⌉ rounds. The changes before it are of its priority too, so
// that only the share takes them, and the bound is met exactly. Rounds are
// counted by the reconciler's own round
// metrics, which also write the stream, between rounds: the same rounds
// every run, whatever the machine's speed.
func TestPriorityDoesNotStarveLowerPriorities(t *testing.T) {
	const (
		roundSize = 10
		share     = 0.2
		before    = 30  // low-priority changes written just before the one watched
		stream    = 200 // rounds during which high-priority writes go on
	)
	var (
		f         *fixture
		rounds    int // the round metrics' count, on the reconciler's goroutine
		written   int // the round after which the low object was written
		doneAt    int // the round that committed it
		highsDone int // high-priority objects Done by then
		seq       int
		done      = make(chan struct{})
	)
	highs := func(n int) []*item {
		objs := make([]*item, n)
		for i := range objs {
			objs[i] = &item{ID: fmt.Sprintf("high%06d", seq), Value: "1", Status: status.Pending()}
			seq++
		}
		return objs
	}
	insert := func(objs ...*item) {
		wtxn := f.db.WriteTxn(f.table)
		for _, o := range objs {
			_, _, err := f.table.Insert(wtxn, o)
			require.NoError(t, err)
		}
		wtxn.Commit()
	}
	hook := &roundHook{ExpVar: metrics.NewUnpublishedExpVar(), round: func(metrics.RoundStats) {
		rounds++
		switch {
		case written == 0:
			// The first round: the low object comes after three rounds'
			// worth of others of its priority, and before the stream.
			early := items("early", before, "1")
			for _, it := range early {
				it.Status = status.Pending()
			}
			insert(early...)
			insert(&item{ID: "low", Value: "1", Status: status.Pending()})
			written = rounds
		case doneAt == 0:
			txn := f.db.ReadTxn()
			if low, _, _ := f.table.Get(txn, itemID.Query("low")); low.Status.Kind == status.KindDone {
				doneAt = rounds
				for it := range f.table.List(txn, f.index.Query(status.KindDone)) {
					if priorityByPrefix(it) > 0 {
						highsDone++
					}
				}
				close(done)
			}
		}
		if rounds < stream {
			insert(highs(roundSize)...) // a round's worth: the queue never shrinks
		}
	}}
	f = newFixture(t, newTarget(), nil,
		reconciler.WithMetrics(hook),
		reconciler.WithRoundLimits(roundSize, nil),
		reconciler.WithPriority(priorityByPrefix, share))
	f.start()
	recv(t, done, "the low-priority object to be Done")

	bound := int(math.Ceil((before + 1) / (share * roundSize)))
	waited := doneAt - written
	t.Logf("low-priority object Done %d rounds after it was written (bound %d), after %d high-priority ones", waited, bound, highsDone)
	assert.LessOrEqual(t, waited, bound, "rounds the low-priority object waited")
	assert.GreaterOrEqual(t, highsDone, (waited-1)*int(roundSize*(1-share)), "high-priority objects written after it went first")
	f.caughtUp()
}

// The priority of a version is read once, when its change is read:
// requeues of that version (held by the breaker, cut by Pause or a stop)
// do not read it again.
func TestPriorityReadOncePerVersion(t *testing.T) {
	forVariants(t, []variant{{1, false}, {4, false}, {4, true}}, func(t *testing.T, v variant) {
		var mu sync.Mutex
		reads := map[string]int{}
		prio := func(it *item) int {
			mu.Lock()
			reads[it.ID+"="+it.Value]++
			mu.Unlock()
			return priorityByPrefix(it)
		}
		o, m, f := startBreaker(t, v, 2, time.Millisecond, 4*time.Millisecond, reconciler.WithPriority(prio, 0))
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
		mu.Lock()
		defer mu.Unlock()
		for version, n := range reads {
			assert.Equal(t, 1, n, "priority of %s read %d times", version, n)
		}
		assert.Len(t, reads, 20)
	})
}

// A round cut short by a stop gives the changes it never started back
// their turn: after the start they go before those of the same priority
// read after them, first read first, not to the back of their priority.
func TestPriorityRoundCutShortKeepsItsTurn(t *testing.T) {
	forVariants(t, []variant{{1, false}, {1, true}}, func(t *testing.T, v variant) {
		tg := newTarget()
		f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, 0.001))
		f.upsert(&item{ID: "m", Value: "0"}) // the backlog, which priorities do not order
		f.caughtUp()
		h := tg.hold("high-00000")
		f.upsert(items("high", 12, "1")...) // one read; a round of 4 starts with the first
		h.wait(t)
		f.stop() // the other three of the round never start
		f.start()
		f.caughtUp()
		var want []string
		for i := range 12 {
			want = append(want, fmt.Sprintf("update high-%05d=1", i))
		}
		order := slices.DeleteFunc(tg.applied(), func(c string) bool { return c == "update m=0" })
		require.Equal(t, want, order)
	})
}
