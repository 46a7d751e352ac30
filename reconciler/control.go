package reconciler

import "sync"

// pauser holds whether a reconciler is paused. Pause and Resume set it from
// any goroutine; the reconcile and refresh jobs read it and wait on its
// channel, which is closed and replaced on every change.
type pauser struct {
	mu      sync.Mutex
	paused  bool
	changed chan struct{}
}

func newPauser() *pauser { return &pauser{changed: make(chan struct{})} }

// set pauses or resumes. It does nothing if the state is already the one
// asked for.
func (p *pauser) set(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == paused {
		return
	}
	p.paused = paused
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns whether the reconciler is paused and a channel closed when
// that changes.
func (p *pauser) state() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.changed
}

// Pause implements Reconciler.
func (r *reconciler[Obj]) Pause() { r.pause.set(true) }

// Resume implements Reconciler.
func (r *reconciler[Obj]) Resume() { r.pause.set(false) }
