package reconciler

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/cilium/statedb"
)

// The life of one key.
//
// The work the reconciler holds for one primary key lives in one keyState,
// and every change of a keyState, its position in the retry heap included,
// is made in this file, by a method of lifecycles or of the heap, on the
// loop's goroutine. A key with no keyState needs nothing from the
// reconciler (its next change, if any, is still in the change iterator or
// the deferred queue); what makes a status of it stale is in staleness.
//
//	                      start
//	    queued ─────────────────────────────► running
//	(not yet in the           ▲             (in the executor: waiting for
//	 executor)                │ due          the gate, or under way; a
//	    ▲                     │              change read meanwhile becomes
//	    │                  waiting           its successor, next)
//	    │               (retry heap)                   │
//	    │                     ▲                        │ settle, after
//	    │                     └────── failed ──────────┤ its commit
//	    └───────────────── successor, if any ──────────┤
//	                                                   └─► gone: done,
//	                                                       terminal, or the
//	                                                       object changed
//
// Every state and the methods that move a key between them:
//
//	gone    → queued   observe: a change read (add); queue, with priorities
//	gone    → waiting  adopt: an Error status no retry is for
//	gone    → running  track: an untracked task of the inline executor that
//	                   failed or never started (then settle or requeue)
//	queued  → queued   observe, queue: a newer change replaces the task
//	queued  → running  start (collect takes it with takeQueued; a probe
//	                   of the circuit breaker with takeOldest or takeNewest)
//	queued  → gone     forget: the task is no longer what the table asks
//	running → running  follow, dropNext: the successor recorded or dropped
//	                   (observe or queue: a change read);
//	                   markPruned: a prune ran with the object absent
//	running → queued   settle with a successor; requeue: never started
//	running → waiting  settle: failed, due after its backoff
//	running → gone     settle: done, terminal, or the object changed
//	waiting → queued   observe, queue: a newer change
//	waiting → running  popDue, attempt, start: the retry is due
//	waiting → gone     forget, dropRetry: a newer version overtook it
//
// Invariants:
//
//   - At most one operation per key is in the executor (the running phase),
//     and at most one successor waits behind it: the newest version or a
//     delete. A change read while running replaces the successor; a change
//     back to the very version running (same status identity) clears it.
//   - Once a delete of the key has been read while a version runs, status
//     identity no longer tells versions apart (deleteSeen): an object with
//     the same identity is new work, and the running version's status is
//     written only if the object is still exactly that revision.
//   - A prune that runs while a version runs with its object absent may
//     undo what it applies (pruned): the same rule holds.
//   - An operation starts only through gate.enter, asked at the moment it
//     starts.
//   - A retry is a keyState in the waiting phase; a newer change of its key
//     replaces it.
//   - An object put back with a status older than what the reconciler
//     knows of its key (a delete read since, or a newer version it holds or
//     applied; see staleness) is new work, although its status (Done, say, on
//     a value read earlier) asks for none: that status speaks of a target
//     that has changed since.
//
// The queued phase is lifecycles.queued, in the order the keys arrived
// there. With priorities (WithPriority) every queued keyState is in
// lifecycles.byPriority too, highest first, and takeQueued takes from both:
// a share of each round in arrival order, the rest by priority (see
// takeQueued). Fresh changes then wait in the queued phase (queue), so that
// collect can choose among them, rather than starting as they are read.
//
// With one worker and no priorities, the loop skips the keyState of a fresh change when no
// key has one (the common case): the change is applied and committed in the
// same round, so there is nothing to remember unless it fails or the round
// is cut short, and then settle or requeue create it (see track). A delete
// recovered at the start is not skipped, nor is any change while changes
// are deferred: a later change of the key, or a deferred one, may be taken
// in the same round.
type keyState[Obj any] struct {
	key   string
	phase phase

	task    task[Obj] // queued or waiting: to apply next; running: being applied
	next    task[Obj] // running: the successor, if hasNext
	hasNext bool

	// Failures of task: attempts so far, the last error, when the first
	// happened, when the next attempt is due (Unix ns, saturated), and the
	// identity of the Error status written for it (0 if none).
	attempts int
	err      error
	first    time.Time
	due      int64
	errID    uint64

	deleteSeen bool // running: a delete of the key was read since task started
	pruned     bool // running: a prune ran with task's object absent

	active   int    // position in lifecycles.active while queued or running, else -1
	pos      [2]int // in lifecycles.heap while waiting (pos[inRetries]) and byPriority while queued (pos[inPriority]), else -1
	queuedAt uint64 // with priorities: the seq it was last queued with, which a requeue keeps (see enqueue)
}

type phase uint8

const (
	phaseQueued phase = iota + 1
	phaseRunning
	phaseWaiting
)

// task is one version of one object to apply, or one deleted object.
type task[Obj any] struct {
	obj      Obj
	rev      statedb.Revision // the object's revision, to apply and compare-and-swap
	asked    statedb.Revision // the revision of the change that asked for it, for progress; retarget keeps it
	statusID uint64           // identity of the status that asked for it; 0 for a delete
	since    time.Time        // when that status was written (a delete: when read)
	ready    int64            // when it became ready to run (Unix ns), for queue waits
	delete   bool
	refresh  bool // asked for by a Refreshing status
	// With priorities: the rank of obj's priority, read once per version
	// (see lifecycles.rank), once ranked.
	rank   int64
	ranked bool
}

// lifecycles is the set of keyStates of one reconciler. It lives as long
// as the reconciler, across stops and starts of its loop, and is owned by
// the loop's goroutine.
type lifecycles[Obj any] struct {
	byKey  map[string]*keyState[Obj]
	queued []*keyState[Obj] // FIFO of the queued phase, in arrival order
	active []*keyState[Obj] // queued and running, for progress and reports
	heap   keyHeap[Obj]     // the waiting phase, by due time

	seq  uint64 // insertion order of the heap
	peak int    // the most keys byKey held since it was last made anew

	// The revisions asked and the times since of the waiting keyStates,
	// for the lowest and earliest of them (see waitingEntry).
	lows, sinces minHeap[waitingEntry[Obj]]
	retrying     int    // keyStates with a failed attempt: waiting, or queued or running again
	parked       int    // running keyStates with a successor
	version      uint64 // changes whenever the failing keys or their errors do

	// With WithPriority (priority not nil): the priority of an object, the
	// share of each take kept for arrival order, the queued keyStates by
	// priority, and the arrival slots owed, a fraction of one (see
	// takeQueued). Nil and zero without.
	priority   func(Obj) int
	share      float64
	byPriority keyHeap[Obj]
	credit     float64

	// outdated holds the keys whose row of the retries table is out of
	// date: their failure changed since the last takeOutdated (nil: not
	// tracking); spare is its double buffer.
	outdated, spare map[string]*keyState[Obj]
}

func newLifecycles[Obj any]() *lifecycles[Obj] {
	return &lifecycles[Obj]{byKey: map[string]*keyState[Obj]{}}
}

// tracked reports whether any key has a keyState.
func (lc *lifecycles[Obj]) tracked() bool { return len(lc.byKey) > 0 }

// observe records a change read from the table: t, a new version of key
// (with a Pending or Refreshing status) or its delete. It returns the
// keyState to start now, or nil if the change waits behind a running
// version (or is already queued).
func (lc *lifecycles[Obj]) observe(key string, t task[Obj]) *keyState[Obj] {
	s, ok := lc.byKey[key]
	if !ok {
		s = lc.add(key, t)
		return s
	}
	switch s.phase {
	case phaseRunning:
		lc.follow(s, t)
		return nil
	case phaseWaiting:
		lc.unwait(s)
		lc.replace(s, t)
		s.phase = phaseQueued
		lc.activate(s)
		return s
	default: // queued: the newer change takes its place in the queue
		lc.replace(s, sameRank(s.task, stillAsked(s.task, t)))
		lc.reprioritize(s)
		return nil
	}
}

// queue records a change read from the table as observe does, but leaves
// it in the queue rather than returning it to start: with priorities,
// takeQueued chooses what starts. A key gone or waiting joins the back of
// the queue; one queued keeps its place, with the newer change's priority.
func (lc *lifecycles[Obj]) queue(key string, t task[Obj]) {
	s, ok := lc.byKey[key]
	if !ok {
		s = &keyState[Obj]{key: key, task: t, pos: [2]int{-1, -1}, active: -1}
		lc.byKey[key] = s
		lc.peak = max(lc.peak, len(lc.byKey))
		lc.enqueue(s)
		return
	}
	switch s.phase {
	case phaseRunning:
		lc.follow(s, t)
	case phaseWaiting:
		lc.replace(s, t)
		lc.enqueue(s)
	default:
		lc.replace(s, sameRank(s.task, stillAsked(s.task, t)))
		lc.reprioritize(s)
	}
}

// sameRank returns t, which replaces old, with old's rank if it is the
// same version of the object: the same revision read again (a deferred
// change looks its object up), or the same status identity (another
// reconciler's status written since).
func sameRank[Obj any](old, t task[Obj]) task[Obj] {
	same := old.rev == t.rev || (t.statusID != 0 && t.statusID == old.statusID)
	if old.ranked && !t.ranked && same && old.delete == t.delete {
		t.rank, t.ranked = old.rank, true
	}
	return t
}

// setPriority turns priorities on: priority gives an object's, share the
// part of each take kept for arrival order. It is called before any key is
// queued.
func (lc *lifecycles[Obj]) setPriority(priority func(Obj) int, share float64) {
	lc.priority, lc.share = priority, share
	lc.byPriority.slot = inPriority
}

// reprioritize gives s, queued, the priority of its task, keeping its
// place in arrival order.
func (lc *lifecycles[Obj]) reprioritize(s *keyState[Obj]) {
	if s.pos[inPriority] >= 0 {
		lc.byPriority.rerank(s.pos[inPriority], lc.rank(&s.task))
	}
}

// rank returns the rank of t's priority, reading it only the first time
// t, one version of an object, is ranked: a version requeued (held by the
// circuit breaker, cut short by Pause or a stop) keeps its rank.
func (lc *lifecycles[Obj]) rank(t *task[Obj]) int64 {
	if !t.ranked {
		t.rank, t.ranked = priorityRank(lc.priority(t.obj)), true
	}
	return t.rank
}

// follow records t, a change of s's key read while s runs, as what comes
// after it. A delete replaces the successor and marks deleteSeen. A change
// back to the very version running clears the successor, since applying
// the version running is all that is needed, unless a delete or a prune
// came in between: then it is new work, as any other change is. The very
// version is the same revision of the object (read again: a deferred
// change looks its object up), or the same status identity (a Pending one
// or the Error status its retry answers).
func (lc *lifecycles[Obj]) follow(s *keyState[Obj], t task[Obj]) {
	switch {
	case t.delete:
		lc.setNext(s, t, true)
		s.deleteSeen = true
	case !s.deleteSeen && !s.pruned && !s.task.delete && (t.rev == s.task.rev || (t.statusID != 0 && t.statusID == s.task.statusID)):
		lc.setNext(s, task[Obj]{}, false)
		s.task = stillAsked(t, s.task) // one request: progress waits for the earlier ask
	default:
		lc.setNext(s, t, true)
	}
}

// adopt records an Error status this reconciler did not just write, found
// on key's object (written back, or there at start; t applies it again):
// it is retried at now, unless the keyState knows that status already.
// While a version of the key runs, it is a change like any other (follow).
func (lc *lifecycles[Obj]) adopt(key string, t task[Obj], errID uint64, err error, now time.Time) {
	s, ok := lc.byKey[key]
	if ok && s.phase == phaseRunning {
		lc.follow(s, t)
		return
	}
	if ok && errID != 0 && s.errID == errID {
		return // known: a status without identity never is
	}
	if !ok {
		s = &keyState[Obj]{key: key, pos: [2]int{-1, -1}, active: -1}
		lc.byKey[key] = s
		lc.peak = max(lc.peak, len(lc.byKey))
	} else if s.phase == phaseWaiting {
		lc.unwait(s)
	} else {
		lc.deactivate(s)
		lc.unqueue(s)
		t = stillAsked(s.task, t)
	}
	lc.replace(s, t)
	s.attempts, s.err, s.first, s.errID = 1, err, t.since, errID
	lc.retrying++
	lc.wait(s, now.UnixNano())
}

// takeQueued returns up to n queued keyStates, oldest first, for start.
// With priorities it returns them highest priority first (see takeByPriority).
func (lc *lifecycles[Obj]) takeQueued(n int) []*keyState[Obj] {
	if lc.priority != nil {
		return lc.takeByPriority(n)
	}
	n = min(n, len(lc.queued))
	taken := lc.queued[:n:n]
	lc.queued = lc.queued[n:]
	if len(lc.queued) == 0 {
		lc.queued = nil
	}
	return taken
}

// takeByPriority returns up to n queued keyStates: a share of n (lc.share)
// oldest first, whatever their priority, and the rest highest priority
// first, in arrival order within one priority. The share is counted over
// successive takes, so that a take of one key in every 1/share is an
// arrival-order one: the k oldest keys are all taken once the shares of
// the takes since they were queued add up to k, whatever is queued after
// them. The result is in priority order, first queued first within one
// priority.
func (lc *lifecycles[Obj]) takeByPriority(n int) []*keyState[Obj] {
	n = min(n, len(lc.queued))
	if n <= 0 {
		return nil
	}
	if n == len(lc.queued) {
		// All of them: by priority, and no share is owed.
		taken := make([]*keyState[Obj], 0, n)
		for len(lc.byPriority.entries) > 0 {
			taken = append(taken, lc.byPriority.remove(0).s)
		}
		lc.queued = nil
		return taken
	}
	lc.credit += lc.share * float64(n)
	oldest := min(int(lc.credit), n)
	lc.credit -= float64(oldest)
	entries := make([]heapEntry[Obj], 0, n)
	for _, s := range lc.queued[:oldest] {
		entries = append(entries, lc.byPriority.remove(s.pos[inPriority]))
	}
	for len(entries) < n {
		entries = append(entries, lc.byPriority.remove(0))
	}
	// In the order the heap would give them: a key taken for its age
	// goes before the younger ones of its priority.
	slices.SortFunc(entries, func(a, b heapEntry[Obj]) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	taken := make([]*keyState[Obj], len(entries))
	for i, e := range entries {
		taken[i] = e.s
	}
	kept := lc.queued[:0]
	for _, s := range lc.queued[oldest:] {
		if s.pos[inPriority] >= 0 {
			kept = append(kept, s)
		}
	}
	clear(lc.queued[len(kept):])
	switch {
	case len(kept) == 0:
		lc.queued = nil
	case cap(kept) > shrinkAbove && len(kept) < cap(kept)/4:
		lc.queued = append([]*keyState[Obj](nil), kept...) // give a burst's memory back
	default:
		lc.queued = kept
	}
	return taken
}

// takeOldest returns the queued keyState queued first, whatever its
// priority, and takeNewest the one queued last: the circuit breaker's
// probes take keys in turn, not by priority.
func (lc *lifecycles[Obj]) takeOldest() []*keyState[Obj] { return lc.takeAt(0) }
func (lc *lifecycles[Obj]) takeNewest() []*keyState[Obj] { return lc.takeAt(len(lc.queued) - 1) }

func (lc *lifecycles[Obj]) takeAt(i int) []*keyState[Obj] {
	if i < 0 || i >= len(lc.queued) {
		return nil
	}
	s := lc.queued[i]
	if lc.priority != nil {
		lc.byPriority.remove(s.pos[inPriority])
	}
	lc.queued = append(lc.queued[:i], lc.queued[i+1:]...)
	if len(lc.queued) == 0 {
		lc.queued = nil
	}
	return []*keyState[Obj]{s}
}

// popDue removes and returns the waiting keyState due first, if it is due
// at now (Unix ns). Its phase is left to start or forget.
func (lc *lifecycles[Obj]) popDue(now int64) (*keyState[Obj], bool) {
	if len(lc.heap.entries) == 0 || lc.heap.entries[0].rank > now {
		return nil, false
	}
	s := lc.heap.entries[0].s
	lc.unwait(s)
	return s, true
}

// nextDue returns when the earliest retry is due (Unix ns).
func (lc *lifecycles[Obj]) nextDue() (int64, bool) {
	if len(lc.heap.entries) == 0 {
		return 0, false
	}
	return lc.heap.entries[0].rank, true
}

// attempt readies the task of s, just taken due from the retry heap, for
// another attempt: an update answers the Error status written for it,
// which its commit expects to find in the table.
func (lc *lifecycles[Obj]) attempt(s *keyState[Obj]) {
	if !s.task.delete {
		s.task.statusID = s.errID
	}
	s.task.ready = s.due
}

// retarget points the task of s at obj, the same version of the object
// found at revision rev: only another reconciler's status, or this one's
// Error status, changed since.
func (lc *lifecycles[Obj]) retarget(s *keyState[Obj], obj Obj, rev statedb.Revision) {
	s.task.obj, s.task.rev = obj, rev
}

// start moves s to the running phase: its task is handed to the executor.
func (lc *lifecycles[Obj]) start(s *keyState[Obj]) {
	if s.phase == phaseWaiting {
		lc.unwait(s)
	}
	lc.activate(s)
	s.phase = phaseRunning
	lc.setNext(s, task[Obj]{}, false)
	s.deleteSeen, s.pruned = false, false
	if s.attempts > 0 {
		lc.changed(s) // "running" in the retries table
	}
}

// forget drops s: nothing is left to do for its key.
func (lc *lifecycles[Obj]) forget(s *keyState[Obj]) {
	if s.phase == phaseWaiting {
		lc.unwait(s)
	}
	lc.deactivate(s)
	lc.setNext(s, task[Obj]{}, false)
	if s.attempts > 0 {
		lc.retrying--
		lc.version++
		if lc.outdated != nil {
			lc.outdated[s.key] = nil
		}
	}
	s.phase = 0
	delete(lc.byKey, s.key)
	if lc.peak > shrinkAbove && len(lc.byKey) < lc.peak/4 {
		// A map never shrinks: copy what is left to give back the memory
		// a burst of failures took, at a cost amortised over its deletes.
		// (maps.Clone would keep the size.)
		m := make(map[string]*keyState[Obj], len(lc.byKey))
		for k, v := range lc.byKey {
			m[k] = v
		}
		lc.byKey, lc.peak = m, len(m)
	}
}

// shrinkAbove is the size above which a map or slice of keys emptied is
// made anew, so that a burst leaves no memory held at rest.
const shrinkAbove = 1024

// settle ends the running phase of s once the outcome of its task is
// committed. settled says the outcome needs no retry (success, or a
// terminal error of an update); written, whether the status was written
// (always true for a delete). A failure waits until retryAt (Unix ns);
// errID is the identity of the Error status written for it; it counts an
// attempt unless it is not counted (a failure the circuit breaker spared),
// but a first failure always does. A successor supersedes the outcome: it
// is what the object is now, and is queued.
func (lc *lifecycles[Obj]) settle(s *keyState[Obj], err error, settled, written, counted bool, retryAt int64, errID uint64, now time.Time) {
	switch {
	case s.hasNext:
		next := s.next
		lc.replace(s, next)
		lc.enqueue(s)
	case settled || !written:
		// Done, terminal, or the object changed: a newer version comes
		// with its own change.
		lc.forget(s)
	default:
		if s.attempts == 0 {
			s.first = now
			lc.retrying++
			counted = true
		}
		if counted {
			s.attempts++
		}
		s.err, s.errID = err, errID
		lc.deactivate(s)
		lc.wait(s, retryAt)
	}
}

// requeue puts s back in the queue: its task never started (the gate
// closed, or the loop stopped and it is carried over to the next start).
// The successor, if any, is what the object is now, and takes the task's
// place; a retry keeps its attempts.
func (lc *lifecycles[Obj]) requeue(s *keyState[Obj]) {
	if s.hasNext {
		next := stillAsked(s.task, s.next)
		lc.replace(s, next)
	}
	lc.enqueueAt(s, s.queuedAt)
	if s.attempts > 0 {
		lc.changed(s)
	}
}

// dropNext forgets the successor of s: the commit found the table holding
// the version s ran, written back after the successor was read.
func (lc *lifecycles[Obj]) dropNext(s *keyState[Obj]) {
	lc.setNext(s, task[Obj]{}, false)
}

// setNext sets the successor of s, counting those parked. A successor
// that replaces another keeps its request (see stillAsked).
func (lc *lifecycles[Obj]) setNext(s *keyState[Obj], next task[Obj], has bool) {
	if has && s.hasNext {
		next = stillAsked(s.next, next)
	}
	switch {
	case has && !s.hasNext:
		lc.parked++
	case !has && s.hasNext:
		lc.parked--
	}
	s.next, s.hasNext = next, has
}

// dropRetry forgets the retry of key, if it waits for one: a newer
// version of the object was read.
func (lc *lifecycles[Obj]) dropRetry(key string) {
	if s, ok := lc.byKey[key]; ok && s.phase == phaseWaiting {
		lc.forget(s)
	}
}

// enqueue moves s to the queued phase, at the back of the queue.
func (lc *lifecycles[Obj]) enqueue(s *keyState[Obj]) { lc.enqueueAt(s, 0) }

// enqueueAt is enqueue but, with priorities and seq not 0, puts s back in
// the place it was queued with seq, before those queued since: a requeue
// of work that never started (a round cut by Pause, a stop or the
// breaker) keeps its turn, first read first within a priority.
func (lc *lifecycles[Obj]) enqueueAt(s *keyState[Obj], seq uint64) {
	if s.phase == phaseWaiting {
		lc.unwait(s)
	}
	lc.setNext(s, task[Obj]{}, false)
	s.deleteSeen, s.pruned = false, false
	lc.activate(s)
	if s.phase != phaseQueued {
		s.phase = phaseQueued
		if lc.priority == nil {
			lc.queued = append(lc.queued, s)
			return
		}
		if seq == 0 {
			lc.seq++
			seq = lc.seq
			lc.queued = append(lc.queued, s)
		} else {
			i, _ := slices.BinarySearchFunc(lc.queued, seq, func(q *keyState[Obj], seq uint64) int { return cmp.Compare(q.queuedAt, seq) })
			lc.queued = slices.Insert(lc.queued, i, s)
		}
		s.queuedAt = seq
		lc.byPriority.push(s, lc.rank(&s.task), seq)
	}
}

// track returns the keyState of key for t, an untracked task of the inline
// executor that failed or never started, in the running phase. A keyState
// made for an older change of the key earlier in the same commit gives way
// to t.
func (lc *lifecycles[Obj]) track(key string, t task[Obj]) *keyState[Obj] {
	s, ok := lc.byKey[key]
	if !ok {
		s = &keyState[Obj]{key: key, pos: [2]int{-1, -1}, active: -1}
		lc.byKey[key] = s
		lc.peak = max(lc.peak, len(lc.byKey))
	} else if s.phase == phaseWaiting {
		lc.unwait(s)
	} else {
		lc.unqueue(s)
	}
	lc.replace(s, t)
	s.phase = phaseRunning
	lc.activate(s)
	return s
}

// unqueue removes s from the queue, if it is there.
func (lc *lifecycles[Obj]) unqueue(s *keyState[Obj]) {
	if s.phase != phaseQueued {
		return
	}
	if s.pos[inPriority] >= 0 {
		lc.byPriority.remove(s.pos[inPriority])
	}
	for i, q := range lc.queued {
		if q == s {
			lc.queued = append(lc.queued[:i], lc.queued[i+1:]...)
			return
		}
	}
}

// holdsNewer reports whether the reconciler holds for key a version that
// may be newer than the status statusID found on an object of key (see
// staleness): one queued, running or waiting for a retry, asked for by a
// later status, or by a status without identity, whose age nothing tells
// (then any status but the Error written for it may be older). Nothing
// tells the age of a status without identity either (statusID 0): any
// version held may be newer.
func (lc *lifecycles[Obj]) holdsNewer(key []byte, statusID uint64) bool {
	s, ok := lc.byKey[string(key)]
	switch {
	case !ok || s.task.delete:
		return false
	case statusID == 0:
		return true
	case s.task.statusID == 0:
		return statusID != s.errID
	}
	return statusID < s.task.statusID
}

// markPruned records that a prune runs while s's task is running and its
// object is absent from the prune's snapshot.
func (lc *lifecycles[Obj]) markPruned(s *keyState[Obj]) { s.pruned = true }

// add creates the keyState of key, queued with t, and returns it to start.
func (lc *lifecycles[Obj]) add(key string, t task[Obj]) *keyState[Obj] {
	s := &keyState[Obj]{key: key, task: t, phase: phaseQueued, pos: [2]int{-1, -1}, active: -1}
	lc.byKey[key] = s
	lc.peak = max(lc.peak, len(lc.byKey))
	lc.activate(s)
	return s
}

// replace makes t the task of s, a new version: the failures of the old one
// no longer count.
func (lc *lifecycles[Obj]) replace(s *keyState[Obj], t task[Obj]) {
	lc.resetFailure(s)
	s.task = t
}

func (lc *lifecycles[Obj]) resetFailure(s *keyState[Obj]) {
	if s.attempts > 0 {
		lc.retrying--
		lc.version++
		if lc.outdated != nil {
			lc.outdated[s.key] = nil
		}
	}
	s.attempts, s.err, s.first, s.errID = 0, nil, time.Time{}, 0
}

// wait puts s in the retry heap, due at due.
func (lc *lifecycles[Obj]) wait(s *keyState[Obj], due int64) {
	s.phase, s.due = phaseWaiting, due
	lc.seq++
	lc.heap.push(s, due, lc.seq)
	e := waitingEntry[Obj]{s, lc.seq}
	lc.lows.push(int64(min(s.task.asked, math.MaxInt64)), e)
	lc.lows.compact(len(lc.heap.entries), lc.stillWaiting)
	if !s.task.since.IsZero() {
		lc.sinces.push(unixNanoSat(s.task.since), e)
		lc.sinces.compact(len(lc.heap.entries), lc.stillWaiting)
	}
	lc.changed(s)
}

// unixNanoSat returns t in Unix nanoseconds, saturated where UnixNano's
// result is undefined (before 1678, after 2262).
func unixNanoSat(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// waitingEntry names one wait of a keyState: it holds while s is in the
// retry heap from that wait (seq), and not after s leaves it, even if s
// waits again.
type waitingEntry[Obj any] struct {
	s   *keyState[Obj]
	seq uint64
}

func (lc *lifecycles[Obj]) stillWaiting(e waitingEntry[Obj]) bool {
	return e.s.pos[inRetries] >= 0 && lc.heap.entries[e.s.pos[inRetries]].seq == e.seq
}

func (lc *lifecycles[Obj]) unwait(s *keyState[Obj]) {
	if s.pos[inRetries] >= 0 {
		lc.heap.remove(s.pos[inRetries])
		if len(lc.heap.entries) == 0 {
			lc.lows, lc.sinces = nil, nil // all stale
		}
	}
	lc.changed(s)
}

func (lc *lifecycles[Obj]) activate(s *keyState[Obj]) {
	if s.active < 0 {
		s.active = len(lc.active)
		lc.active = append(lc.active, s)
	}
}

func (lc *lifecycles[Obj]) deactivate(s *keyState[Obj]) {
	if i := s.active; i >= 0 {
		last := len(lc.active) - 1
		lc.active[i] = lc.active[last]
		lc.active[i].active = i
		lc.active[last] = nil
		lc.active = lc.active[:last]
		s.active = -1
	}
}

// changed notes that the failure of s changed, for health and the retries
// table.
func (lc *lifecycles[Obj]) changed(s *keyState[Obj]) {
	if s.attempts == 0 {
		return
	}
	lc.version++
	if lc.outdated != nil {
		lc.outdated[s.key] = s
	}
}

// trackOutdated makes takeOutdated report which keys' failures changed,
// for the retries table.
func (lc *lifecycles[Obj]) trackOutdated() {
	lc.outdated, lc.spare = map[string]*keyState[Obj]{}, map[string]*keyState[Obj]{}
}

// takeOutdated returns the keys whose failure changed since the last call, with
// their keyState, or nil if the key no longer fails. The map is valid until
// the next call.
func (lc *lifecycles[Obj]) takeOutdated() map[string]*keyState[Obj] {
	d := lc.outdated
	if len(d) > 0 {
		lc.outdated, lc.spare = lc.spare, d
	}
	if len(lc.outdated) > shrinkAbove {
		lc.outdated = map[string]*keyState[Obj]{}
	}
	clear(lc.outdated)
	if len(d) == 0 && len(lc.spare) > shrinkAbove {
		lc.spare = map[string]*keyState[Obj]{} // no longer used by the caller
	}
	return d
}

// oldestSince returns the earliest time at which an object still to be
// reconciled (queued, running or waiting for a retry) was asked to be, or
// the zero time.
func (lc *lifecycles[Obj]) oldestSince() time.Time {
	var oldest time.Time
	for _, s := range lc.active {
		oldest = earliest(oldest, s.task.since)
		if s.hasNext {
			oldest = earliest(oldest, s.next.since)
		}
	}
	if len(lc.heap.entries) == 0 {
		return oldest
	}
	if e, ok := lc.sinces.min(lc.stillWaiting); ok {
		oldest = earliest(oldest, e.s.task.since)
	}
	return oldest
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// retryLowWatermark returns the lowest revision of a failing object,
// waiting or being attempted again, or 0.
func (lc *lifecycles[Obj]) retryLowWatermark() statedb.Revision {
	var low statedb.Revision
	if lc.retrying == 0 {
		return 0 // every waiting keyState has failed
	}
	if e, ok := lc.lows.min(lc.stillWaiting); ok {
		low = e.s.task.asked
	}
	for _, s := range lc.active {
		if s.attempts > 0 && (low == 0 || s.task.asked < low) {
			low = s.task.asked
		}
	}
	return low
}

// keyHeap is a binary min-heap of keyStates ordered by (rank, seq), seq
// breaking ties in insertion order; the first is entries[0]. Each keyState
// records where it sits (pos[slot]), so that adding, removing and
// re-ranking cost O(log n) and a round never scans the heap; the ordering
// keys sit next to the pointer, so sifting compares without touching the
// keyStates.
// lifecycles keeps two: the waiting phase ranked by due time (heap, slot
// inRetries) and, with priorities, the queued phase ranked by
// priorityRank (byPriority, slot inPriority).
type keyHeap[Obj any] struct {
	entries []heapEntry[Obj]
	slot    int
}

// The slots of keyState.pos.
const (
	inRetries = iota
	inPriority
)

type heapEntry[Obj any] struct {
	rank int64
	seq  uint64
	s    *keyState[Obj]
}

// before reports whether a comes out of the heap before b.
func (a heapEntry[Obj]) before(b heapEntry[Obj]) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.seq < b.seq
}

// priorityRank ranks a priority so that the highest comes out first,
// without overflow.
func priorityRank(prio int) int64 { return ^int64(prio) }

func (h *keyHeap[Obj]) move(to int, e heapEntry[Obj]) {
	h.entries[to] = e
	e.s.pos[h.slot] = to
}

// push adds s with rank and seq.
func (h *keyHeap[Obj]) push(s *keyState[Obj], rank int64, seq uint64) {
	h.entries = append(h.entries, heapEntry[Obj]{rank: rank, seq: seq, s: s})
	h.up(len(h.entries) - 1)
}

// remove deletes the entry at position i and returns it. An emptied heap
// gives a burst's memory back.
func (h *keyHeap[Obj]) remove(i int) heapEntry[Obj] {
	e := h.entries[i]
	e.s.pos[h.slot] = -1
	last := len(h.entries) - 1
	if i != last {
		h.move(i, h.entries[last])
	}
	h.entries[last] = heapEntry[Obj]{}
	h.entries = h.entries[:last]
	switch {
	case last == 0 && cap(h.entries) > shrinkAbove:
		h.entries = nil
	case i != last:
		h.fix(i)
	}
	return e
}

// rerank gives the entry at position i rank and restores the order.
func (h *keyHeap[Obj]) rerank(i int, rank int64) {
	h.entries[i].rank = rank
	h.fix(i)
}

func (h *keyHeap[Obj]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *keyHeap[Obj]) up(i int) {
	e := h.entries[i]
	for i > 0 {
		parent := (i - 1) / 2
		if !e.before(h.entries[parent]) {
			break
		}
		h.move(i, h.entries[parent])
		i = parent
	}
	h.move(i, e)
}

// down sifts the entry at i towards the leaves and reports whether it moved.
func (h *keyHeap[Obj]) down(i int) bool {
	start, e, n := i, h.entries[i], len(h.entries)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && h.entries[r].before(h.entries[child]) {
			child = r
		}
		if !h.entries[child].before(e) {
			break
		}
		h.move(i, h.entries[child])
		i = child
	}
	h.move(i, e)
	return i != start
}

// stillAsked returns t, which takes the place of old, a task never
// applied, with old's request: t's work is done only once old's is too, so
// progress waits for the earlier of the two changes that asked.
func stillAsked[Obj any](old, t task[Obj]) task[Obj] {
	if old.asked != 0 && old.asked < t.asked {
		t.asked = old.asked
	}
	return t
}
