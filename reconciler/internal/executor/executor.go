package executor

import (
	"time"

	"github.com/cilium/statedb"
)

// Gate is what workers ask before they take work, and what wakes them
// when its answer may have changed. The reconciler's gate implements it;
// it must be safe for concurrent use.
type Gate interface {
	// MayStart reports whether an operation could start now.
	MayStart() bool
	// IsOpen reports whether the gate is open for every operation, not
	// only for one probe of the circuit breaker.
	IsOpen() bool
	// SetWake sets the function to call on every change of the gate
	// (nil: none).
	SetWake(wake func())
}

// Config is what an executor runs and how. Concurrency and RoundSize must
// be positive; the functions and Gate must not be nil.
type Config[T any] struct {
	// Concurrency is how many items run at once: 1 runs them inline, on
	// the caller's goroutine, more on as many workers.
	Concurrency int
	// RoundSize is the most items one round takes; with Batch, the most
	// one worker takes at once.
	RoundSize int
	// Batch makes a worker take a fair share of the queue (up to
	// RoundSize) while the gate is open, rather than one item.
	Batch bool
	Gate  Gate
	// Inline makes the function that runs a round's items on the
	// caller's goroutine, with the round's read transaction.
	Inline func() func(txn statedb.ReadTxn, items []T)
	// Worker makes the function one worker runs the items it takes with,
	// for as long as the worker lives.
	Worker func() func(items []T)
}

// Executor is the operate stage of a round: it runs items inline or on a
// pool of workers, and returns those finished. The zero value is not
// usable: make one with New. An Executor is owned by one goroutine (the
// loop's), which calls all its methods; its workers run the items.
type Executor[T any] struct {
	cfg     Config[T]
	inline  func(statedb.ReadTxn, []T) // inline mode
	size    int                        // inline mode: the round size
	pool    *pool[T]                   // nil in inline mode
	resized resized[T]                 // what a change of size left (see Resize)
	// finished is signalled when items finish outside Operate; nil inline.
	finished <-chan struct{}
}

// New returns an executor running items as c says.
func New[T any](c Config[T]) *Executor[T] {
	e := &Executor[T]{cfg: c, resized: resized[T]{signal: make(chan struct{}, 1)}}
	if c.Concurrency > 1 {
		e.pool = newPool(&e.cfg, c.Concurrency, c.RoundSize, e.resized.signal)
		e.finished = e.pool.signal
		return e
	}
	e.inline, e.size = c.Inline(), c.RoundSize
	return e
}

// Operate runs work, or hands it to the workers, and returns the items
// finished: inline, all of work; with workers, what finished since the
// last call. The slice returned is valid until the next call.
func (e *Executor[T]) Operate(txn statedb.ReadTxn, work []T) (finished []T) {
	if e.resized.busy() {
		return e.operateResized(txn, work)
	}
	if e.pool != nil {
		return e.pool.operate(work)
	}
	e.inline(txn, work)
	return work
}

// Finished is signalled when items finish outside Operate (on workers);
// nil while nothing can.
func (e *Executor[T]) Finished() <-chan struct{} { return e.finished }

// Room is how many more items it takes now.
func (e *Executor[T]) Room() int {
	if e.pool != nil {
		return e.pool.limit - e.pool.held
	}
	return max(e.size-len(e.resized.left), 0)
}

// Load describes what an executor holds.
type Load struct {
	Waiting int // not started: queued for a worker, or held by the gate
	Busy    int // workers running an operation
	// Unfinished is the total, and Longest the longest, time the
	// operations under way have run.
	Unfinished, Longest time.Duration
}

// Load describes the items it holds, as of now.
func (e *Executor[T]) Load(now time.Time) Load {
	if e.pool != nil {
		return e.resized.load(e.pool.load(now), now)
	}
	return e.resized.load(Load{}, now)
}

// Stop waits for the operations under way to return and gives back every
// item not yet returned by Operate: finished, or never started. The
// executor is not usable after.
func (e *Executor[T]) Stop() (left []T) {
	left = e.resized.stop()
	if e.pool != nil {
		return append(left, e.pool.stop()...)
	}
	return left
}
