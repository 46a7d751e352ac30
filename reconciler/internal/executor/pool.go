package executor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool runs items on a fixed number of goroutines. Workers take items
// from queue when the gate allows and put them, finished, on done; the
// loop's goroutine hands items over and takes them back (operate).
type pool[T any] struct {
	cfg   *Config[T]
	limit int // most items held at once

	workers   int // goroutines, fixed for the pool's life
	roundSize int // most items a worker takes with Batch; under mu, as Resize changes it

	held int // items handed over and not yet returned; loop goroutine only

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []T // waiting for a worker and the gate
	done    []T // finished, for the loop
	spare   []T // the other half of done's double buffer
	stopped bool
	signal  chan struct{} // signalled when done gains items
	wg      sync.WaitGroup

	// running holds, per worker, when its current items started (Unix
	// ns), or 0 while it waits.
	running []atomic.Int64
}

func newPool[T any](cfg *Config[T], workers, roundSize int, signal chan struct{}) *pool[T] {
	p := &pool[T]{
		cfg:       cfg,
		limit:     max(roundSize, 2*workers),
		workers:   workers,
		roundSize: roundSize,
		signal:    signal,
		running:   make([]atomic.Int64, workers),
	}
	p.cond = sync.NewCond(&p.mu)
	cfg.Gate.SetWake(p.broadcast)
	p.wg.Add(workers)
	for i := range workers {
		go p.work(&p.running[i])
	}
	return p
}

func (p *pool[T]) broadcast() {
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
}

// operate queues work and returns the items finished so far.
func (p *pool[T]) operate(work []T) []T {
	if len(work) > 0 {
		p.held += len(work)
		p.mu.Lock()
		p.queue = append(p.queue, work...)
		p.mu.Unlock()
		if len(work) == 1 {
			p.cond.Signal()
		} else {
			p.cond.Broadcast()
		}
	}
	// Let workers that are about to finish do so first, so that one write
	// transaction commits several results rather than one each. A few
	// yields cost under a microsecond when nothing else is runnable; with 64
	// busy workers they raised throughput by a third (go run ./benchmarks
	// -workloads slow).
	for range gatherYields {
		runtime.Gosched()
	}
	p.mu.Lock()
	done := p.done
	p.done = p.spare[:0]
	p.mu.Unlock()
	p.spare = done
	p.held -= len(done)
	return done
}

// gatherYields is how many times a round yields before taking the finished
// items.
const gatherYields = 3

// load counts, under the lock that take holds while a worker takes items
// and marks itself running, so that an item is either queued or its worker
// running: Busy is the workers running, and with the gate open also the
// idle ones woken to take what is queued.
func (p *pool[T]) load(now time.Time) Load {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := Load{Waiting: len(p.queue)}
	for i := range p.running {
		if started := p.running[i].Load(); started != 0 {
			w.Busy++
			d := time.Duration(max(now.UnixNano()-started, 0)) // started after now was read
			w.Unfinished += d
			w.Longest = max(w.Longest, d)
		}
	}
	if p.cfg.Gate.IsOpen() {
		w.Busy = min(len(p.running), w.Busy+len(p.queue))
	}
	return w
}

// stop makes the workers exit once their current items return, waits for
// them, and returns what operate has not: finished, and never started.
func (p *pool[T]) stop() []T {
	p.mu.Lock()
	p.stopped = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
	p.cfg.Gate.SetWake(nil)
	left := append(p.done, p.queue...)
	p.done, p.queue, p.held = nil, nil, 0
	return left
}

// retire stops p's workers from taking work: each finishes the items it
// runs, puts them on done and exits. It returns the items queued (never
// started) and those finished that operate has not returned; p.held then
// counts only the items under way.
func (p *pool[T]) retire() (queued, done []T) {
	p.mu.Lock()
	p.stopped = true
	queued, done = p.queue, p.done
	p.queue, p.done, p.spare = nil, nil, nil
	p.cond.Broadcast()
	p.mu.Unlock()
	p.held -= len(queued) + len(done)
	return queued, done
}

// take waits until there is work and the gate allows a start, and returns
// up to a fair share of the queue: one item, or with Batch an equal share
// per worker up to the round size.
func (p *pool[T]) take(buf []T, running *atomic.Int64) ([]T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.stopped && (len(p.queue) == 0 || !p.cfg.Gate.MayStart()) {
		p.cond.Wait()
	}
	if p.stopped {
		return buf, false
	}
	n := 1
	if p.cfg.Batch && p.cfg.Gate.IsOpen() { // a probe is one item
		n = min(len(p.queue)/p.workers+1, len(p.queue), p.roundSize)
	}
	buf = append(buf[:0], p.queue[:n]...)
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	running.Store(time.Now().UnixNano())
	return buf, true
}

func (p *pool[T]) work(running *atomic.Int64) {
	defer p.wg.Done()
	run := p.cfg.Worker()
	var chunk []T
	for {
		var ok bool
		chunk, ok = p.take(chunk, running) // marks it running
		if !ok {
			return
		}
		run(chunk)
		p.mu.Lock()
		p.done = append(p.done, chunk...)
		running.Store(0)
		p.mu.Unlock()
		clear(chunk)
		select {
		case p.signal <- struct{}{}:
		default:
		}
	}
}
