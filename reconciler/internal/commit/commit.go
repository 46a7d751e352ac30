// Package commit is the commit stage of a reconciler's round: it writes
// the status each operation's outcome calls for back to the table, with a
// compare-and-swap each, and settles each operation's key in the key
// queue. See [Committer].
package commit

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/backoff"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/report"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

// Committer is a reconciler's commit stage. Commit writes the statuses of
// a round's operations in one write transaction, or with the table's
// other reconcilers while it is a member of their group (see Join), and
// settles each operation in its key's lifecycle; it returns what it wrote
// and what it counted. It owns the figures of the last commit, the rate
// limit of the failure logs and the membership of the group. Make one
// with New; the zero value is not usable. A Committer is not safe for
// concurrent use: the reconcile job's goroutine owns it.
type Committer[Obj any] struct {
	cfg     Config[Obj]
	policy  Policy
	fig     report.Figures // of the last commit; its slices are reused
	failLog report.FailLog
	wrote   []Range // Commit's buffer for Outcome.Wrote
	group   group[Obj]
}

// Config is what a Committer works with, set once by New.
type Config[Obj any] struct {
	DB      *statedb.DB
	Objects *work.Objects[Obj]
	Queue   *keyqueue.Queue[Obj] // the keys' lifecycles, which Commit settles
	Log     *slog.Logger
	Rand    func() float64 // retry jitter, in [0, 1)
	// Slices says that the figures keep each operation's durations (the
	// commit metrics want them).
	Slices bool
	// DriftSettled, if set, records the drift check's outcome of an op
	// that ran (WithDriftCheck), before the op is counted.
	DriftSettled func(*work.Op[Obj])
}

// Policy is what Configure may change of how outcomes are settled: the
// last attempt (0: none), the retry backoff, and the operation timeout,
// which tells a timeout apart in the figures.
type Policy struct {
	MaxAttempts        int
	RetryMin, RetryMax time.Duration
	RetryJitter        float64
	OperationTimeout   time.Duration
}

// Range is the revisions Lo to Hi, both included, that a commit's
// statuses took.
type Range struct{ Lo, Hi statedb.Revision }

// Outcome is what a Commit did.
type Outcome struct {
	Committed, Failed int
	// Wrote is the revisions the statuses took, in increasing order:
	// the reconciler's own writes. It is valid until the next Commit.
	Wrote []Range
	// Figures is for the reporter to count; nil if the commit had no ops.
	// It is valid until the next Commit.
	Figures *report.Figures
	// Shared says that this was the first commit whose statuses were
	// written with the table's other reconcilers.
	Shared bool
}

// New returns a Committer working with cfg, settling by p.
func New[Obj any](cfg Config[Obj], p Policy) *Committer[Obj] {
	return &Committer[Obj]{cfg: cfg, policy: p}
}

// SetPolicy changes the policy from the next Commit on.
func (c *Committer[Obj]) SetPolicy(p Policy) { c.policy = p }

// Reset readies c for a run of the reconcile job: the figures and the
// failure logs' rate limit start anew.
func (c *Committer[Obj]) Reset() { c.fig, c.failLog = report.Figures{}, report.FailLog{} }

// Commit prepares each update's status, writes them in one write
// transaction (see writeStatus), and settles each op in its key's
// lifecycle. Ops that never started go back to the queue, and so do
// failures of ops cut short by a stop (cut): that is no outcome. An update
// failing its last attempt (Policy.MaxAttempts) fails for good, unless the
// batch operation lost its entry or the circuit breaker spared it: those
// are no failures of its own.
func (c *Committer[Obj]) Commit(ops []work.Op[Obj], cut bool, now time.Time) (out Outcome) {
	if len(ops) == 0 {
		return out
	}
	last := c.policy.MaxAttempts
	for i := range ops {
		o := &ops[i]
		switch {
		case cut && o.Err != nil:
			o.Ran = false
		case last > 0 && o.Err != nil && !o.Delete && !o.Spared && !work.IsTerminal(o.Err) && o.Err != work.ErrEntryLost && max(o.Attempt, 1) >= last:
			o.Err = work.Terminal(fmt.Errorf("gave up after %d attempts: %w", max(o.Attempt, 1), o.Err))
		}
	}
	c.wrote = c.wrote[:0]
	switch {
	case c.Shares():
		out.Shared = c.writeShared(ops, now) // with the table's other reconcilers
	case c.prepare(ops, now) > 0:
		c.write(ops, now)
	}
	c.settle(ops, now, &out)
	out.Wrote = c.wrote
	return out
}

// prepare sets on each update's clone the status its outcome calls for and
// returns how many there are to write.
func (c *Committer[Obj]) prepare(ops []work.Op[Obj], now time.Time) (writes int) {
	for i := range ops {
		o := &ops[i]
		if !o.Ran || o.Delete {
			continue
		}
		o.Updated = c.cfg.Objects.SetStatus(o.Updated, outcomeStatus(o, now))
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
	case work.IsTerminal(o.Err):
		return status.TerminalErrorAt(now, o.Err)
	default:
		return status.ErrorAt(now, o.Err)
	}
}

// write stores the prepared statuses in one write transaction, sets each
// op's Written (and Over, for a write over a changed object; see
// writeStatus), and adds the revisions it wrote to c.wrote.
func (c *Committer[Obj]) write(ops []work.Op[Obj], now time.Time) {
	table := c.cfg.Objects.Table
	wtxn := c.cfg.DB.WriteTxn(table)
	lo := table.Revision(wtxn) // the table's revision before the writes
	for i := range ops {
		if o := &ops[i]; o.Ran && !o.Delete {
			c.writeOp(wtxn, o, now)
		}
	}
	if hi := table.Revision(wtxn); hi > lo {
		c.wrote = append(c.wrote, Range{lo + 1, hi})
	}
	wtxn.Commit()
}

// writeOp writes the status of o, an update that ran, and sets its Written
// and Over.
func (c *Committer[Obj]) writeOp(wtxn statedb.WriteTxn, o *work.Op[Obj], now time.Time) {
	o.Written, o.Over = c.writeStatus(wtxn, o)
	if !o.Written && o.NoKey {
		// Update changed the fields the primary index reads: its
		// changes cannot be stored. Record that on the object as
		// it was.
		o.Err = fmt.Errorf("%w: Update left the object without one", work.ErrNoPrimaryKey)
		o.Updated = c.cfg.Objects.WithStatus(o.Obj, status.ErrorAt(now, o.Err))
		o.Written, o.Over = c.writeStatus(wtxn, o)
	}
}

// writeStatus stores o.Updated with a compare-and-swap on the revision o
// applied. An object changed since still gets the status if it carries the
// very status that asked for o, unless a delete or a prune came between
// (see keyqueue.View.Superseded); a newer version is left to its own turn.
// over reports such a write over a changed object: what was read since is
// older.
func (c *Committer[Obj]) writeStatus(wtxn statedb.WriteTxn, o *work.Op[Obj]) (written, over bool) {
	objs := c.cfg.Objects
	cur, found, err := objs.Table.CompareAndSwap(wtxn, o.Rev, o.Updated)
	switch {
	case err == nil && !found:
		// StateDB stores nothing for an object without a primary key and
		// says so only this way (a compare-and-swap needs the object).
		if o.NoKey {
			work.LogNoKey(c.cfg.Log, "a status write (setStatus removed it)", o.Updated)
		}
		o.NoKey = true
		return false, false
	case err == nil:
		return true, false
	case !found || !errors.Is(err, statedb.ErrRevisionNotEqual):
		return false, false
	case o.S != nil && o.S.View().Superseded:
		return false, false
	case o.StatusID == 0 || objs.GetStatus(cur).ID() != o.StatusID:
		if ch, ok := objs.WrittenBack(cur, o.StatusID); ok {
			c.cfg.Queue.Add(ch)
		}
		return false, false
	}
	if _, _, err := objs.Table.Insert(wtxn, objs.WithStatus(cur, objs.GetStatus(o.Updated))); err != nil {
		c.cfg.Log.Error("Reconciler failed to write status", "error", err)
		return false, false
	}
	return true, true
}

// settle does what follows the writes for each op: its key's lifecycle,
// figures and failure logs, in out.
func (c *Committer[Obj]) settle(ops []work.Op[Obj], now time.Time, out *Outcome) {
	q, p := c.cfg.Queue, c.policy
	fig := &c.fig
	fig.Reset()
	slices := c.cfg.Slices
	for i := range ops {
		o := &ops[i]
		if o.Ran && c.cfg.DriftSettled != nil {
			c.cfg.DriftSettled(o) // a repair the drift check asked for counts one
		}
		fig.Stats.RefreshRepaired += int(o.Drift) // counted whatever the outcome
		if !o.Ran {
			c.requeue(o)
			continue
		}
		out.Committed++
		attempts := 0
		if o.S != nil {
			attempts = o.S.View().Attempts
		}
		terminal := o.Err != nil && work.IsTerminal(o.Err)
		fig.Count(o.Delete, o.Err, work.Outcome(o.Err, p.OperationTimeout), o.Started-o.Ready, now, slices)
		if o.Err != nil {
			out.Failed++
			c.failLog.Record(c.cfg.Log, o.Delete, c.cfg.Objects.OpKey(o), attempts+1, o.Err, terminal, now)
		}
		settled := o.Err == nil || (!o.Delete && terminal)
		written := o.Delete || o.Written
		done := keyqueue.Outcome[Obj]{Ran: true, Err: o.Err, Settled: settled, Written: written, Spared: o.Spared, Over: o.Over}
		if o.Err == nil && written && !o.Delete {
			fig.Done(now.Sub(o.Since), slices)
			if o.Recheck > 0 {
				// The re-check o's Update asked for (RecheckAfter).
				done.RecheckAt, done.Updated, done.UpdatedID = backoff.Add(now.UnixNano(), o.Recheck), o.Updated, c.cfg.Objects.GetStatus(o.Updated).ID()
			}
		}
		if o.S == nil && settled && done.RecheckAt == 0 {
			continue // untracked and done: nothing to remember, no key to compute
		}
		key := o.Key
		if o.S == nil {
			var ok bool
			if key, ok = c.cfg.Objects.KeyOf(o.Obj); !ok {
				if !settled {
					work.LogNoKey(c.cfg.Log, "a failed operation", o.Obj)
				}
				continue
			}
		}
		if !settled {
			wait, ok := work.RetryDelay(o.Err)
			if !ok {
				wait = backoff.Wait(attempts+1, p.RetryMin, p.RetryMax, p.RetryJitter, c.cfg.Rand())
			}
			done.RetryAt = backoff.Add(now.UnixNano(), wait)
			if !o.Delete {
				done.ErrID = c.cfg.Objects.GetStatus(o.Updated).ID()
			}
		}
		q.Done(o.S, key, o.Task, done, now)
	}
	out.Figures = fig
}

// requeue puts the key of o, an op that never started (the gate closed or
// the loop stopped), back in the queue.
func (c *Committer[Obj]) requeue(o *work.Op[Obj]) {
	key := o.Key
	if o.S == nil {
		var ok bool
		if key, ok = c.cfg.Objects.KeyOf(o.Obj); !ok {
			work.LogNoKey(c.cfg.Log, "an operation not started", o.Obj)
			return
		}
	}
	c.cfg.Queue.Done(o.S, key, o.Task, keyqueue.Outcome[Obj]{}, time.Time{})
}
