package reconciler

import (
	"context"
	"sync"

	"github.com/cilium/statedb"
)

// workerPool runs operations on several goroutines for WithConcurrency(n > 1).
//
// The loop owns flights, the objects with an operation queued or running.
// A new version of such an object is parked in its flight (replacing any
// older parked version) and dispatched only when the running one has been
// committed: this keeps at most one operation per object in flight and
// applies an object's versions in revision order. Workers take work from
// queue and put it, finished, on done; they never touch the table.
type workerPool[Obj any] struct {
	r     *reconciler[Obj]
	ctx   context.Context
	limit int // most flights at once; the loop stops reading changes there

	flights map[string]flight[Obj] // owned by the loop goroutine

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []op[Obj] // waiting for a worker
	done     []op[Obj] // finished, waiting for the loop to commit
	spare    []op[Obj] // the other half of done's double buffer
	stopped  bool
	finished chan struct{} // signalled when done gains ops
	wg       sync.WaitGroup
}

type flight[Obj any] struct {
	rev       statedb.Revision
	statusID  uint64 // identity of the status the op in flight answers
	parked    op[Obj]
	hasParked bool
}

func newWorkerPool[Obj any](ctx context.Context, r *reconciler[Obj]) *workerPool[Obj] {
	p := &workerPool[Obj]{
		r:        r,
		ctx:      ctx,
		limit:    max(r.opts.roundSize, 2*r.opts.concurrency),
		flights:  map[string]flight[Obj]{},
		finished: make(chan struct{}, 1),
	}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(r.opts.concurrency)
	for range r.opts.concurrency {
		go p.work()
	}
	return p
}

// stop makes the workers exit once their current operation returns and
// waits for them. Queued work is dropped.
func (p *workerPool[Obj]) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}

func (p *workerPool[Obj]) full() bool { return len(p.flights) >= p.limit }
func (p *workerPool[Obj]) room() int  { return p.limit - len(p.flights) }

// dispatch queues ops, parking those whose object is already in flight.
func (p *workerPool[Obj]) dispatch(ops []op[Obj]) {
	queued := 0
	for i := range ops {
		o := ops[i]
		if f, ok := p.flights[o.key]; ok {
			if o.statusID != 0 && o.statusID == f.statusID && !o.delete {
				// Same version as the one in flight; only another
				// reconciler's status changed. Its commit covers this.
				continue
			}
			f.parked, f.hasParked = o, true
			p.flights[o.key] = f
			continue
		}
		p.flights[o.key] = flight[Obj]{rev: o.rev, statusID: o.statusID}
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

// superseded reports whether a newer version of o's object is parked.
func (p *workerPool[Obj]) superseded(o *op[Obj]) bool {
	return p.flights[o.key].hasParked
}

// release ends the flights of committed ops and hands parked successors to
// add, to be dispatched in turn.
func (p *workerPool[Obj]) release(done []op[Obj], add func(op[Obj])) {
	for i := range done {
		key := done[i].key
		f := p.flights[key]
		delete(p.flights, key)
		if f.hasParked {
			add(f.parked)
		}
	}
}

// lowestInFlight returns the lowest revision of an object in flight.
func (p *workerPool[Obj]) lowestInFlight() (statedb.Revision, bool) {
	var low statedb.Revision
	busy := false
	for _, f := range p.flights {
		if !busy || f.rev < low {
			low, busy = f.rev, true
		}
	}
	return low, busy
}

func (p *workerPool[Obj]) inFlight() int { return len(p.flights) }

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

func (p *workerPool[Obj]) work() {
	defer p.wg.Done()
	exec := executor[Obj]{r: p.r}
	var chunk []op[Obj]
	for {
		var ok bool
		chunk, ok = p.take(chunk)
		if !ok {
			return
		}
		exec.run(p.ctx, p.r.db.ReadTxn(), chunk)
		if p.ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.done = append(p.done, chunk...)
		p.mu.Unlock()
		clear(chunk)
		select {
		case p.finished <- struct{}{}:
		default:
		}
	}
}
