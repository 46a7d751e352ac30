package reconciler

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/backoff"
	"github.com/converge-go/converge/reconciler/internal/groupcommit"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/report"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

// commit is the third stage of a round: it prepares each update's status,
// writes them in one write transaction (see writeStatus), and settles each
// op in its key's lifecycle. Ops that never started go back to the queue,
// and so do failures of ops cut short by a stop (cut): that is no outcome.
// An update failing its last attempt (WithMaxAttempts) fails for good,
// unless the batch operation lost its entry or the circuit breaker spared
// it: those are no failures of its own.
func (r *reconciler[Obj]) commit(ops []work.Op[Obj], cut bool, now time.Time) (out commitOutcome) {
	if len(ops) == 0 {
		return out
	}
	for i := range ops {
		o := &ops[i]
		switch {
		case cut && o.Err != nil:
			o.Ran = false
		case r.opts.maxAttempts > 0 && o.Err != nil && !o.Delete && !o.Spared && !IsTerminal(o.Err) && o.Err != work.ErrEntryLost && max(o.Attempt, 1) >= r.opts.maxAttempts:
			o.Err = TerminalError(fmt.Errorf("gave up after %d attempts: %w", max(o.Attempt, 1), o.Err))
		}
	}
	var wrote revRange
	switch {
	case r.shares():
		r.writeShared(ops, now) // with the table's other reconcilers
	case r.prepare(ops, now) > 0:
		wrote = r.write(ops, now)
	}
	out = r.settle(ops, now)
	out.wrote = wrote
	return out
}

// commitOutcome is what a commit did.
type commitOutcome struct {
	committed, failed int
	wrote             revRange        // the revisions the statuses took; zero if none
	figures           *report.Figures // for the reporter to count; nil if the commit had no ops
}

// prepare sets on each update's clone the status its outcome calls for and
// returns how many there are to write.
func (r *reconciler[Obj]) prepare(ops []work.Op[Obj], now time.Time) (writes int) {
	for i := range ops {
		o := &ops[i]
		if !o.Ran || o.Delete {
			continue
		}
		o.Updated = r.objects.SetStatus(o.Updated, outcomeStatus(o, now))
		writes++
	}
	return writes
}

// outcomeStatus is the status the outcome of o, an update that ran, calls
// for.
func outcomeStatus[Obj any](o *work.Op[Obj], now time.Time) status.Status {
	switch {
	case o.Err == nil:
		return status.DoneAt(now)
	case IsTerminal(o.Err):
		return status.TerminalErrorAt(now, o.Err)
	default:
		return status.ErrorAt(now, o.Err)
	}
}

// write stores the prepared statuses in one write transaction, sets each
// op's written (and over, for a write over a changed object; see
// writeStatus), and returns the revisions it wrote: the loop's own (see
// ownWrites).
func (r *reconciler[Obj]) write(ops []work.Op[Obj], now time.Time) (wrote revRange) {
	wtxn := r.db.WriteTxn(r.objects.Table)
	lo := r.objects.Table.Revision(wtxn) // the table's revision before the writes
	for i := range ops {
		if o := &ops[i]; o.Ran && !o.Delete {
			r.writeOp(wtxn, o, now)
		}
	}
	if hi := r.objects.Table.Revision(wtxn); hi > lo {
		wrote = revRange{lo + 1, hi}
	}
	wtxn.Commit()
	return wrote
}

// writeOp writes the status of o, an update that ran, and sets its written
// and over.
func (r *reconciler[Obj]) writeOp(wtxn statedb.WriteTxn, o *work.Op[Obj], now time.Time) {
	o.Written, o.Over = r.writeStatus(wtxn, o)
	if !o.Written && o.NoKey {
		// Update changed the fields the primary index reads: its
		// changes cannot be stored. Record that on the object as
		// it was.
		o.Err = fmt.Errorf("%w: Update left the object without one", ErrNoPrimaryKey)
		o.Updated = r.objects.WithStatus(o.Obj, status.ErrorAt(now, o.Err))
		o.Written, o.Over = r.writeStatus(wtxn, o)
	}
}

// writeStatus stores o.Updated with a compare-and-swap on the revision o
// applied. An object changed since still gets the status if it carries the
// very status that asked for o, unless a delete or a prune came between
// (see keyqueue.View.Superseded); a newer version is left to its own turn. over reports
// such a write over a changed object: what was read since is older.
func (r *reconciler[Obj]) writeStatus(wtxn statedb.WriteTxn, o *work.Op[Obj]) (written, over bool) {
	cur, found, err := r.objects.Table.CompareAndSwap(wtxn, o.Rev, o.Updated)
	switch {
	case err == nil && !found:
		// StateDB stores nothing for an object without a primary key and
		// says so only this way (a compare-and-swap needs the object).
		if o.NoKey {
			r.noKey("a status write (setStatus removed it)", o.Updated)
		}
		o.NoKey = true
		return false, false
	case err == nil:
		return true, false
	case !found || !errors.Is(err, statedb.ErrRevisionNotEqual):
		return false, false
	case o.S != nil && o.S.View().Superseded:
		return false, false
	case o.StatusID == 0 || r.objects.GetStatus(cur).ID() != o.StatusID:
		r.writtenBack(cur, o.StatusID)
		return false, false
	}
	if _, _, err := r.objects.Table.Insert(wtxn, r.objects.WithStatus(cur, r.objects.GetStatus(o.Updated))); err != nil {
		r.log.Error("Reconciler failed to write status", "error", err)
		return false, false
	}
	return true, true
}

// settle does what follows the writes for each op: its key's lifecycle,
// figures and failure logs. The figures are filled in the reporter's,
// whose slices are reused, and returned for it to count.
func (r *reconciler[Obj]) settle(ops []work.Op[Obj], now time.Time) (out commitOutcome) {
	lc := r.keys.lifecycles
	fig := &r.rep.figures // reused: keep its slices
	fig.Reset()
	slices := r.rep.metrics.Commit != nil
	for i := range ops {
		o := &ops[i]
		if o.Ran && r.target.drift != nil {
			r.driftSettled(o) // a repair the drift check asked for counts one
		}
		fig.Stats.RefreshRepaired += int(o.Drift) // counted whatever the outcome
		if !o.Ran {
			r.requeue(o)
			continue
		}
		out.committed++
		attempts := 0
		if o.S != nil {
			attempts = o.S.View().Attempts
		}
		fig.Count(o.Delete, o.Err, work.Outcome(o.Err, r.opts.operationTimeout), o.Started-o.Ready, now, slices)
		if o.Err != nil {
			out.failed++
			r.rep.failLog.Record(r.log, o.Delete, r.objects.OpKey(o), attempts+1, o.Err, IsTerminal(o.Err), now)
		}
		settled := o.Err == nil || (!o.Delete && IsTerminal(o.Err))
		written := o.Delete || o.Written
		done := keyqueue.Outcome[Obj]{Ran: true, Err: o.Err, Settled: settled, Written: written, Spared: o.Spared, Over: o.Over}
		if o.Err == nil && written && !o.Delete {
			fig.Done(now.Sub(o.Since), slices)
			if o.Recheck > 0 {
				// The re-check o's Update asked for (RecheckAfter).
				done.RecheckAt, done.Updated, done.UpdatedID = backoff.Add(now.UnixNano(), o.Recheck), o.Updated, r.objects.GetStatus(o.Updated).ID()
			}
		}
		if o.S == nil && settled && done.RecheckAt == 0 {
			continue // untracked and done: nothing to remember, no key to compute
		}
		key := o.Key
		if o.S == nil {
			var ok bool
			if key, ok = r.objects.KeyOf(o.Obj); !ok {
				if !settled {
					r.noKey("a failed operation", o.Obj)
				}
				continue
			}
		}
		if !settled {
			wait, ok := work.RetryDelay(o.Err)
			if !ok {
				wait = backoff.Wait(attempts+1, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.clock.rand())
			}
			done.RetryAt = backoff.Add(now.UnixNano(), wait)
			if !o.Delete {
				done.ErrID = r.objects.GetStatus(o.Updated).ID()
			}
		}
		lc.Done(o.S, key, o.Task, done, now)
	}
	out.figures = fig
	return out
}

// requeue puts the key of o, an op that never started (the gate closed or
// the loop stopped), back in the queue.
func (r *reconciler[Obj]) requeue(o *work.Op[Obj]) {
	key := o.Key
	if o.S == nil {
		var ok bool
		if key, ok = r.objects.KeyOf(o.Obj); !ok {
			r.noKey("an operation not started", o.Obj)
			return
		}
	}
	r.keys.lifecycles.Done(o.S, key, o.Task, keyqueue.Outcome[Obj]{}, time.Time{})
}

// writeShared is prepare and write with the group: it hands each
// update's clone and the status its outcome calls for to the group's
// write, which sets the statuses of several reconcilers on one clone (see
// sharedBatch), and records the revisions they took as the loop's own (see
// ownWrites).
func (r *reconciler[Obj]) writeShared(ops []work.Op[Obj], now time.Time) {
	r.group.sts = slices.Grow(r.group.sts[:0], len(ops))[:len(ops)]
	b := &sharedBatch[Obj]{r: r, ops: ops, sts: r.group.sts, now: now}
	writes := 0
	for i := range ops {
		if o := &ops[i]; o.Ran && !o.Delete {
			b.sts[i] = outcomeStatus(o, now)
			writes++
		}
	}
	if writes > 0 {
		if r.group.landed == nil {
			// Writing with others, half its changes are its own writes:
			// the feed passes over them unread (see skipQuiet). A lone
			// reconciler reads as before.
			r.feed.changes.PassOverOwn(r.feed.own.has)
		}
		r.group.member.Commit(b)
		r.group.busy, r.group.landed = true, r.group.member.Landed()
		r.group.over = false
		for i := range ops { // by index: an op is large, and a commit has a thousand
			if ops[i].Over {
				r.group.over = true
				break
			}
		}
	}
	clear(r.group.sts)
}

// sharedBatch is a commit's ops as the group's write sees them
// (groupcommit.Batch). An update's clone gets its status when it is
// written: the first of a revision's entries carries those of the others
// too, each set once. The leader calls it while the reconciler waits in
// Commit.
type sharedBatch[Obj any] struct {
	r   *reconciler[Obj]
	ops []work.Op[Obj]
	sts []status.Status // the status of each update, not set on its clone yet
	now time.Time
}

func (b *sharedBatch[Obj]) Len() int { return len(b.ops) }

func (b *sharedBatch[Obj]) Entry(i int) (statedb.Revision, Obj, bool) {
	o := &b.ops[i]
	return o.Rev, o.Updated, o.Ran && !o.Delete
}

func (b *sharedBatch[Obj]) Merge(i int, into Obj) Obj {
	return b.r.objects.SetStatus(into, b.sts[i])
}

// MergeRun sets the statuses of a run's entries on into: those whose
// reconcilers keep their status in one status.Set (WithStatusSet, the
// same set found by each) with one copy of it, the others by their own
// Merge. A set whose reconcilers do not each find their own status in the
// copy (two fields holding one set value, a name given twice) is put back
// and its entries merged one by one. ok is false, into untouched, for a
// run too long for it: the group merges that one itself.
func (b *sharedBatch[Obj]) MergeRun(into Obj, run groupcommit.Run[Obj]) (Obj, bool) {
	n := run.Len()
	if n > maxRun {
		return into, false
	}
	obj := into
	var done uint64 // of the entries, by bit
	var buf [8]status.Entry
	var group [8]int
	for j := range n {
		if done&(1<<j) != 0 {
			continue
		}
		m, i := run.Entry(j)
		mb := m.(*sharedBatch[Obj]) // a member of a table has this package's batches, of Obj
		e := mb.r.objects.Set
		if e == nil {
			obj, done = mb.Merge(i, obj), done|1<<j
			continue
		}
		set := e.Get(obj)
		entries, members := buf[:0], group[:0]
		for k := j; k < n; k++ {
			mk, ik := run.Entry(k)
			bk := mk.(*sharedBatch[Obj])
			if ek := bk.r.objects.Set; done&(1<<k) == 0 && ek != nil && (k == j || ek.Get(obj).Same(set)) {
				entries = append(entries, status.Entry{Name: ek.Name, Status: bk.sts[ik]})
				members, done = append(members, k), done|1<<k
			}
		}
		obj = e.Put(obj, set.SetAll(entries...))
		if !ownFound(obj, run, members) {
			obj = e.Put(obj, set)
			for _, k := range members {
				mk, ik := run.Entry(k)
				obj = mk.Merge(ik, obj)
			}
		}
	}
	return obj, true
}

// maxRun is the longest run MergeRun takes (one bit per entry): the
// reconcilers of one table that settle one version together; a longer one
// is merged entry by entry.
const maxRun = 64

// ownFound reports whether each of the run's members finds its own status
// in obj.
func ownFound[Obj any](obj Obj, run groupcommit.Run[Obj], members []int) bool {
	for _, k := range members {
		m, i := run.Entry(k)
		mb := m.(*sharedBatch[Obj])
		if e := mb.r.objects.Set; e.Get(obj).Get(e.Name).ID() != mb.sts[i].ID() {
			return false
		}
	}
	return true
}

func (b *sharedBatch[Obj]) Merged(i int, written Obj) {
	o := &b.ops[i]
	o.Updated, o.Written, o.Over = written, true, false
}

func (b *sharedBatch[Obj]) WriteAlone(wtxn statedb.WriteTxn, i int) {
	o := &b.ops[i]
	o.Updated = b.r.objects.SetStatus(o.Updated, b.sts[i])
	b.r.writeOp(wtxn, o, b.now)
}

func (b *sharedBatch[Obj]) Wrote(lo, hi statedb.Revision) {
	b.r.feed.wrote(revRange{lo, hi})
}
