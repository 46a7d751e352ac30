package executor

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate is a Gate for tests: open or closed, waking the workers on change.
type gate struct {
	mu   sync.Mutex
	open bool
	wake func()
}

func (g *gate) MayStart() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.open }
func (g *gate) IsOpen() bool   { return g.MayStart() }
func (g *gate) SetWake(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake = f
}
func (g *gate) set(open bool) {
	g.mu.Lock()
	g.open = open
	wake := g.wake
	g.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// fixture records every item run, and can hold workers until released.
type fixture struct {
	gate    *gate
	mu      sync.Mutex
	ran     []int
	chunks  [][]int
	hold    chan struct{} // if not nil, workers wait on it before running
	started chan int      // if not nil, told each item a worker starts
}

func newFixture() *fixture { return &fixture{gate: &gate{open: true}} }

func (f *fixture) config(concurrency, roundSize int, batch bool) Config[int] {
	return Config[int]{
		Concurrency: concurrency, RoundSize: roundSize, Batch: batch, Gate: f.gate,
		Inline: func() func(statedb.ReadTxn, []int) {
			return func(_ statedb.ReadTxn, items []int) { f.record(items) }
		},
		Worker: func() func([]int) {
			return func(items []int) {
				for _, it := range items {
					if f.started != nil {
						f.started <- it
					}
				}
				if f.hold != nil {
					<-f.hold
				}
				f.record(items)
			}
		},
	}
}

func (f *fixture) record(items []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ran = append(f.ran, items...)
	f.chunks = append(f.chunks, slices.Clone(items))
}

func (f *fixture) runCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ran)
}

// drain operates until want items came back, waiting on Finished, and
// returns them sorted.
func drain(t *testing.T, e *Executor[int], want int) []int {
	t.Helper()
	var got []int
	deadline := time.After(10 * time.Second)
	for len(got) < want {
		got = append(got, e.Operate(nil, nil)...)
		if len(got) >= want {
			break
		}
		select {
		case <-e.Finished():
		case <-deadline:
			t.Fatalf("got %d of %d items back: %v", len(got), want, got)
		}
	}
	slices.Sort(got)
	return got
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestInlineRunsTheRoundOnTheCallersGoroutine(t *testing.T) {
	f := newFixture()
	e := New(f.config(1, 10, false))
	require.Nil(t, e.Finished(), "inline, nothing finishes outside Operate")
	require.Equal(t, 10, e.Room())
	work := seq(0, 5)
	require.Equal(t, work, e.Operate(nil, work), "every item comes back, in order")
	require.Equal(t, work, f.ran)
	require.Empty(t, e.Stop())
}

func TestWorkersReturnEveryItemOnce(t *testing.T) {
	f := newFixture()
	e := New(f.config(4, 100, false))
	require.Equal(t, 100, e.Room(), "the most held: max(round size, 2 per worker)")
	got := slices.Clone(e.Operate(nil, seq(0, 50))) // valid until the next call
	require.Equal(t, 100-50+len(got), e.Room(), "room counts what is held")
	got = append(got, drain(t, e, 50-len(got))...)
	slices.Sort(got)
	require.Equal(t, seq(0, 50), got)
	require.Equal(t, 100, e.Room())
	require.Empty(t, e.Stop())
	require.Len(t, f.ran, 50, "nothing ran twice")
}

func TestAClosedGateHoldsTheWorkersAndOpeningWakesThem(t *testing.T) {
	f := newFixture()
	f.gate.open = false
	e := New(f.config(2, 10, false))
	require.Empty(t, e.Operate(nil, seq(0, 3)))
	l := e.Load(time.Now())
	require.Equal(t, 3, l.Waiting)
	require.Zero(t, l.Busy, "a closed gate: no worker counts busy")
	require.Zero(t, f.runCount())
	f.gate.set(true)
	require.Equal(t, seq(0, 3), drain(t, e, 3))
	require.Empty(t, e.Stop())
}

func TestStopGivesBackWhatNeverStarted(t *testing.T) {
	f := newFixture()
	f.gate.open = false
	e := New(f.config(2, 10, false))
	e.Operate(nil, seq(0, 4))
	left := e.Stop()
	slices.Sort(left)
	require.Equal(t, seq(0, 4), left)
	require.Zero(t, f.runCount())
}

func TestLoadCountsTheOperationsUnderWay(t *testing.T) {
	f := newFixture()
	f.hold, f.started = make(chan struct{}), make(chan int, 10)
	e := New(f.config(2, 10, false))
	e.Operate(nil, seq(0, 3))
	<-f.started
	<-f.started // both workers run one
	l := e.Load(time.Now().Add(time.Second))
	require.Equal(t, 2, l.Busy)
	require.Equal(t, 1, l.Waiting)
	require.GreaterOrEqual(t, l.Longest, time.Second)
	require.GreaterOrEqual(t, l.Unfinished, 2*time.Second)
	close(f.hold)
	require.Equal(t, seq(0, 3), drain(t, e, 3))
	require.Empty(t, e.Stop())
}

func TestBatchWorkersTakeAFairShare(t *testing.T) {
	f := newFixture()
	f.gate.open = false
	e := New(f.config(2, 4, true))
	e.Operate(nil, seq(0, 8))
	f.gate.set(true)
	require.Equal(t, seq(0, 8), drain(t, e, 8))
	require.Empty(t, e.Stop())
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.chunks {
		require.LessOrEqual(t, len(c), 4, "at most the round size: %v", f.chunks)
	}
	require.Greater(t, len(f.chunks[0]), 1, "a share, not one item: %v", f.chunks)
}

func TestResizeToInlineRunsWhatTheWorkersLeftFirst(t *testing.T) {
	f := newFixture()
	f.hold, f.started = make(chan struct{}), make(chan int, 10)
	e := New(f.config(2, 10, false))
	e.Operate(nil, seq(0, 5))
	<-f.started
	<-f.started // two under way, three queued
	e.Resize(1, 10)
	require.NotNil(t, e.Finished(), "the retired pool still runs two")
	require.Equal(t, 7, e.Room(), "the round size, less the three carried over")
	out := slices.Clone(e.Operate(nil, []int{10})) // valid until the next call
	require.Len(t, out, 4, "the three never started, then the round's: %v", out)
	require.Equal(t, 10, out[3])
	close(f.hold)
	rest := drain(t, e, 2)
	got := append(slices.Clone(out), rest...)
	slices.Sort(got)
	require.Equal(t, []int{0, 1, 2, 3, 4, 10}, got, "nothing lost, nothing repeated")
	require.Eventually(t, func() bool { e.Operate(nil, nil); return e.Finished() == nil }, 10*time.Second, time.Millisecond,
		"inline once the retired pool is gone")
	require.Empty(t, e.Stop())
}

func TestResizeKeepsTheQueuesOrderInTheNewPool(t *testing.T) {
	f := newFixture()
	f.gate.open = false
	e := New(f.config(2, 10, false))
	e.Operate(nil, seq(0, 4))
	e.Resize(3, 10)
	require.Equal(t, 10-4, e.Room(), "the queue moved to the new pool")
	f.gate.set(true)
	require.Equal(t, seq(0, 4), drain(t, e, 4))
	require.Empty(t, e.Stop())
}

func TestResizeFromInlineStartsWorkers(t *testing.T) {
	f := newFixture()
	e := New(f.config(1, 10, false))
	e.Operate(nil, seq(0, 2))
	e.Resize(2, 10)
	require.NotNil(t, e.Finished())
	got := slices.Clone(e.Operate(nil, seq(2, 6)))
	got = append(got, drain(t, e, 4-len(got))...)
	slices.Sort(got)
	require.Equal(t, seq(2, 6), got)
	e.Resize(1, 5)
	require.Equal(t, 5, e.Room())
	require.Empty(t, e.Stop())
}

func TestStopWaitsForTheRetiredPools(t *testing.T) {
	f := newFixture()
	f.hold, f.started = make(chan struct{}), make(chan int, 10)
	e := New(f.config(2, 10, false))
	e.Operate(nil, seq(0, 2))
	<-f.started
	<-f.started
	e.Resize(1, 10) // both under way in the retired pool
	var stopped atomic.Bool
	done := make(chan []int)
	go func() { left := e.Stop(); stopped.Store(true); done <- left }()
	require.False(t, stopped.Load())
	close(f.hold)
	select {
	case left := <-done:
		slices.Sort(left)
		require.Equal(t, seq(0, 2), left, "finished in the retired pool, given back")
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
}
