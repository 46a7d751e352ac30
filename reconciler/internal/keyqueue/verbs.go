package keyqueue

import "time"

// The verbs: what the queue's owner calls to change it, as workqueue's
// Add, Get and Done (see the package doc).

// Change is a change of a key read from the table, for Add.
type Change[Obj any] struct {
	Key  string // the key; with As Backlogged, only if Keyed
	Task Task[Obj]
	As   Arrival
	// With As Backlogged: whether Key is set. While no key is tracked the
	// caller need not work it out: no retry of it can wait.
	Keyed bool
	// With As Failed: the identity of the Error status found (0: none),
	// its error, and when it was found.
	ErrID uint64
	Err   error
	Now   time.Time
}

// Arrival is how a change read joins the queue.
type Arrival uint8

const (
	// Fresh starts the change now, or parks it behind the version of its
	// key running (or in its place in the queue): Add returns the State
	// started, if any.
	Fresh Arrival = iota
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
	// Backlogged defers the change behind fresh ones (see Undefer): only
	// the task's Obj, Rev and Asked are kept. A retry of the key, known
	// if Keyed, is dropped: a newer version waits in the backlog.
	Backlogged
	// Same is the version the key's State holds (queued, or just taken
	// by Get), found by the caller at a newer revision: only another
	// reconciler's status, or this one's Error status, changed since. The
	// task follows it to the task's Obj and Rev; nothing else changes.
	Same
)

// Add records c, a change read from the table, as workqueue's Add adds an
// item: a new version of its key (with a Pending or Refreshing status, or
// an Error one: As Failed), its delete, or the version held found again
// (As Same). It returns the State of the key started (running), to hand to
// the executor now, or nil.
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
	// Done status UpdatedID. A later one replaces it (see TakeRechecks).
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
	// TrackOutdated makes TakeOutdated report which keys' failures
	// changed, for the retries table.
	TrackOutdated bool
}

// Configure applies the settings s sets; those it leaves zero are kept.
func (q *Queue[Obj]) Configure(s Settings[Obj]) {
	if s.Priority != nil {
		q.setPriority(s.Priority, s.Share)
	}
	if s.TrackOutdated {
		q.trackOutdated()
	}
}
