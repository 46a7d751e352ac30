package keyqueue

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// What the rest of the reconciler reads of the queue: copies of figures
// and of a key's record. A record is changed only by the verbs of Queue.
// Of the queries only Stale remembers anything: see there.

// View is a copy of what one key's record holds, as its owner may read it.
type View[Obj any] struct {
	Key         string
	Task        Task[Obj] // the task of the version in flight, queued or waiting
	Attempts    int       // failed attempts counted
	Err         error     // the last failure, or nil
	FirstFailed time.Time // when the first failure counted happened
	// Due is when the retry is due (Unix ns), if Waiting.
	Due     int64
	Waiting bool
	// Superseded says that a delete of the key was read, or a prune ran
	// with its object absent, while this version ran: its status is
	// written only over the exact revision applied.
	Superseded bool

	hist *errorHistory // see History
}

// View returns a copy of the record of s.
func (s *State[Obj]) View() View[Obj] {
	return View[Obj]{
		Key: s.key, Task: s.task, Attempts: s.attempts, Err: s.err, FirstFailed: s.first,
		Due: s.due, Waiting: s.phase == phaseWaiting, Superseded: s.deleteSeen || s.pruned,
		hist: s.hist,
	}
}

// Figures are the queue's counts, read in O(1) (see Queue.Figures).
type Figures struct {
	Tracked     bool // whether any key has a State
	Prioritized bool // whether priorities are on (see Configure)
	Queued      int  // keys in the queued phase
	Active      int  // keys queued or running
	// Retrying counts keys with a failed attempt: waiting, or queued or
	// running again.
	Retrying int
	Parked   int    // running keys with a successor waiting
	Version  uint64 // changes whenever the failing keys or their errors do
	// NextDue is when the earliest retry is due (Unix ns), if RetryDue.
	NextDue  int64
	RetryDue bool
	Deferred int // changes deferred (see Backlogged)
	Rechecks int // re-checks asked for (see Done's Outcome.RecheckAt)
	// NextRecheck is when the earliest re-check is due (Unix ns), if
	// RecheckDue.
	NextRecheck int64
	RecheckDue  bool
	Stale       bool // whether a cut is remembered (see Stale)
}

// Figures returns the queue's counts. It is cheap: the loop reads it
// wherever it needs one.
func (q *Queue[Obj]) Figures() Figures {
	f := Figures{
		Tracked:     len(q.byKey) > 0,
		Prioritized: q.priority != nil,
		Queued:      len(q.queued),
		Active:      len(q.active),
		Retrying:    q.retrying,
		Parked:      q.parked,
		Version:     q.version,
		Deferred:    q.deferred.size,
		Rechecks:    len(q.rechecks.byKey),
		Stale:       q.cuts.any(),
	}
	if len(q.heap.entries) > 0 {
		f.NextDue, f.RetryDue = q.heap.entries[0].rank, true
	}
	f.NextRecheck, f.RecheckDue = q.rechecks.next()
	return f
}

// Lows are the lowest revisions and the earliest time of the work the
// queue holds, for progress and reports (see Queue.Lows).
type Lows struct {
	// Asked is the lowest revision that asked for work not done yet,
	// among the keys queued or running that have not failed (their
	// successors included), or 0.
	Asked uint64
	// Retry is the lowest revision of a failing object, waiting or being
	// attempted again, or 0.
	Retry uint64
	// Deferred is the first revision the oldest deferred change stands
	// for, the lowest of all deferred, or 0.
	Deferred uint64
	// Since is the earliest time at which an object still to be
	// reconciled (queued, running or waiting for a retry) was asked to
	// be, or the zero time; deferred changes are not counted.
	Since time.Time
}

// Lows returns the queue's low watermarks. It visits the keys queued and
// running: read it once a round.
func (q *Queue[Obj]) Lows() Lows {
	return Lows{Asked: q.lowestAsked(), Retry: q.retryLowWatermark(), Deferred: q.deferred.lowRev(), Since: q.oldestSince()}
}

// Stale reports whether statusID, a status found on an object of key
// that asks for no work, is older than what the queue knows of key: a
// newer version it holds or ran (see holdsNewer), or a cut remembered
// (a delete read, a status found written back over a newer one: Add, As
// Seen and WrittenBack). A status without identity (statusID 0) has no
// age: a cut takes it for stale once, the first time it is asked, and
// Stale remembers that it was (see staleCuts.cut), as rate.Limiter's
// Allow takes its token: ask only when the answer is acted on.
func (q *Queue[Obj]) Stale(key []byte, statusID uint64) bool {
	return q.holdsNewer(key, statusID) || q.cuts.cut(key, statusID)
}

// lowestAsked returns the lowest revision that asked for work not done
// yet, among the keys queued or running that have not failed (their
// successors included), or 0. Those that failed count in
// retryLowWatermark.
func (q *Queue[Obj]) lowestAsked() uint64 {
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
