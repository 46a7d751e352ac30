package reconciler

//lint:file-ignore U1000 staticcheck (v0.6, v0.7) misses that methods of a generic type are used through a generic interface (operator); go vet and the tests cover them.

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/statedb"
)

// workerPool is the operator for WithConcurrency(n > 1): it runs operations
// on n goroutines.
//
// The loop owns flights, the objects with an operation queued or running.
// A change to such an object is parked in its flight and dispatched only
// once the running operation has been committed: this keeps at most one
// operation per object in flight and applies an object's versions in
// revision order. The parked slot always holds what the object should end
// as: a newer change replaces it, and a change back to the very version in
// flight (the same status identity) empties it, since applying the version
// in flight is then all that is needed. Workers take work from queue and
// put it, finished, on done; they never touch the table.
type workerPool[Obj any] struct {
	r     *reconciler[Obj]
	ctx   context.Context
	limit int // most flights at once; the loop stops reading changes there

	flights map[string]flight[Obj] // owned by the loop goroutine
	next    []op[Obj]              // release's buffer of parked successors

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []op[Obj] // waiting for a worker
	done    []op[Obj] // finished, waiting for the loop to commit
	spare   []op[Obj] // the other half of done's double buffer
	stopped bool
	signal  chan struct{} // signalled when done gains ops
	wg      sync.WaitGroup

	// running holds, per worker, when its current operations started
	// (Unix ns), or 0 while it waits for work.
	running []atomic.Int64
}

type flight[Obj any] struct {
	rev       statedb.Revision
	since     time.Time // when the status the op in flight answers was written
	statusID  uint64    // identity of the status the op in flight answers
	retry     bool      // the op in flight is a retry, not a change
	obj       Obj       // the object of the op in flight
	parked    op[Obj]
	hasParked bool
	// pruned: a prune ran while the op was in flight, with its object
	// absent (deleted meanwhile), and may have removed what the op applied.
	// A change back to the same version must then be applied again.
	pruned bool
}

func newWorkerPool[Obj any](ctx context.Context, r *reconciler[Obj]) *workerPool[Obj] {
	p := &workerPool[Obj]{
		r:       r,
		ctx:     ctx,
		limit:   max(r.opts.roundSize, 2*r.opts.concurrency),
		flights: map[string]flight[Obj]{},
		signal:  make(chan struct{}, 1),
		running: make([]atomic.Int64, r.opts.concurrency),
	}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(r.opts.concurrency)
	for i := range r.opts.concurrency {
		go p.work(&p.running[i])
	}
	return p
}

// operate dispatches work and returns the operations finished so far.
func (p *workerPool[Obj]) operate(_ context.Context, _ statedb.ReadTxn, work []op[Obj]) []op[Obj] {
	p.dispatch(work)
	// Let workers that are about to finish do so first, so that one write
	// transaction commits several results rather than one each. A few
	// yields cost under a microsecond when nothing else is runnable; with 64
	// busy workers they raised throughput by a third (go run ./benchmarks
	// -workloads slow).
	for range gatherYields {
		runtime.Gosched()
	}
	return p.takeFinished()
}

// gatherYields is how many times a round yields before taking the finished
// operations.
const gatherYields = 3

// stop makes the workers exit once their current operation returns, waits
// for them, and returns what was not taken with takeFinished: finished,
// running when stopped, queued, and parked.
func (p *workerPool[Obj]) stop() []op[Obj] {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
	left := append(p.done, p.queue...)
	for _, f := range p.flights {
		if f.hasParked {
			left = append(left, f.parked)
		}
	}
	p.done, p.queue, p.flights = nil, nil, nil
	return left
}

func (p *workerPool[Obj]) finished() <-chan struct{} { return p.signal }
func (p *workerPool[Obj]) hasRoom() bool             { return len(p.flights) < p.limit }
func (p *workerPool[Obj]) room() int                 { return p.limit - len(p.flights) }

// dispatch queues ops, parking those whose object is already in flight.
func (p *workerPool[Obj]) dispatch(ops []op[Obj]) {
	queued := 0
	for i := range ops {
		o := ops[i]
		if f, ok := p.flights[o.key]; ok {
			if !o.delete && o.statusID != 0 && o.statusID == f.statusID && !f.pruned {
				// Back to the version in flight: nothing after it.
				f.parked, f.hasParked = op[Obj]{}, false
			} else {
				f.parked, f.hasParked = o, true
			}
			p.flights[o.key] = f
			continue
		}
		p.flights[o.key] = flight[Obj]{rev: o.rev, since: o.since, statusID: o.statusID, retry: o.attempts > 0, obj: o.obj}
		ops[queued] = o
		queued++
	}
	if queued == 0 {
		return
	}
	p.mu.Lock()
	p.queue = append(p.queue, ops[:queued]...)
	p.mu.Unlock()
	if queued == 1 {
		p.cond.Signal()
	} else {
		p.cond.Broadcast()
	}
}

// takeFinished returns the ops finished since the last call. The slice is
// valid until the next call.
func (p *workerPool[Obj]) takeFinished() []op[Obj] {
	p.mu.Lock()
	done := p.done
	p.done = p.spare[:0]
	p.mu.Unlock()
	p.spare = done
	return done
}

func (p *workerPool[Obj]) superseded(o *op[Obj]) bool {
	return p.flights[o.key].hasParked
}

func (p *workerPool[Obj]) dropParked(o *op[Obj]) {
	if f, ok := p.flights[o.key]; ok && f.hasParked && !f.pruned {
		f.parked, f.hasParked = op[Obj]{}, false
		p.flights[o.key] = f
	}
}

func (p *workerPool[Obj]) reapplies(o *op[Obj]) bool {
	f := p.flights[o.key]
	return f.pruned && f.hasParked && !f.parked.delete && f.parked.statusID == o.statusID
}

// pruning marks the flights whose object is not in txn, the snapshot a
// prune is about to run with: the prune may remove what they apply.
func (p *workerPool[Obj]) pruning(txn statedb.ReadTxn) {
	for key, f := range p.flights {
		if f.pruned {
			continue
		}
		if _, _, found := p.r.lookup(txn, f.obj); !found {
			f.pruned = true
			p.flights[key] = f
		}
	}
}

// release ends the flights of committed ops and dispatches the successors
// parked behind them.
func (p *workerPool[Obj]) release(done []op[Obj]) {
	next := p.next[:0]
	for i := range done {
		key := done[i].key
		f := p.flights[key]
		delete(p.flights, key)
		if f.hasParked {
			next = append(next, f.parked)
		}
	}
	clear(done)
	p.dispatch(next)
	clear(next)
	p.next = next
}

func (p *workerPool[Obj]) pending(now time.Time) pendingWork {
	w := pendingWork{n: len(p.flights)}
	lower := func(rev statedb.Revision) {
		if w.lowChange == 0 || rev < w.lowChange {
			w.lowChange = rev
		}
	}
	for _, f := range p.flights {
		if !f.retry {
			lower(f.rev)
		}
		w.oldestSince = earliest(w.oldestSince, f.since)
		if f.hasParked {
			lower(f.parked.rev)
			w.oldestSince = earliest(w.oldestSince, f.parked.since)
			w.depth++
		}
	}
	p.mu.Lock()
	w.depth += len(p.queue)
	p.mu.Unlock()
	for i := range p.running {
		if started := p.running[i].Load(); started != 0 {
			d := time.Duration(now.UnixNano() - started)
			w.unfinished += d
			w.longest = max(w.longest, d)
		}
	}
	return w
}

// take waits for work and returns up to a fair share of the queue: one op,
// or with BatchOperations an equal share per worker up to the round size.
func (p *workerPool[Obj]) take(buf []op[Obj]) ([]op[Obj], bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && !p.stopped {
		p.cond.Wait()
	}
	if p.stopped {
		return buf, false
	}
	n := 1
	if p.r.batchOps != nil {
		workers := p.r.opts.concurrency
		n = min((len(p.queue)+workers-1)/workers, p.r.opts.roundSize)
	}
	buf = append(buf[:0], p.queue[:n]...)
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	return buf, true
}

func (p *workerPool[Obj]) work(running *atomic.Int64) {
	defer p.wg.Done()
	exec := executor[Obj]{r: p.r}
	var chunk []op[Obj]
	for {
		var ok bool
		chunk, ok = p.take(chunk)
		if !ok {
			return
		}
		running.Store(time.Now().UnixNano())
		exec.run(p.ctx, p.r.db.ReadTxn(), chunk)
		running.Store(0)
		p.mu.Lock()
		p.done = append(p.done, chunk...)
		p.mu.Unlock()
		clear(chunk)
		select {
		case p.signal <- struct{}{}:
		default:
		}
	}
}
