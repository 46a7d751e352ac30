// Package gate holds the question every operation of a reconciler asks
// before it starts: may one start now? See [Gate].
package gate

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Gate answers the question asked before every operation starts: may one
// start now? Not while paused, pruning or stopping, nor while the circuit
// breaker is open (broken) but for the one probe it grants. A start is
// Enter, then the operation's call, which first calls Entered; closing the
// gate waits for the starts between Enter and Entered, so that once it is
// closed only those already past Entered begin. Make one with New (open);
// the zero value is not usable. A Gate is safe for concurrent use.
type Gate struct {
	mu       sync.Mutex
	paused   bool
	pruning  bool
	stopping bool
	broken   bool          // the circuit breaker is open
	changed  chan struct{} // closed and replaced on every change
	open     atomic.Bool   // !paused && !pruning && !stopping && !broken, for a lock-free look
	probing  atomic.Bool   // broken is all that closes it: a probe may start
	probe    atomic.Bool   // a probe granted and not yet started
	held     atomic.Bool   // paused || stopping: what holds off a prune begun
	starting atomic.Int64  // starts between Enter (or EnterPrune) and Entered
	wake     func()        // called on every change, with mu held (workers' broadcast)
}

// Enter reports whether an operation may start now; if so the caller calls
// Entered just before calling the operation.
func (g *Gate) Enter() bool {
	g.starting.Add(1)
	if g.open.Load() {
		return true
	}
	g.starting.Add(-1)
	return false
}

// EnterPrune reports whether the prune begun with BeginPrune may call
// Operations.Prune now: a Pause or a stop since BeginPrune holds it off, as
// Enter holds off an operation. If so the caller calls Entered just before
// calling Prune.
func (g *Gate) EnterPrune() bool {
	g.starting.Add(1)
	if !g.held.Load() {
		return true
	}
	g.starting.Add(-1)
	return false
}

// EnterProbe reports whether an operation may start now as the circuit
// breaker's probe, taking the probe granted; if so the caller calls
// Entered just before calling the operation, and records its outcome as
// the probe's.
func (g *Gate) EnterProbe() bool {
	g.starting.Add(1)
	if g.probing.Load() && g.probe.CompareAndSwap(true, false) {
		return true
	}
	g.starting.Add(-1)
	return false
}

// MayStart reports whether an operation could start now, as itself or as
// a probe, without starting anything.
func (g *Gate) MayStart() bool {
	return g.open.Load() || (g.probing.Load() && g.probe.Load())
}

// ProbeLeft reports whether a probe granted has not started yet.
func (g *Gate) ProbeLeft() bool { return g.probe.Load() }

// Entered ends a start begun with Enter, EnterProbe or EnterPrune.
func (g *Gate) Entered() { g.starting.Add(-1) }

// IsOpen reports whether the gate is open, without starting anything.
func (g *Gate) IsOpen() bool { return g.open.Load() }

// New returns an open gate.
func New() *Gate {
	g := &Gate{changed: make(chan struct{})}
	g.open.Store(true)
	return g
}

// update applies f, which reports whether it changed anything, and if so
// tells whoever waits.
func (g *Gate) update(f func() bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !f() {
		return
	}
	open := !g.paused && !g.pruning && !g.stopping && !g.broken
	g.open.Store(open)
	g.probing.Store(g.broken && !g.paused && !g.pruning && !g.stopping)
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

// State returns whether the reconciler is paused and a channel closed on
// the next change.
func (g *Gate) State() (paused bool, changed <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused, g.changed
}

// SetWake sets the function called on every change (nil: none).
func (g *Gate) SetWake(wake func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wake = wake
}

// SetPaused closes the gate while paused (Pause), and opens it (Resume).
func (g *Gate) SetPaused(v bool) {
	g.update(func() bool { old := g.paused; g.paused = v; return old != v })
}

// BeginPrune closes the gate for a prune and reports true, unless the
// reconciler is paused or stopping: Pause holds off prunes as it holds off
// operations, so a prune due as Pause returns waits for Resume. The caller
// ends the prune with EndPrune.
func (g *Gate) BeginPrune() bool {
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

// EndPrune opens the gate closed by BeginPrune.
func (g *Gate) EndPrune() {
	g.update(func() bool { old := g.pruning; g.pruning = false; return old })
}

// SetStopping closes the gate while the reconciler stops, and opens it
// for the next start.
func (g *Gate) SetStopping(v bool) {
	g.update(func() bool { old := g.stopping; g.stopping = v; return old != v })
}

// SetBroken closes the gate while the circuit breaker is open; a probe
// granted and not started is withdrawn when it closes.
func (g *Gate) SetBroken(v bool) {
	g.update(func() bool {
		old := g.broken
		g.broken = v
		if !v {
			g.probe.Store(false)
		}
		return old != v
	})
}

// GrantProbe lets one operation start while the breaker is open (see
// EnterProbe), and wakes the workers to take it.
func (g *Gate) GrantProbe() {
	g.update(func() bool { g.probe.Store(true); return true })
}
