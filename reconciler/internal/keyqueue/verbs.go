package keyqueue

import "time"

// The verbs: what the queue's owner calls to change it, as workqueue's
// Add, Get and Done (see the package doc).

// Change is what the caller observed of a key, for Add: a change read
// from the table, or what a commit or a prune found there. As says which;
// the other fields count only for the kinds their comments name.
type Change[Obj any] struct {
	// Key is the key, for every kind but Pruned: with As Backlogged only
	// if Keyed; with As Seen and WrittenBack as RawKey, the bytes the
	// primary index gives, so that no string is made for them.
	Key    string
	RawKey []byte
	Task   Task[Obj]
	As     Kind
	// With As Backlogged: whether Key is set. While no key is tracked the
	// caller need not work it out: no retry of it can wait.
	Keyed bool
	// With As Failed: the identity of the Error status found (0: none),
	// its error, and when it was found.
	ErrID uint64
	Err   error
	Now   time.Time
	// With As Seen of a delete (Task.Delete), and As WrittenBack: every
	// status of the key up to the identity Cut is stale (see Stale).
	Cut uint64
	// With As Pruned: whether obj is missing from the prune's snapshot.
	Absent func(obj Obj) bool
}

// Kind is what a Change reports: how a change read joins the queue (the
// first five), or what else was found of a key.
type Kind uint8

const (
	// Fresh starts the change now, or parks it behind the version of its
	// key running (or in its place in the queue): Add returns the State
	// started, if any.
	Fresh Kind = iota
	// Queued leaves the change in the queue, for Get to take by priority
	// (with Configure): a key gone or waiting joins the back of the
	// queue, one queued keeps its place with the newer change's priority.
	Queued
	// Failed records an Error status this reconciler did not just write,
	// found on the key's object (written back, or there at start; the
	// task applies it again): it is retried at Now, unless the State
	// knows that status already. While a version of the key runs, it is
	// a change like any other.
	Failed
	// Backlogged defers the change behind fresh ones (see Take, Backlog):
	// only the task's Obj, Rev and Asked are kept. A retry of the key,
	// known if Keyed, is dropped: a newer version waits in the backlog.
	Backlogged
	// Same is the version the key's State holds (queued, or just taken
	// by Get), found by the caller at a newer revision: only another
	// reconciler's status, or this one's Error status, changed since. The
	// task follows it to the task's Obj and Rev; nothing else changes.
	Same
	// Seen is a change of RawKey read that asks for work (a new version,
	// a Refreshing mark) or a delete, told before the caller acts on it,
	// whatever it does next: the re-check asked for the key, if any, is
	// dropped (the change replaces it), and after a delete every status
	// up to Cut, the last identity handed out, is stale for the key. A
	// change that is no delete need not be told while no re-check is
	// asked for (Figures.Rechecks).
	Seen
	// WrittenBack is the object of RawKey found by a commit written back
	// with a status older than the version it applied: every status up
	// to Cut, just below the identity of the status that asked for that
	// version, is stale for the key.
	WrittenBack
	// Pruned is a prune that ran: every running update whose object
	// Absent says is missing from the prune's snapshot may see what it
	// applies undone (see the invariants). Key is not read.
	Pruned
)

// Add records c, what the caller observed of a key, as workqueue's Add
// adds an item: a new version of it (with a Pending or Refreshing status,
// or an Error one: As Failed), its delete, or the version held found
// again (As Same); or what a change, a commit or a prune tells of the
// statuses of a key and of the versions running (As Seen, WrittenBack,
// Pruned). It returns the State of the key started (running), to hand to
// the executor now, or nil: only a Fresh change starts one.
func (q *Queue[Obj]) Add(c Change[Obj]) *State[Obj] {
	switch c.As {
	case Queued:
		q.enqueueChange(c.Key, c.Task)
	case Failed:
		q.adopt(c.Key, c.Task, c.ErrID, c.Err, c.Now)
	case Same:
		if s, ok := q.byKey[c.Key]; ok {
			q.retarget(s, c.Task.Obj, c.Task.Rev)
		}
	case Backlogged:
		q.deferred.push(c.Task.Obj, c.Task.Rev, c.Task.Asked)
		if c.Keyed {
			q.dropRetry(c.Key)
		}
	case Seen:
		q.rechecks.drop(c.RawKey)
		if c.Task.Delete {
			q.cuts.supersede(c.RawKey, c.Cut)
		}
	case WrittenBack:
		q.cuts.supersede(c.RawKey, c.Cut)
	case Pruned:
		q.markPruned(c.Absent)
	default:
		return q.observe(c.Key, c.Task)
	}
	return nil
}

// From says which work Get takes.
type From uint8

const (
	// FromQueue takes up to n queued States, oldest first, or with
	// priorities a share of them oldest first and the rest highest
	// priority first (see takeByPriority).
	FromQueue From = iota
	// Oldest takes the State queued first, Newest the one queued last,
	// whatever their priority: the circuit breaker's probes take keys in
	// turn.
	Oldest
	Newest
	// Due takes up to n waiting States due at now (Unix ns), earliest
	// first, for another attempt.
	Due
)

// Get takes work from where from says and returns it started (running),
// to hand to the executor, as workqueue's Get hands out an item. One the
// caller finds no longer current is dropped with Done (Outcome.Forget).
// The slice is valid until the next Get.
func (q *Queue[Obj]) Get(from From, n int, now int64) []*State[Obj] {
	switch from {
	case Oldest:
		return q.takeOldest()
	case Newest:
		return q.takeNewest()
	case Due:
		due := q.dueBuf[:0]
		for len(due) < n {
			s, ok := q.popDue(now)
			if !ok {
				break
			}
			due = append(due, s)
		}
		clear(due[len(due):cap(due)]) // let go of what an earlier Get took
		q.dueBuf = due
		return due
	}
	return q.takeQueued(n)
}

// Kept says which of what the queue keeps beside the keys' States Take
// hands out.
type Kept uint8

const (
	// Backlog takes up to n changes deferred (As Backlogged), oldest
	// first: each task holds the Obj, Rev and Asked it was deferred with.
	Backlog Kept = iota
	// Rechecks takes up to n re-checks due at now (Unix ns, see
	// Outcome.RecheckAt), earliest first: each task holds the object as
	// written (Obj) and the identity of the Done status written with it
	// (StatusID).
	Rechecks
)

// Take removes up to n entries of what kept names and appends them to dst
// as tasks, for the caller to look up in the table: a deferred change is
// applied as its object now is, if that still asks for work, and a
// re-check marks its object Refreshing if it still carries the status it
// was asked with. Unlike what Get hands out, nothing is started, and no
// Done is owed.
func (q *Queue[Obj]) Take(kept Kept, n int, now int64, dst []Task[Obj]) []Task[Obj] {
	if kept == Rechecks {
		return q.rechecks.takeDue(now, n, dst)
	}
	for ; n > 0 && q.deferred.size > 0; n-- {
		d := q.deferred.pop()
		dst = append(dst, Task[Obj]{Obj: d.obj, Rev: d.rev, Asked: d.asked})
	}
	return dst
}

// Outcome is what became of a task handed out: whether its operation ran,
// and what the commit that followed did.
type Outcome[Obj any] struct {
	// Forget says the task is no longer what the table asks for (found so
	// by the caller before it ran, see Get): the key is dropped, and the
	// other fields do not count.
	Forget bool
	// Ran is false for a task that never started (the gate closed, or the
	// loop stopped and it is carried over to the next start): it goes back
	// to the queue, and the other fields do not count.
	Ran bool
	// Err is the operation's error, nil on success.
	Err error
	// Settled says that no retry is needed: success, or a terminal error
	// of an update.
	Settled bool
	// Written says that the status was written (always true for a
	// delete). Without it the object changed meanwhile, and its change
	// brings its own work.
	Written bool
	// Spared marks a failure that counts no attempt (one the circuit
	// breaker spared); a first failure always counts.
	Spared bool
	// Over says that the status was written over a changed object that
	// carries the version applied: the successor read since is older
	// than what the table holds, and is dropped.
	Over bool
	// RetryAt is when the next attempt of a failure is due (Unix ns),
	// and ErrID the identity of the Error status written for a failed
	// update (0 if none).
	RetryAt int64
	ErrID   uint64
	// RecheckAt (Unix ns), if not 0, asks for a re-check of a successful
	// update (RecheckAfter): Updated is the object as written, with the
	// Done status UpdatedID. A later one replaces it (see Take, Rechecks).
	RecheckAt int64
	Updated   Obj
	UpdatedID uint64
}

// Done records the outcome of a task handed out as s, as workqueue's
// Done ends the processing of an item, and the next verb for its key
// follows from it: forgotten (done, terminal, or the object changed),
// waiting for a retry, queued again (never started, or a successor
// waits), all as the state diagram says.
//
// s is nil for a task the inline executor ran without a State (see the
// package doc): key and t then name it, and a State is made for it if the
// outcome needs one (see track). A settled outcome of such a task needs
// none, so the caller may leave Done uncalled for it, and need not work
// out its key, unless it asks for a re-check. key and t are not read when
// s is not nil, but for a re-check's key.
func (q *Queue[Obj]) Done(s *State[Obj], key string, t Task[Obj], o Outcome[Obj], now time.Time) {
	if o.Forget {
		q.forget(s)
		return
	}
	if o.RecheckAt != 0 {
		if s != nil {
			key = s.key
		}
		q.rechecks.ask(key, o.Updated, o.UpdatedID, o.RecheckAt)
	}
	if s == nil {
		if o.Ran && o.Settled {
			return // untracked and done: nothing to remember
		}
		s = q.track(key, t)
	}
	if !o.Ran {
		q.requeue(s)
		return
	}
	if o.Over {
		q.dropNext(s) // older than what the table holds
	}
	q.settle(s, o.Err, o.Settled, o.Written, !o.Spared, o.RetryAt, o.ErrID, now)
}

// Settings are the queue's settings, for Configure.
type Settings[Obj any] struct {
	// Priority, if not nil, turns priorities on: it gives an object's,
	// Share the part of each take kept for arrival order. Set it before
	// any key is queued.
	Priority func(Obj) int
	Share    float64
	// FailureChanged, if not nil, is told of each change of a key's
	// failure, for the retries table: a failure recorded, its retry taken,
	// requeued or waiting again, with the key's State; or its end (a
	// success, a terminal error, a newer version, the key dropped), with
	// nil. It is called from within the verbs, and must not call the
	// queue.
	FailureChanged func(key string, s *State[Obj])
}

// Configure applies the settings s sets; those it leaves zero are kept.
func (q *Queue[Obj]) Configure(s Settings[Obj]) {
	if s.Priority != nil {
		q.setPriority(s.Priority, s.Share)
	}
	if s.FailureChanged != nil {
		q.failureChanged = s.FailureChanged
	}
}
