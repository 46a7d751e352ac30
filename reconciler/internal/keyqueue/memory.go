package keyqueue

// The verbs of the queue's other memory about keys: the changes deferred
// behind fresh ones, the re-checks asked for and the cuts of the
// stale-status rule.

// Defer defers a change of obj, read at revision rev and standing for the
// writes from asked on, behind fresh changes (see Undefer). key names its
// key if keyed (the caller may leave it unknown while no key is tracked):
// a retry of it is dropped, a newer version now waiting in the backlog.
func (q *Queue[Obj]) Defer(obj Obj, rev, asked uint64, key string, keyed bool) {
	q.deferred.push(obj, rev, asked)
	if keyed {
		q.dropRetry(key)
	}
}

// Undefer takes the oldest deferred change, if any.
func (q *Queue[Obj]) Undefer() (Deferred[Obj], bool) {
	if q.deferred.size == 0 {
		return Deferred[Obj]{}, false
	}
	return q.deferred.pop(), true
}

// Seen records that a change of key was read, a delete if deleted: the
// re-check asked for key, if any, is dropped (the change replaces it),
// and after a delete every status handed out so far, up to the identity
// last, is stale for the key (see Stale).
func (q *Queue[Obj]) Seen(key []byte, deleted bool, last uint64) {
	q.rechecks.drop(key)
	if deleted {
		q.cuts.sawDelete(key, last)
	}
}

// SawOlder records that a commit found the object of key written back
// with a status older than statusID, the identity of the status that
// asked for the version applied: every status before statusID is stale
// for the key (see Stale).
func (q *Queue[Obj]) SawOlder(key []byte, statusID uint64) { q.cuts.sawOlder(key, statusID) }

// Recheck records a re-check of key, whose object obj was written with
// the Done status statusID, due at due (Unix ns). A later one replaces it.
func (q *Queue[Obj]) Recheck(key string, obj Obj, statusID uint64, due int64) {
	q.rechecks.ask(key, obj, statusID, due)
}

// TakeRechecks removes the re-checks due at now (Unix ns) and hands each
// to due.
func (q *Queue[Obj]) TakeRechecks(now int64, due func(obj Obj, statusID uint64)) {
	q.rechecks.takeDue(now, due)
}
