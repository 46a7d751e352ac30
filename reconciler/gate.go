package reconciler

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// gate answers the question asked before every operation starts: may one
// start now? Not while paused, pruning or stopping. A start is enter, then
// the operation's call, which first calls entered; closing the gate waits for
// the starts between enter and entered, so that once it is closed only
// those already past entered begin. Safe for concurrent use; see newGate.
type gate struct {
	mu       sync.Mutex
	paused   bool
	pruning  bool
	stopping bool
	changed  chan struct{} // closed and replaced on every change
	open     atomic.Bool   // !paused && !pruning && !stopping, for a lock-free look
	held     atomic.Bool   // paused || stopping: what holds off a prune begun
	starting atomic.Int64  // starts between enter (or enterPrune) and entered
	wake     func()        // called on every change, with mu held (workers' broadcast)
}

// enter reports whether an operation may start now; if so the caller calls
// entered just before calling the operation.
func (g *gate) enter() bool {
	g.starting.Add(1)
	if g.open.Load() {
		return true
	}
	g.starting.Add(-1)
	return false
}

// enterPrune reports whether the prune begun with beginPrune may call
// Operations.Prune now: a Pause or a stop since beginPrune holds it off, as
// enter holds off an operation. If so the caller calls entered just before
// calling Prune.
func (g *gate) enterPrune() bool {
	g.starting.Add(1)
	if !g.held.Load() {
		return true
	}
	g.starting.Add(-1)
	return false
}

// entered ends a start begun with enter or enterPrune.
func (g *gate) entered() { g.starting.Add(-1) }

// isOpen reports whether the gate is open, without starting anything.
func (g *gate) isOpen() bool { return g.open.Load() }

func newGate() *gate {
	g := &gate{changed: make(chan struct{})}
	g.open.Store(true)
	return g
}

// update applies f, which reports whether it changed anything, and if so
// tells whoever waits.
func (g *gate) update(f func() bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !f() {
		return
	}
	open := !g.paused && !g.pruning && !g.stopping
	g.open.Store(open)
	g.held.Store(g.paused || g.stopping)
	for !open && g.starting.Load() > 0 {
		runtime.Gosched() // a start under way: it calls its operation next
	}
	close(g.changed)
	g.changed = make(chan struct{})
	if g.wake != nil {
		g.wake()
	}
}

// state returns whether the reconciler is paused and a channel closed on
// the next change.
func (g *gate) state() (paused bool, changed <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused, g.changed
}

// setWake sets the function called on every change (nil: none).
func (g *gate) setWake(wake func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake = wake
}

func (g *gate) setPaused(v bool) {
	g.update(func() bool { old := g.paused; g.paused = v; return old != v })
}

// beginPrune closes the gate for a prune and reports true, unless the
// reconciler is paused or stopping: Pause holds off prunes as it holds off
// operations, so a prune due as Pause returns waits for Resume. The caller
// ends the prune with endPrune.
func (g *gate) beginPrune() bool {
	began := false
	g.update(func() bool {
		if g.paused || g.stopping || g.pruning {
			return false
		}
		g.pruning, began = true, true
		return true
	})
	return began
}

// endPrune opens the gate closed by beginPrune.
func (g *gate) endPrune() {
	g.update(func() bool { old := g.pruning; g.pruning = false; return old })
}

func (g *gate) setStopping(v bool) {
	g.update(func() bool { old := g.stopping; g.stopping = v; return old != v })
}
