package executor

import (
	"slices"
	"time"

	"github.com/cilium/statedb"
)

// resized is what an executor keeps across a change of its size (see
// Executor.Resize): the signal its pools share, the pools retired with
// items still under way, and what they left. The loop's goroutine owns it.
type resized[T any] struct {
	signal  chan struct{} // every pool's: one finished item of any wakes the loop
	retired []*pool[T]
	left    []T // inline: queued for the old workers, never started; run first
	done    []T // finished in a retired pool, not yet returned by Operate
	buf     []T // what Operate returns while any of the above is not empty
}

// busy reports whether anything of an old executor is left.
func (z *resized[T]) busy() bool {
	return len(z.retired) > 0 || len(z.left) > 0 || len(z.done) > 0
}

// Resize makes e run n items at once (inline if n == 1) in rounds of at
// most size, at a round boundary, losing and repeating nothing: an inline
// executor has nothing under way then; a pool changing its number of
// workers is retired: its workers finish the items they run, which
// Operate returns as they come, and exit, and the items queued for them
// keep their place, at the head of the new pool's queue or run first by
// the inline executor in this round.
func (e *Executor[T]) Resize(n, size int) {
	z := &e.resized
	switch {
	case e.pool == nil && n == 1:
		e.size = size
		return
	case e.pool != nil && n == len(e.pool.running):
		e.pool.mu.Lock()
		e.pool.roundSize = size
		e.pool.mu.Unlock()
		e.pool.limit = max(size, 2*n)
		return
	}
	var queued []T
	if old := e.pool; old != nil {
		var done []T
		queued, done = old.retire()
		z.done = append(z.done, done...)
		if old.held > 0 {
			z.retired = append(z.retired, old)
		} else {
			old.wg.Wait() // nothing under way: its workers are exiting
		}
		e.pool = nil
	}
	if n == 1 {
		e.cfg.Gate.SetWake(nil)
		e.inline, e.size = e.cfg.Inline(), size
		z.left = append(z.left, queued...)
	} else {
		e.inline = nil
		e.pool = newPool(&e.cfg, n, size, z.signal)
		if len(queued) > 0 {
			e.pool.held += len(queued)
			e.pool.mu.Lock()
			e.pool.queue = append(e.pool.queue, queued...)
			e.pool.mu.Unlock()
			e.pool.cond.Broadcast()
		}
	}
	clear(queued)
	e.finished = nil
	if e.pool != nil || z.busy() {
		e.finished = z.signal
	}
}

// operateResized is Operate while something of an old executor is left:
// the inline executor runs the items the old workers never started before
// work, and what the retired pools finished is returned with the rest.
func (e *Executor[T]) operateResized(txn statedb.ReadTxn, work []T) []T {
	z := &e.resized
	out := z.buf[:0]
	if e.pool != nil {
		out = append(out, e.pool.operate(work)...)
	} else {
		out = append(append(out, z.left...), work...)
		clear(z.left)
		z.left = z.left[:0]
		e.inline(txn, out)
	}
	out = z.collect(out)
	if e.pool == nil && !z.busy() {
		e.finished = nil
	}
	z.buf = out
	return out
}

// load adds to w what the retired pools hold.
func (z *resized[T]) load(w Load, now time.Time) Load {
	for _, p := range z.retired {
		l := p.load(now)
		w.Waiting += l.Waiting
		w.Busy += l.Busy
		w.Unfinished += l.Unfinished
		w.Longest = max(w.Longest, l.Longest)
	}
	return w
}

// stop waits for the retired pools' items to return and gives back
// everything Operate has not.
func (z *resized[T]) stop() (left []T) {
	left = append(append(left, z.left...), z.done...)
	for _, p := range z.retired {
		p.wg.Wait()
		left = append(left, p.done...)
		p.done, p.held = nil, 0
	}
	z.left, z.done, z.retired, z.buf = nil, nil, nil, nil
	return left
}

// collect appends to out what the retired pools finished since the last
// call, and forgets each pool once nothing of it is under way.
func (z *resized[T]) collect(out []T) []T {
	out = append(out, z.done...)
	clear(z.done)
	z.done = z.done[:0]
	z.retired = slices.DeleteFunc(z.retired, func(p *pool[T]) bool {
		p.mu.Lock()
		done := p.done
		p.done = nil
		p.mu.Unlock()
		p.held -= len(done)
		out = append(out, done...)
		if p.held > 0 {
			return false
		}
		p.wg.Wait() // every item returned: its workers are exiting
		return true
	})
	return out
}
