package collect

import (
	"errors"
	"iter"
	"math"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/internal/ident"
	"github.com/converge-go/converge/status"

	"github.com/converge-go/converge/reconciler/internal/changes"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
)

// Collect is the first stage of a round: it returns up to room ops,
// valid until the next Collect or Probe. Queued
// keys come first; fresh changes may take the rest but for an eighth kept
// while retries are due or changes deferred, so that writes cannot starve
// them; due retries and deferred changes share what is left, half each.
// A change deferred, dropped or parked costs no budget. With priorities
// (WithPriority) fresh changes join the queue instead, and the queue is
// taken by priority (see collectByPriority).
func (c *Collector[Obj]) Collect(txn statedb.ReadTxn, now time.Time, room int) []work.Op[Obj] {
	lc := c.cfg.Queue
	c.work = c.work[:0]
	if room <= 0 {
		c.watch = closedChan // look again as soon as there is room
		return nil
	}
	f := lc.Figures()
	retriesDue := f.RetryDue && f.NextDue <= now.UnixNano()
	if f.Prioritized {
		c.collectByPriority(txn, now, room, retriesDue)
	} else {
		c.collectFresh(txn, now, room, retriesDue)
	}
	left := room - len(c.work)
	deferredShare := min(lc.Figures().Deferred, left/2)
	if retriesDue {
		c.collectRetries(txn, now, left-deferredShare)
	}
	if lc.Figures().Deferred > 0 {
		c.collectDeferred(txn, now, room-len(c.work))
	}
	if f := lc.Figures(); f.Queued > 0 || f.Deferred > 0 {
		c.watch = closedChan // more work for the next round
	}
	return c.work
}

// collectFresh takes the queued keys, then fresh changes, up to room but
// for the reserve of retries and deferred changes (see collect).
func (c *Collector[Obj]) collectFresh(txn statedb.ReadTxn, now time.Time, room int, retriesDue bool) {
	lc := c.cfg.Queue
	if lc.Figures().Queued > 0 {
		c.takeQueued(txn, room)
	}
	left := room - len(c.work)
	reserve := 0
	if retriesDue || lc.Figures().Deferred > 0 {
		reserve = c.reserve.take(left)
	}
	if budget := left - reserve; budget > 0 {
		c.collectChanges(txn, c.nextChanges(txn), budget, now)
		c.readDone(txn)
	} else {
		c.watch = closedChan // changes wait for room
	}
}

// collectByPriority reads fresh changes into the queue, until it holds
// readAhead keys, and takes the queue by priority (see
// keyqueue.Queue.Get) up to room but for the reserve of retries and
// deferred changes: an eighth of room while there are any.
func (c *Collector[Obj]) collectByPriority(txn statedb.ReadTxn, now time.Time, room int, retriesDue bool) {
	lc := c.cfg.Queue
	ahead := c.readAhead(room)
	if lc.Figures().Queued < ahead {
		c.queueChanges(txn, c.nextChanges(txn), ahead, now)
		c.readDone(txn)
	} else {
		c.watch = closedChan // changes wait for room in the queue
	}
	budget := room
	if retriesDue || lc.Figures().Deferred > 0 {
		budget -= c.reserve.take(room)
	}
	for len(c.work) < budget && lc.Figures().Queued > 0 {
		c.takeQueued(txn, budget-len(c.work))
	}
}

// readAheadRounds is how many rounds of changes collectByPriority reads
// ahead into the queue, to find the most urgent among them. It bounds the
// memory the queue takes (a keyqueue.State each) and how long a change read waits.
const readAheadRounds = 4

// readAhead returns how many keys collectByPriority keeps queued: enough
// for readAheadRounds rounds of the largest size.
func (c *Collector[Obj]) readAhead(room int) int {
	n := max(room, c.limits.RoundSize)
	if n > math.MaxInt/readAheadRounds {
		return math.MaxInt
	}
	return n * readAheadRounds
}

// nextChanges returns the changes not read yet, as of txn, and sets the
// watch channel; readDone follows the read.
func (c *Collector[Obj]) nextChanges(txn statedb.ReadTxn) iter.Seq2[statedb.Change[Obj], statedb.Revision] {
	var seq iter.Seq2[statedb.Change[Obj], statedb.Revision]
	seq, c.watch = c.changes.Next(txn)
	return seq
}

// readDone notes how far a read of changes got.
func (c *Collector[Obj]) readDone(txn statedb.ReadTxn) {
	c.lastRev = max(c.lastRev, c.changes.Read())
	if len(c.stales.pruned) > 0 {
		c.stales.readUpTo(c.lastRev, c.cfg.Objects.Table.Revision(txn))
	}
}

// takeQueued starts up to n queued keys, dropping those whose task is no
// longer what the table asks for (see current).
func (c *Collector[Obj]) takeQueued(txn statedb.ReadTxn, n int) {
	c.startQueued(txn, c.cfg.Queue.Get(keyqueue.FromQueue, n, 0))
}

// startQueued adds the keys taken from the queue (started) to the round's
// work, forgetting those whose task is no longer what the table asks for
// (see current).
func (c *Collector[Obj]) startQueued(txn statedb.ReadTxn, taken []*keyqueue.State[Obj]) {
	lc := c.cfg.Queue
	for _, s := range taken {
		if c.current(txn, s) {
			c.start(s)
		} else {
			lc.Done(s, "", keyqueue.Task[Obj]{}, keyqueue.Outcome[Obj]{Forget: true}, time.Time{})
		}
	}
}

// Probe returns the one op of a probe round, the circuit breaker
// being open: taken from the fresh changes, the queue, the retries due and
// the deferred changes in turn, starting with the source turn names, so
// that an object failing for a reason of its own is not probed for ever
// while others wait. A probe that fails goes back to the queue.
func (c *Collector[Obj]) Probe(txn statedb.ReadTxn, now time.Time, turn int) []work.Op[Obj] {
	lc := c.cfg.Queue
	c.work = c.work[:0]
	for i := 0; i < 4 && len(c.work) == 0; i++ {
		switch (turn + i) % 4 {
		case 0:
			if !lc.Figures().Prioritized {
				c.collectChanges(txn, c.nextChanges(txn), 1, now)
				c.readDone(txn)
				break
			}
			// With priorities fresh changes join the queue, read ahead as
			// far as in any round, and the probe is the newest of them.
			// This turn reads one change at least: the queue may be full
			// of objects the breaker holds (failing as if the target were
			// down), which every other turn would take again and again
			// (with round size 1, four fill it). It grows by one a probe
			// at most, and holds a key once.
			before := lc.Figures().Queued
			c.queueChanges(txn, c.nextChanges(txn), max(c.readAhead(1), before+1), now)
			c.readDone(txn)
			if lc.Figures().Queued > before {
				c.startQueued(txn, lc.Get(keyqueue.Newest, 1, 0))
			}
		case 1:
			c.startQueued(txn, lc.Get(keyqueue.Oldest, 1, 0)) // in turn, whatever the priority
		case 2:
			if f := lc.Figures(); f.RetryDue && f.NextDue <= now.UnixNano() {
				c.collectRetries(txn, now, 1)
			}
		case 3:
			c.collectDeferred(txn, now, 1)
		}
	}
	return c.work
}

// start adds the job of s, started by the queue, to the round's work.
func (c *Collector[Obj]) start(s *keyqueue.State[Obj]) {
	v := s.View()
	c.work = append(c.work, work.Op[Obj]{Task: v.Task, S: s, Key: v.Key, Attempt: v.Attempts + 1, LastErr: v.Err})
}

// collectChanges reads changes, turning those that need work into ops,
// until budget ops were added or the changes run out. A change stands for
// every write of its key since the last full read (changeFeed.drained), so
// that is where its request begins (task.asked), for progress.
func (c *Collector[Obj]) collectChanges(txn statedb.ReadTxn, changes iter.Seq2[statedb.Change[Obj], statedb.Revision], budget int, now time.Time) {
	added, from := 0, min(c.lastRev, c.changes.Drained())+1
	c.figures = c.cfg.Queue.Figures()
	c.skipQuiet()
	for change, rev := range changes {
		c.lastRev = rev
		ok := c.collectChange(txn, change, rev, min(from, change.Revision), now)
		c.skipQuiet()
		if ok {
			if added++; added >= budget {
				break
			}
		}
	}
	c.changes.PassOverQuiet(nil)
}

// queueChanges reads changes into the queue (see keyqueue.Queued) until
// it holds ahead keys or the changes run out.
func (c *Collector[Obj]) queueChanges(txn statedb.ReadTxn, changes iter.Seq2[statedb.Change[Obj], statedb.Revision], ahead int, now time.Time) {
	from := min(c.lastRev, c.changes.Drained()) + 1
	c.figures = c.cfg.Queue.Figures()
	c.skipQuiet()
	for change, rev := range changes {
		c.lastRev = rev
		c.collectChange(txn, change, rev, min(from, change.Revision), now)
		c.skipQuiet()
		if c.figures.Queued >= ahead {
			break
		}
	}
	c.changes.PassOverQuiet(nil)
}

// collectChange acts on one change, read as of txn and asked for by the
// writes from revision asked on, and reports whether it added an op. It
// reads the queue's figures from c.figures, read again after every
// change to the queue: a read of changes that leaves the queue alone (one
// worker, nothing in flight) reads them once, not once per change.
func (c *Collector[Obj]) collectChange(txn statedb.ReadTxn, change statedb.Change[Obj], rev, asked statedb.Revision, now time.Time) bool {
	lc, f := c.cfg.Queue, &c.figures
	t := keyqueue.Task[Obj]{Obj: change.Object, Rev: change.Revision, Asked: asked, Delete: change.Deleted, Since: now, Ready: now.UnixNano()}
	// A delete recovered when the feed opened comes beside a revision
	// below its own (see changes.Feed). Its key may have been put back since.
	recovered := change.Deleted && rev < change.Revision
	var st status.Status // an upsert's, read once
	if !change.Deleted {
		st = c.cfg.Objects.GetStatus(change.Object)
	}
	if change.Deleted || (f.Rechecks > 0 && st.IsPendingOrRefreshing()) {
		if key, ok := c.cfg.Objects.Primary.ObjectToKey(change.Object); ok {
			// A re-check is replaced by this change; a delete cuts the
			// statuses handed out so far.
			lc.Add(keyqueue.Change[Obj]{As: keyqueue.Seen, RawKey: key, Task: t, Cut: ident.Last()})
			*f = lc.Figures()
		}
	}
	if change.Deleted {
		if recovered {
			if _, _, found := c.cfg.Objects.Lookup(txn, change.Object); found {
				// Put back since: the object put back is newer, and is
				// applied with its own change, or was already as queued
				// work or a retry. The delete after it would undo it.
				return false
			}
		}
	} else if !st.IsPendingOrRefreshing() {
		switch {
		case c.skipsQuiet() && changes.Quiet(st):
			return false // a Done, most often this reconciler's own: nothing to ask
		case c.own.has(rev):
			return false
		case c.stale(change.Object, st):
			// Put back with a status older than what is known of its key:
			// apply it as if Pending (see staleness).
			t.Obj, t.StatusID = c.cfg.Objects.WithStatus(change.Object, status.PendingAt(now)), st.ID()
		case st.Kind == status.KindError && !st.Terminal:
			c.adopt(change.Object, rev, asked, st, now)
			*f = lc.Figures()
			return false
		default:
			return false
		}
	} else {
		t.StatusID, t.Refresh = st.ID(), st.Kind == status.KindRefreshing
		if !st.UpdatedAt.IsZero() {
			t.Since, t.Ready = st.UpdatedAt, st.UpdatedAt.UnixNano()
		}
		if t.Refresh || rev <= c.backlog {
			// A retry of the key is dropped: a newer version waits in the
			// deferred queue.
			ch := keyqueue.Change[Obj]{Task: keyqueue.Task[Obj]{Obj: change.Object, Rev: rev, Asked: asked}, As: keyqueue.Backlogged}
			if f.Tracked {
				ch.Key, ch.Keyed = c.cfg.Objects.KeyOf(change.Object)
			}
			lc.Add(ch)
			*f = lc.Figures()
			return false
		}
	}
	// A recovered delete is tracked: the iterator may hand out a later
	// change of its key in the same read, which must wait behind it. So
	// is every change while changes are deferred: a deferred one of the
	// same key may be taken in the same round (see collectDeferred).
	if c.limits.Concurrency == 1 && !f.Tracked && f.Deferred == 0 && !recovered && !f.Prioritized {
		c.work = append(c.work, work.Op[Obj]{Task: t}) // untracked: see package keyqueue
		return true
	}
	key, ok := c.cfg.Objects.KeyOf(change.Object)
	if !ok {
		c.noKey("a change of the table", change.Object)
		return false
	}
	if f.Prioritized {
		lc.Add(keyqueue.Change[Obj]{Key: key, Task: t, As: keyqueue.Queued}) // collectByPriority takes it
		*f = lc.Figures()
		return false
	}
	s := lc.Add(keyqueue.Change[Obj]{Key: key, Task: t})
	*f = lc.Figures()
	if s != nil {
		c.start(s)
		return true
	}
	return false
}

// skipsQuiet reports whether a change whose status asks for nothing (see
// quiet) is dropped without a look at its key: no key is tracked, no
// version held for one and no prune's cut remembered (see stale). It
// reads the queue's figures from c.figures (see collectChange).
func (c *Collector[Obj]) skipsQuiet() bool {
	f := &c.figures
	return !f.Tracked && !f.Stale && !c.stales.any()
}

// skipQuiet has the feed pass over the changes collectChange would drop
// for being quiet, while skipsQuiet holds, and hand out the others: called
// before a read of changes and after each change handed out, as that may
// change the queue's figures. The read clears it when it ends.
func (c *Collector[Obj]) skipQuiet() {
	switch skip := c.skipsQuiet(); {
	case skip == c.changes.PassingOverQuiet():
		// as it was: most often, every change of a read
	case skip:
		c.changes.PassOverQuiet(c.cfg.Objects.GetStatus)
	default:
		c.changes.PassOverQuiet(nil)
	}
}

// stale reports whether st, a status of obj that asks for no work, is
// older than what is known of obj's key: older than a version held for it
// (see keyqueue.Queue.Stale), or remembered as stale (see staleness). A
// Done without identity (a literal, or decoded: a restore) has no age: it
// may be older than anything known of the key, so it is stale as any
// status would be, but once per delete remembered (see keyqueue.Queue.Stale).
func (c *Collector[Obj]) stale(obj Obj, st status.Status) bool {
	if f := c.cfg.Queue.Figures(); (st.ID() == 0 && st.Kind != status.KindDone) || (!f.Tracked && !f.Stale && !c.stales.any()) {
		return false
	}
	for _, p := range c.stales.pruned {
		if st.ID() <= p.cut {
			if _, _, found := c.cfg.Objects.Lookup(p.txn, obj); !found {
				return true // the prune may have removed it (see pruneSnapshot)
			}
		}
	}
	key, ok := c.cfg.Objects.Primary.ObjectToKey(obj)
	return ok && c.cfg.Queue.Stale(key, st.ID())
}

// adopt hands the key queue an Error status found on obj (see keyqueue.Failed).
func (c *Collector[Obj]) adopt(obj Obj, rev, asked statedb.Revision, st status.Status, now time.Time) {
	key, ok := c.cfg.Objects.KeyOf(obj)
	if !ok {
		c.noKey("an Error status", obj)
		return
	}
	since := st.UpdatedAt
	if since.IsZero() {
		since = now
	}
	t := keyqueue.Task[Obj]{
		Obj:      c.cfg.Objects.WithStatus(obj, status.PendingAt(since)),
		Rev:      rev,
		Asked:    asked,
		StatusID: st.ID(),
		Since:    since,
		Ready:    now.UnixNano(),
	}
	c.cfg.Queue.Add(keyqueue.Change[Obj]{Key: key, Task: t, As: keyqueue.Failed, ErrID: st.ID(), Err: errors.New(st.Error), Now: now})
}

// collectRetries takes retries due at now, up to budget. A retry whose
// object changed since is dropped (see current).
func (c *Collector[Obj]) collectRetries(txn statedb.ReadTxn, now time.Time, budget int) {
	lc := c.cfg.Queue
	for added := 0; added < budget; {
		due := lc.Get(keyqueue.Due, 1, now.UnixNano())
		if len(due) == 0 {
			return
		}
		s := due[0]
		if !c.current(txn, s) {
			lc.Done(s, "", keyqueue.Task[Obj]{}, keyqueue.Outcome[Obj]{Forget: true}, time.Time{})
			continue
		}
		c.start(s)
		added++
	}
}

// current reports whether the task of s, queued or due for a retry, is
// still what the table asks for (a change not read yet brings its own
// work): a delete while the key is absent, an update while the object
// carries the status the task answers. The update then gets the object as
// the table holds it, with the status that asked for the work rather than
// the Error a failure wrote, so every attempt sees the same request.
func (c *Collector[Obj]) current(txn statedb.ReadTxn, s *keyqueue.State[Obj]) bool {
	v := s.View()
	t := v.Task
	cur, rev, found := c.cfg.Objects.Lookup(txn, t.Obj)
	switch {
	case t.Delete:
		return !found
	case !found:
		return false
	case c.cfg.Objects.GetStatus(cur).ID() != t.StatusID:
		// The version the task is for may have been applied in part (cut
		// short by a stop, or failed).
		c.writtenBack(cur, t.StatusID)
		return false
	case rev != t.Rev:
		same := keyqueue.Task[Obj]{Obj: c.cfg.Objects.WithStatus(cur, c.cfg.Objects.GetStatus(t.Obj)), Rev: rev}
		c.cfg.Queue.Add(keyqueue.Change[Obj]{Key: v.Key, Task: same, As: keyqueue.Same})
	}
	return true
}

// collectDeferred takes up to budget deferred changes, oldest first, each
// as the table now holds its object if that still asks for work (else it
// is dropped). One written again since is tracked, so that it and its
// newer change are one request, held from the deferred revision on.
func (c *Collector[Obj]) collectDeferred(txn statedb.ReadTxn, now time.Time, budget int) {
	lc := c.cfg.Queue
	var buf [1]keyqueue.Task[Obj]
	for added := 0; added < budget; {
		taken := lc.Take(keyqueue.Backlog, 1, 0, buf[:0])
		if len(taken) == 0 {
			return
		}
		d := taken[0]
		obj, rev, found := c.cfg.Objects.Lookup(txn, d.Obj)
		changed := rev != d.Rev
		if !found {
			continue
		}
		st := c.cfg.Objects.GetStatus(obj)
		if !st.IsPendingOrRefreshing() {
			continue
		}
		t := keyqueue.Task[Obj]{Obj: obj, Rev: rev, Asked: d.Asked, StatusID: st.ID(), Since: st.UpdatedAt, Refresh: st.Kind == status.KindRefreshing}
		if t.Since.IsZero() {
			t.Since = now
		}
		t.Ready = t.Since.UnixNano()
		if c.limits.Concurrency == 1 && !lc.Figures().Tracked && !changed {
			c.work = append(c.work, work.Op[Obj]{Task: t})
			added++
			continue
		}
		key, ok := c.cfg.Objects.KeyOf(obj)
		if !ok {
			c.noKey("a deferred change", obj)
			continue
		}
		if s := lc.Add(keyqueue.Change[Obj]{Key: key, Task: t}); s != nil {
			c.start(s)
			added++
		}
	}
}

// writtenBack records, in the key queue, that cur was written back over
// what the target got, if it was (see work.Objects.WrittenBack).
func (c *Collector[Obj]) writtenBack(cur Obj, statusID uint64) {
	if ch, ok := c.cfg.Objects.WrittenBack(cur, statusID); ok {
		c.cfg.Queue.Add(ch)
	}
}

// noKey logs that an object without a primary key was met where (see
// work.LogNoKey).
func (c *Collector[Obj]) noKey(where string, obj Obj) { work.LogNoKey(c.cfg.Log, where, obj) }
