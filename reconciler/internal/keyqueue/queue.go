// Package keyqueue is the reconciler's key queue: what is known about each
// primary key (the version in flight, the newer version parked behind it,
// the retry with its attempts and due time, the priority rank) and the
// order in which work is handed out (fresh first, the deferred backlog,
// priorities and their share). It is modelled on client-go's workqueue:
// one owner, changes and outcomes in, work out through a few verbs. It
// imports no StateDB, starts no goroutine and reads no clock: times are
// passed in (Unix ns, or a time.Time where one is recorded). It is not
// safe for concurrent use: the reconcile loop's goroutine owns it.
//
// # Verbs and queries
//
// What the rest of the reconciler calls, five verbs and five queries, by
// what each does:
//
//	Add        what was observed of a key, a Change of one Kind: a change
//	           read and how it joins (Fresh: start now, or park behind the
//	           version running; Queued: queue, with priorities; Failed: an
//	           Error status found; Backlogged: deferred behind fresh
//	           changes; Same: the version held, found at a newer
//	           revision); what else a change read tells (Seen: its
//	           re-check is replaced, a delete cuts its statuses); a status
//	           found written back over a newer one (WrittenBack); a prune
//	           that ran (Pruned)
//	Get        work handed out started, to be ended by Done: what is
//	           queued (FromQueue, by priority with Configure; Oldest or
//	           Newest, the breaker's probes) or due for a retry (Due)
//	Take       what waits to be looked up in the table, handed out with
//	           no Done owed: the changes deferred (Backlog), the re-checks
//	           due (Rechecks)
//	Done       what became of a task handed out (run, never started, or
//	           no longer current: Outcome.Forget), and the re-check a
//	           success asked for
//	Configure  priorities, and who is told of the failures that change
//	           (the retries table)
//
//	Figures    counts and next due times, O(1)
//	Lows       the low watermarks, once a round
//	Stale      whether a status is older than what is known of its key
//	           (it remembers one thing: see there)
//	Errors     the errors of failing keys, for health
//	View       a copy of one State's record, its recent errors with it
//	           (View.History, see history.go)
//
// Beside each key's State, the queue holds the other memory about keys
// the loop needs: the backlog of changes deferred behind fresh ones, the
// re-checks of RecheckAfter, and the cuts behind the stale-status rule
// (see Stale).
//
// # The life of one key
//
// The work the reconciler holds for one primary key lives in one State,
// and every change of a State, its position in the retry heap included,
// is made in this package, by a method of Queue or of the heap. A key
// with no State needs nothing from the reconciler (its next change, if
// any, is still in the change iterator or the backlog); what makes a
// status of it stale is kept by the cuts, and by the reconciler's prune
// snapshots.
//
//	                      taken
//	    queued ─────────────────────────────► running
//	(not yet in the           ▲             (in the executor: waiting for
//	 executor)                │ due          the gate, or under way; a
//	    ▲                     │              change read meanwhile becomes
//	    │                  waiting           its successor, next)
//	    │               (retry heap)                   │
//	    │                     ▲                        │ Done, after
//	    │                     └────── failed ──────────┤ its commit
//	    └───────────────── successor, if any ──────────┤
//	                                                   └─► gone: done,
//	                                                       terminal, or the
//	                                                       object changed
//
// Every state and the verbs that move a key between them (the internal
// steps in parentheses):
//
//	gone    → running  Add: a change read (add, start); Done of an
//	                   untracked task of the inline executor that failed
//	                   or never started (track), then as from running
//	gone    → queued   Add, Queued: a change read, with priorities
//	gone    → waiting  Add, Failed: an Error status no retry is for
//	queued  → queued   Add: a newer change replaces the task
//	queued  → running  Get; Get Oldest or Newest, a probe of the circuit
//	                   breaker (start)
//	queued  → gone     Done, Forget: the task is no longer what the table
//	                   asks
//	running → running  Add: the successor recorded (follow);
//	                   Done with Over drops it (dropNext); Add, Pruned: a
//	                   prune ran with the object absent (markPruned)
//	running → queued   Done with a successor (settle), or never started
//	                   (requeue)
//	running → waiting  Done: failed, due after its backoff (settle)
//	running → gone     Done: done, terminal, or the object changed; Done,
//	                   Forget: no longer current when it was taken
//	waiting → running  Add: a newer change (replace, start); Get Due:
//	                   the retry is due (attempt, start)
//	waiting → queued   Add, Queued: a newer change
//	waiting → gone     Done Forget, Add Backlogged (dropRetry): a newer
//	                   version overtook it
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
//     written only if the object is still exactly that revision
//     (View.Superseded).
//   - A prune that runs while a version runs with its object absent may
//     undo what it applies (pruned): the same rule holds.
//   - An operation starts only through the reconciler's gate, asked at the
//     moment it starts; the queue only says what may start.
//   - A retry is a State in the waiting phase; a newer change of its key
//     replaces it.
//   - An object put back with a status older than what the reconciler
//     knows of its key (a delete read since, or a newer version it holds or
//     applied; see Stale and the reconciler's staleness) is new work,
//     although its status (Done, say, on a value read earlier) asks for
//     none: that status speaks of a target that has changed since.
//
// The queued phase is Queue.queued, in the order the keys arrived there.
// With priorities (Configure) every queued State is in Queue.byPriority
// too, highest first, and Get takes from both: a share of each round in
// arrival order, the rest by priority (see takeByPriority). Fresh changes
// then wait in the queued phase (Add, Queued), so that the loop can choose
// among them, rather than starting as they are read.
//
// With one worker and no priorities, the loop skips the State of a fresh
// change when no key has one (Figures().Tracked is false, the common
// case): the change is applied and committed in the same round, so there
// is nothing to remember unless it fails or the round is cut short, and
// then Done creates it (see track). A delete recovered at the start is not
// skipped, nor is any change while changes are deferred: a later change of
// the key, or a deferred one, may be taken in the same round.
package keyqueue

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// State is what the queue knows about one key: its record. Only the
// queue's verbs change it; the rest of the reconciler reads it through
// its methods (see queries.go).
type State[Obj any] struct {
	key   string
	phase phase

	task    Task[Obj] // queued or waiting: to apply next; running: being applied
	next    Task[Obj] // running: the successor, if hasNext
	hasNext bool

	// Failures of task: attempts so far, the last error, when the first
	// happened, when the next attempt is due (Unix ns, saturated), and the
	// identity of the Error status written for it (0 if none).
	attempts int
	err      error
	first    time.Time
	due      int64
	errID    uint64
	hist     *errorHistory // the recent errors of task, if it failed (see history.go)

	deleteSeen bool // running: a delete of the key was read since task started
	pruned     bool // running: a prune ran with task's object absent

	active   int    // position in Queue.active while queued or running, else -1
	pos      [2]int // in Queue.heap while waiting (pos[inRetries]) and byPriority while queued (pos[inPriority]), else -1
	queuedAt uint64 // with priorities, taken by Get: the seq it was queued with, which a requeue keeps (see enqueueAt); else 0
}

type phase uint8

const (
	phaseQueued phase = iota + 1
	phaseRunning
	phaseWaiting
)

// Task is one version of one object to apply, or one deleted object.
type Task[Obj any] struct {
	Obj      Obj
	Rev      uint64    // the object's revision, to apply and compare-and-swap
	Asked    uint64    // the revision of the change that asked for it, for progress; retarget keeps it
	StatusID uint64    // identity of the status that asked for it; 0 for a delete
	Since    time.Time // when that status was written (a delete: when read)
	Ready    int64     // when it became ready to run (Unix ns), for queue waits
	// With priorities: the rank of obj's priority, read once per version
	// (see Queue.rank), once ranked. (ranked sits with the other flags:
	// a Task is copied into every op of a round, and padding costs.)
	rank    int64
	Delete  bool
	Refresh bool // asked for by a Refreshing status
	ranked  bool
}

// Queue is the set of States of one reconciler. It lives as long
// as the reconciler, across stops and starts of its loop, and is owned by
// the loop's goroutine.
type Queue[Obj any] struct {
	byKey  map[string]*State[Obj]
	queued []*State[Obj] // FIFO of the queued phase, in arrival order
	active []*State[Obj] // queued and running, for progress and reports
	heap   keyHeap[Obj]  // the waiting phase, by due time

	seq  uint64 // insertion order of the heap
	peak int    // the most keys byKey held since it was last made anew

	// The revisions asked and the times since of the waiting States,
	// for the lowest and earliest of them (see waitingEntry).
	lows, sinces minHeap[waitingEntry[Obj]]
	retrying     int    // States with a failed attempt: waiting, or queued or running again
	parked       int    // running States with a successor
	version      uint64 // changes whenever the failing keys or their errors do

	// With WithPriority (priority not nil): the priority of an object, the
	// share of each take kept for arrival order, the queued States by
	// priority, and the arrival slots owed, a fraction of one (see
	// takeQueued). Nil and zero without.
	priority   func(Obj) int
	share      float64
	byPriority keyHeap[Obj]
	credit     float64

	// failureChanged is told of each change of a key's failure (see
	// Settings.FailureChanged); nil: nobody asked.
	failureChanged func(key string, s *State[Obj])

	display func(key string) string // for Errors; nil: as is

	// The other memory about keys: the changes deferred behind fresh ones
	// (Add, Backlogged; Take, Backlog), the re-checks asked for (Done,
	// Outcome.RecheckAt; Take, Rechecks) and the cuts behind the
	// stale-status rule (Add, Seen and WrittenBack; see Stale).
	deferred backlogRing[Obj]
	rechecks recheckHeap[Obj]
	cuts     staleCuts

	dueBuf []*State[Obj] // Get's buffer of retries due
}

// New returns an empty queue. display renders a key for the errors
// Errors returns (nil: as it is).
func New[Obj any](display func(key string) string) *Queue[Obj] {
	return &Queue[Obj]{byKey: map[string]*State[Obj]{}, display: display}
}

// observe records a change read from the table: t, a new version of key
// (with a Pending or Refreshing status) or its delete. It returns the
// State of key started (running), to hand to the executor now, or nil if
// the change waits behind a running version (or is already queued).
func (q *Queue[Obj]) observe(key string, t Task[Obj]) *State[Obj] {
	s, ok := q.byKey[key]
	if !ok {
		s = q.add(key, t)
		q.start(s)
		return s
	}
	switch s.phase {
	case phaseRunning:
		q.follow(s, t)
		return nil
	case phaseWaiting:
		q.unwait(s)
		q.replace(s, t)
		s.phase = phaseQueued
		q.activate(s)
		q.start(s)
		return s
	default: // queued: the newer change takes its place in the queue
		q.replace(s, sameRank(s.task, stillAsked(s.task, t)))
		q.reprioritize(s)
		return nil
	}
}

// enqueueChange records a change read from the table as observe does, but leaves
// it in the queue rather than returning it to start: with priorities,
// Get chooses what starts. A key gone or waiting joins the back of
// the queue; one queued keeps its place, with the newer change's priority.
func (q *Queue[Obj]) enqueueChange(key string, t Task[Obj]) {
	s, ok := q.byKey[key]
	if !ok {
		s = &State[Obj]{key: key, task: t, pos: [2]int{-1, -1}, active: -1}
		q.byKey[key] = s
		q.peak = max(q.peak, len(q.byKey))
		q.enqueue(s)
		return
	}
	switch s.phase {
	case phaseRunning:
		q.follow(s, t)
	case phaseWaiting:
		q.replace(s, t)
		q.enqueue(s)
	default:
		q.replace(s, sameRank(s.task, stillAsked(s.task, t)))
		q.reprioritize(s)
	}
}

// sameRank returns t, which replaces old, with old's rank if it is the
// same version of the object: the same revision read again (a deferred
// change looks its object up), or the same status identity (another
// reconciler's status written since).
func sameRank[Obj any](old, t Task[Obj]) Task[Obj] {
	same := old.Rev == t.Rev || (t.StatusID != 0 && t.StatusID == old.StatusID)
	if old.ranked && !t.ranked && same && old.Delete == t.Delete {
		t.rank, t.ranked = old.rank, true
	}
	return t
}

// setPriority turns priorities on: priority gives an object's, share the
// part of each take kept for arrival order. It is called before any key is
// queued.
func (q *Queue[Obj]) setPriority(priority func(Obj) int, share float64) {
	q.priority, q.share = priority, share
	q.byPriority.slot = inPriority
}

// reprioritize gives s, queued, the priority of its task, keeping its
// place in arrival order.
func (q *Queue[Obj]) reprioritize(s *State[Obj]) {
	if s.pos[inPriority] >= 0 {
		q.byPriority.rerank(s.pos[inPriority], q.rank(&s.task))
	}
}

// rank returns the rank of t's priority, reading it only the first time
// t, one version of an object, is ranked: a version requeued (held by the
// circuit breaker, cut short by Pause or a stop) keeps its rank.
func (q *Queue[Obj]) rank(t *Task[Obj]) int64 {
	if !t.ranked {
		t.rank, t.ranked = priorityRank(q.priority(t.Obj)), true
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
func (q *Queue[Obj]) follow(s *State[Obj], t Task[Obj]) {
	switch {
	case t.Delete:
		q.setNext(s, t, true)
		s.deleteSeen = true
	case !s.deleteSeen && !s.pruned && !s.task.Delete && (t.Rev == s.task.Rev || (t.StatusID != 0 && t.StatusID == s.task.StatusID)):
		q.setNext(s, Task[Obj]{}, false)
		s.task = stillAsked(t, s.task) // one request: progress waits for the earlier ask
	default:
		q.setNext(s, t, true)
	}
}

// adopt records an Error status this reconciler did not just write, found
// on key's object (written back, or there at start; t applies it again):
// it is retried at now, unless the State knows that status already.
// While a version of the key runs, it is a change like any other (follow).
func (q *Queue[Obj]) adopt(key string, t Task[Obj], errID uint64, err error, now time.Time) {
	s, ok := q.byKey[key]
	if ok && s.phase == phaseRunning {
		q.follow(s, t)
		return
	}
	if ok && errID != 0 && s.errID == errID {
		return // known: a status without identity never is
	}
	if !ok {
		s = &State[Obj]{key: key, pos: [2]int{-1, -1}, active: -1}
		q.byKey[key] = s
		q.peak = max(q.peak, len(q.byKey))
	} else if s.phase == phaseWaiting {
		q.unwait(s)
	} else {
		q.deactivate(s)
		q.unqueue(s)
		t = stillAsked(s.task, t)
	}
	q.replace(s, t)
	s.attempts, s.err, s.first, s.errID = 1, err, t.Since, errID
	s.recordError(err, t.Since, 1)
	q.retrying++
	q.wait(s, now.UnixNano())
}

// takeQueued takes up to n queued States, oldest first, and returns them
// started, to hand to the executor. With priorities it takes them highest
// priority first (see takeByPriority).
func (q *Queue[Obj]) takeQueued(n int) []*State[Obj] {
	if q.priority != nil {
		return q.started(q.takeByPriority(n))
	}
	n = min(n, len(q.queued))
	taken := q.queued[:n:n]
	q.queued = q.queued[n:]
	if len(q.queued) == 0 {
		q.queued = nil
	}
	return q.started(taken)
}

// started starts the States taken, and returns them.
func (q *Queue[Obj]) started(taken []*State[Obj]) []*State[Obj] {
	for _, s := range taken {
		q.start(s)
	}
	return taken
}

// takeByPriority returns up to n queued States: a share of n (q.share)
// oldest first, whatever their priority, and the rest highest priority
// first, in arrival order within one priority. The share is counted over
// successive takes, so that a take of one key in every 1/share is an
// arrival-order one: the k oldest keys are all taken once the shares of
// the takes since they were queued add up to k, whatever is queued after
// them. The result is in priority order, first queued first within one
// priority.
func (q *Queue[Obj]) takeByPriority(n int) []*State[Obj] {
	n = min(n, len(q.queued))
	if n <= 0 {
		return nil
	}
	if n == len(q.queued) {
		// All of them: by priority, and no share is owed.
		taken := make([]*State[Obj], 0, n)
		for len(q.byPriority.entries) > 0 {
			taken = append(taken, q.byPriority.remove(0).s)
		}
		q.queued = nil
		return taken
	}
	q.credit += q.share * float64(n)
	oldest := min(int(q.credit), n)
	q.credit -= float64(oldest)
	entries := make([]heapEntry[Obj], 0, n)
	for _, s := range q.queued[:oldest] {
		entries = append(entries, q.byPriority.remove(s.pos[inPriority]))
	}
	for len(entries) < n {
		entries = append(entries, q.byPriority.remove(0))
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
	taken := make([]*State[Obj], len(entries))
	for i, e := range entries {
		taken[i] = e.s
	}
	kept := q.queued[:0]
	for _, s := range q.queued[oldest:] {
		if s.pos[inPriority] >= 0 {
			kept = append(kept, s)
		}
	}
	clear(q.queued[len(kept):])
	switch {
	case len(kept) == 0:
		q.queued = nil
	case cap(kept) > shrinkAbove && len(kept) < cap(kept)/4:
		q.queued = append([]*State[Obj](nil), kept...) // give a burst's memory back
	default:
		q.queued = kept
	}
	return taken
}

// takeOldest takes the State queued first, whatever its priority, and
// takeNewest the one queued last, started as takeQueued does: the circuit
// breaker's probes take keys in turn, not by priority.
func (q *Queue[Obj]) takeOldest() []*State[Obj] { return q.started(q.takeAt(0)) }
func (q *Queue[Obj]) takeNewest() []*State[Obj] { return q.started(q.takeAt(len(q.queued) - 1)) }

func (q *Queue[Obj]) takeAt(i int) []*State[Obj] {
	if i < 0 || i >= len(q.queued) {
		return nil
	}
	s := q.queued[i]
	if q.priority != nil {
		q.byPriority.remove(s.pos[inPriority])
	}
	// A probe keeps no turn: held or failed, it goes to the back of the
	// queue, so that the probes get to every key in turn (see enqueueAt).
	s.queuedAt = 0
	q.queued = append(q.queued[:i], q.queued[i+1:]...)
	if len(q.queued) == 0 {
		q.queued = nil
	}
	return []*State[Obj]{s}
}

// popDue takes the waiting State due first, if it is due at now (Unix
// ns), and starts it for another attempt (see attempt).
func (q *Queue[Obj]) popDue(now int64) (*State[Obj], bool) {
	if len(q.heap.entries) == 0 || q.heap.entries[0].rank > now {
		return nil, false
	}
	s := q.heap.entries[0].s
	q.unwait(s)
	q.attempt(s)
	q.start(s)
	return s, true
}

// attempt readies the task of s, just taken due from the retry heap, for
// another attempt: an update answers the Error status written for it,
// which its commit expects to find in the table.
func (q *Queue[Obj]) attempt(s *State[Obj]) {
	if !s.task.Delete {
		s.task.StatusID = s.errID
	}
	s.task.Ready = s.due
}

// retarget points the task of s at obj, the same version of the object
// found at revision rev: only another reconciler's status, or this one's
// Error status, changed since.
func (q *Queue[Obj]) retarget(s *State[Obj], obj Obj, rev uint64) {
	s.task.Obj, s.task.Rev = obj, rev
}

// start moves s to the running phase: its task is handed to the executor.
// Every verb that hands out work starts what it hands out; one found no
// longer current by the caller is then forgotten (Done, Outcome.Forget).
func (q *Queue[Obj]) start(s *State[Obj]) {
	if s.phase == phaseWaiting {
		q.unwait(s)
	}
	q.activate(s)
	s.phase = phaseRunning
	q.setNext(s, Task[Obj]{}, false)
	s.deleteSeen, s.pruned = false, false
	if s.attempts > 0 {
		q.changed(s) // "running" in the retries table
	}
}

// forget drops s: nothing is left to do for its key.
func (q *Queue[Obj]) forget(s *State[Obj]) {
	if s.phase == phaseWaiting {
		q.unwait(s)
	}
	q.deactivate(s)
	q.setNext(s, Task[Obj]{}, false)
	if s.attempts > 0 {
		q.retrying--
		q.version++
		if q.failureChanged != nil {
			q.failureChanged(s.key, nil)
		}
	}
	s.phase, s.hist = 0, nil
	delete(q.byKey, s.key)
	if q.peak > shrinkAbove && len(q.byKey) < q.peak/4 {
		// A map never shrinks: copy what is left to give back the memory
		// a burst of failures took, at a cost amortised over its deletes.
		// (maps.Clone would keep the size.)
		m := make(map[string]*State[Obj], len(q.byKey))
		for k, v := range q.byKey {
			m[k] = v
		}
		q.byKey, q.peak = m, len(m)
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
// Attempt unless it is not counted (a failure the circuit breaker spared),
// but a first failure always does. A successor supersedes the outcome: it
// is what the object is now, and is queued.
func (q *Queue[Obj]) settle(s *State[Obj], err error, settled, written, counted bool, retryAt int64, errID uint64, now time.Time) {
	switch {
	case s.hasNext:
		next := s.next
		q.replace(s, next)
		q.enqueue(s)
	case settled || !written:
		// Done, terminal, or the object changed: a newer version comes
		// with its own change.
		q.forget(s)
	default:
		if s.attempts == 0 {
			s.first = now
			q.retrying++
			counted = true
		}
		if counted {
			s.attempts++
		}
		s.err, s.errID = err, errID
		s.recordError(err, now, s.attempts)
		q.deactivate(s)
		q.wait(s, retryAt)
	}
}

// requeue puts s back in the queue: its task never started (the gate
// closed, or the loop stopped and it is carried over to the next start).
// The successor, if any, is what the object is now, and takes the task's
// place; a retry keeps its attempts.
func (q *Queue[Obj]) requeue(s *State[Obj]) {
	if s.hasNext {
		next := stillAsked(s.task, s.next)
		q.replace(s, next)
	}
	q.enqueueAt(s, s.queuedAt)
	if s.attempts > 0 {
		q.changed(s)
	}
}

// dropNext forgets the successor of s: the commit found the table holding
// the version s ran, written back after the successor was read.
func (q *Queue[Obj]) dropNext(s *State[Obj]) {
	q.setNext(s, Task[Obj]{}, false)
}

// setNext sets the successor of s, counting those parked. A successor
// that replaces another keeps its request (see stillAsked).
func (q *Queue[Obj]) setNext(s *State[Obj], next Task[Obj], has bool) {
	if has && s.hasNext {
		next = stillAsked(s.next, next)
	}
	switch {
	case has && !s.hasNext:
		q.parked++
	case !has && s.hasNext:
		q.parked--
	}
	s.next, s.hasNext = next, has
}

// dropRetry forgets the retry of key, if it waits for one: a newer
// version of the object was read.
func (q *Queue[Obj]) dropRetry(key string) {
	if s, ok := q.byKey[key]; ok && s.phase == phaseWaiting {
		q.forget(s)
	}
}

// enqueue moves s to the queued phase, at the back of the queue.
func (q *Queue[Obj]) enqueue(s *State[Obj]) { q.enqueueAt(s, 0) }

// enqueueAt is enqueue but, with priorities and seq not 0, puts s back in
// the place it was queued with seq, before those queued since: a requeue
// of work that never started (a round cut by Pause, a stop or the
// breaker) keeps its turn, first read first within a priority.
func (q *Queue[Obj]) enqueueAt(s *State[Obj], seq uint64) {
	if s.phase == phaseWaiting {
		q.unwait(s)
	}
	q.setNext(s, Task[Obj]{}, false)
	s.deleteSeen, s.pruned = false, false
	q.activate(s)
	if s.phase != phaseQueued {
		s.phase = phaseQueued
		if q.priority == nil {
			q.queued = append(q.queued, s)
			return
		}
		if seq == 0 {
			q.seq++
			seq = q.seq
			q.queued = append(q.queued, s)
		} else {
			i, _ := slices.BinarySearchFunc(q.queued, seq, func(e *State[Obj], seq uint64) int { return cmp.Compare(e.queuedAt, seq) })
			q.queued = slices.Insert(q.queued, i, s)
		}
		s.queuedAt = seq
		q.byPriority.push(s, q.rank(&s.task), seq)
	}
}

// track returns the State of key for t, an untracked task of the inline
// executor that failed or never started, in the running phase. A State
// made for an older change of the key earlier in the same commit gives way
// to t.
func (q *Queue[Obj]) track(key string, t Task[Obj]) *State[Obj] {
	s, ok := q.byKey[key]
	if !ok {
		s = &State[Obj]{key: key, pos: [2]int{-1, -1}, active: -1}
		q.byKey[key] = s
		q.peak = max(q.peak, len(q.byKey))
	} else if s.phase == phaseWaiting {
		q.unwait(s)
	} else {
		q.unqueue(s)
	}
	q.replace(s, t)
	s.phase = phaseRunning
	q.activate(s)
	return s
}

// unqueue removes s from the queue, if it is there.
func (q *Queue[Obj]) unqueue(s *State[Obj]) {
	if s.phase != phaseQueued {
		return
	}
	if s.pos[inPriority] >= 0 {
		q.byPriority.remove(s.pos[inPriority])
	}
	for i, e := range q.queued {
		if e == s {
			q.queued = append(q.queued[:i], q.queued[i+1:]...)
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
func (q *Queue[Obj]) holdsNewer(key []byte, statusID uint64) bool {
	s, ok := q.byKey[string(key)]
	switch {
	case !ok || s.task.Delete:
		return false
	case statusID == 0:
		return true
	case s.task.StatusID == 0:
		return statusID != s.errID
	}
	return statusID < s.task.StatusID
}

// markPruned records that a prune ran: every running update whose object
// absent says is missing from the prune's snapshot may see what it
// applies undone (see the invariants).
func (q *Queue[Obj]) markPruned(absent func(obj Obj) bool) {
	for _, s := range q.active {
		if s.phase == phaseRunning && !s.task.Delete && absent(s.task.Obj) {
			s.pruned = true
		}
	}
}

// add creates the State of key, queued with t, and returns it to start.
func (q *Queue[Obj]) add(key string, t Task[Obj]) *State[Obj] {
	s := &State[Obj]{key: key, task: t, phase: phaseQueued, pos: [2]int{-1, -1}, active: -1}
	q.byKey[key] = s
	q.peak = max(q.peak, len(q.byKey))
	q.activate(s)
	return s
}

// replace makes t the task of s, a new version: the failures of the old one
// no longer count.
func (q *Queue[Obj]) replace(s *State[Obj], t Task[Obj]) {
	q.resetFailure(s)
	s.task = t
}

func (q *Queue[Obj]) resetFailure(s *State[Obj]) {
	if s.attempts > 0 {
		q.retrying--
		q.version++
		if q.failureChanged != nil {
			q.failureChanged(s.key, nil)
		}
	}
	s.attempts, s.err, s.first, s.errID, s.hist = 0, nil, time.Time{}, 0, nil
}

// wait puts s in the retry heap, due at due. A retry has no turn in the
// queue: if it is requeued, it goes to the back.
func (q *Queue[Obj]) wait(s *State[Obj], due int64) {
	s.phase, s.due, s.queuedAt = phaseWaiting, due, 0
	q.seq++
	q.heap.push(s, due, q.seq)
	e := waitingEntry[Obj]{s, q.seq}
	q.lows.push(int64(min(s.task.Asked, math.MaxInt64)), e)
	q.lows.compact(len(q.heap.entries), q.stillWaiting)
	if !s.task.Since.IsZero() {
		q.sinces.push(unixNanoSat(s.task.Since), e)
		q.sinces.compact(len(q.heap.entries), q.stillWaiting)
	}
	q.changed(s)
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

// waitingEntry names one wait of a State: it holds while s is in the
// retry heap from that wait (seq), and not after s leaves it, even if s
// waits again.
type waitingEntry[Obj any] struct {
	s   *State[Obj]
	seq uint64
}

func (q *Queue[Obj]) stillWaiting(e waitingEntry[Obj]) bool {
	return e.s.pos[inRetries] >= 0 && q.heap.entries[e.s.pos[inRetries]].seq == e.seq
}

func (q *Queue[Obj]) unwait(s *State[Obj]) {
	if s.pos[inRetries] >= 0 {
		q.heap.remove(s.pos[inRetries])
		if len(q.heap.entries) == 0 {
			q.lows, q.sinces = nil, nil // all stale
		}
	}
	q.changed(s)
}

func (q *Queue[Obj]) activate(s *State[Obj]) {
	if s.active < 0 {
		s.active = len(q.active)
		q.active = append(q.active, s)
	}
}

func (q *Queue[Obj]) deactivate(s *State[Obj]) {
	if i := s.active; i >= 0 {
		last := len(q.active) - 1
		q.active[i] = q.active[last]
		q.active[i].active = i
		q.active[last] = nil
		q.active = q.active[:last]
		s.active = -1
	}
}

// changed notes that the failure of s changed, for health and the retries
// table.
func (q *Queue[Obj]) changed(s *State[Obj]) {
	if s.attempts == 0 {
		return
	}
	q.version++
	if q.failureChanged != nil {
		q.failureChanged(s.key, s)
	}
}

// oldestSince returns the earliest time at which an object still to be
// reconciled (queued, running or waiting for a retry) was asked to be, or
// the zero time.
func (q *Queue[Obj]) oldestSince() time.Time {
	var oldest time.Time
	for _, s := range q.active {
		oldest = earliest(oldest, s.task.Since)
		if s.hasNext {
			oldest = earliest(oldest, s.next.Since)
		}
	}
	if len(q.heap.entries) == 0 {
		return oldest
	}
	if e, ok := q.sinces.min(q.stillWaiting); ok {
		oldest = earliest(oldest, e.s.task.Since)
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
func (q *Queue[Obj]) retryLowWatermark() uint64 {
	var low uint64
	if q.retrying == 0 {
		return 0 // every waiting State has failed
	}
	if e, ok := q.lows.min(q.stillWaiting); ok {
		low = e.s.task.Asked
	}
	for _, s := range q.active {
		if s.attempts > 0 && (low == 0 || s.task.Asked < low) {
			low = s.task.Asked
		}
	}
	return low
}

// keyHeap is a binary min-heap of States ordered by (rank, seq), seq
// breaking ties in insertion order; the first is entries[0]. Each State
// records where it sits (pos[slot]), so that adding, removing and
// re-ranking cost O(log n) and a round never scans the heap; the ordering
// keys sit next to the pointer, so sifting compares without touching the
// States.
// Queue keeps two: the waiting phase ranked by due time (heap, slot
// inRetries) and, with priorities, the queued phase ranked by
// priorityRank (byPriority, slot inPriority).
type keyHeap[Obj any] struct {
	entries []heapEntry[Obj]
	slot    int
}

// The slots of State.pos.
const (
	inRetries = iota
	inPriority
)

type heapEntry[Obj any] struct {
	rank int64
	seq  uint64
	s    *State[Obj]
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
func (h *keyHeap[Obj]) push(s *State[Obj], rank int64, seq uint64) {
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
func stillAsked[Obj any](old, t Task[Obj]) Task[Obj] {
	if old.Asked != 0 && old.Asked < t.Asked {
		t.Asked = old.Asked
	}
	return t
}
