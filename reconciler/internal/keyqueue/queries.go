package keyqueue

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// What the rest of the reconciler reads of one key's record. A record is
// changed only by the verbs of Queue.

// Key returns the primary key of s.
func (s *State[Obj]) Key() string { return s.key }

// Task returns what s applies next (queued or waiting) or applies now
// (running).
func (s *State[Obj]) Task() Task[Obj] { return s.task }

// Attempts returns how many attempts of its task failed so far.
func (s *State[Obj]) Attempts() int { return s.attempts }

// Err returns the error of the last failed attempt, or nil.
func (s *State[Obj]) Err() error { return s.err }

// FirstFailed returns when the first failed attempt of its task failed.
func (s *State[Obj]) FirstFailed() time.Time { return s.first }

// Due returns when the retry of s is due (Unix ns), if it waits for one.
func (s *State[Obj]) Due() (int64, bool) { return s.due, s.phase == phaseWaiting }

// Superseded reports whether, while s runs, a delete of its key was read
// or a prune ran with its object absent: then status identity no longer
// tells versions apart, and its status is written only over the very
// revision it applied.
func (s *State[Obj]) Superseded() bool { return s.deleteSeen || s.pruned }

// Queued returns how many keys are in the queued phase.
func (q *Queue[Obj]) Queued() int { return len(q.queued) }

// Active returns how many keys are queued or running.
func (q *Queue[Obj]) Active() int { return len(q.active) }

// Retrying returns how many keys have a failed attempt: waiting, or
// queued or running again.
func (q *Queue[Obj]) Retrying() int { return q.retrying }

// Parked returns how many running keys have a successor waiting.
func (q *Queue[Obj]) Parked() int { return q.parked }

// Version changes whenever the failing keys or their errors do.
func (q *Queue[Obj]) Version() uint64 { return q.version }

// Prioritized reports whether priorities are on (see SetPriority).
func (q *Queue[Obj]) Prioritized() bool { return q.priority != nil }

// LowestAsked returns the lowest revision that asked for work not done
// yet, among the keys queued or running that have not failed (their
// successors included), or 0. Those that failed count in
// RetryLowWatermark.
func (q *Queue[Obj]) LowestAsked() uint64 {
	var low uint64
	lower := func(rev uint64) {
		if rev != 0 && (low == 0 || rev < low) {
			low = rev
		}
	}
	for _, s := range q.active {
		if s.attempts == 0 {
			lower(s.task.Asked)
		}
		if s.hasNext {
			lower(s.next.Asked)
		}
	}
	return low
}

// Errors returns up to limit errors of failing keys: those being
// attempted now (by key), then those waiting, earliest attempt first. It
// visits O(limit log limit) entries of the heap, not all of them.
func (q *Queue[Obj]) Errors(limit int) []error {
	errs := make([]error, 0, min(limit, q.retrying))
	add := func(s *State[Obj]) {
		key := s.key
		if q.display != nil {
			key = q.display(key)
		}
		errs = append(errs, fmt.Errorf("%s: %w", key, s.err))
	}
	var again []*State[Obj]
	for _, s := range q.active {
		if s.attempts > 0 {
			again = append(again, s)
		}
	}
	slices.SortFunc(again, func(a, b *State[Obj]) int { return strings.Compare(a.key, b.key) })
	for _, s := range again {
		if len(errs) == limit {
			return errs
		}
		add(s)
	}
	// The smallest entries of a heap are found by walking it from the
	// root, always expanding the smallest entry seen so far.
	h := q.heap.entries
	frontier := []int{}
	push := func(i int) {
		if i < len(h) {
			frontier = append(frontier, i)
		}
	}
	push(0)
	for len(errs) < limit && len(frontier) > 0 {
		best := 0
		for i := range frontier {
			if h[frontier[i]].before(h[frontier[best]]) {
				best = i
			}
		}
		i := frontier[best]
		add(h[i].s)
		frontier[best] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		push(2*i + 1)
		push(2*i + 2)
	}
	return errs
}
