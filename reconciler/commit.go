package reconciler

import (
	"errors"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/status"
)

// commit is the third stage of a round: it records the outcome of finished
// ops. It runs in three steps, so that the table is locked only for the
// writes themselves (an inserter waiting on the lock waits for nothing
// else):
//
//  1. the status of each update is decided and set on its clone (prepare);
//  2. the statuses are written in one write transaction, stamped with now
//     (write);
//  3. the figures are counted, failures logged and queued for retry, unless
//     a newer version of the object waits behind them (see
//     operator.superseded), and the figures go to the metrics and the
//     reconciler's totals (settle).
//
// It returns the number of failed ops.
func (l *loop[Obj]) commit(ops []op[Obj], now time.Time) (failed int) {
	if len(ops) == 0 {
		return 0
	}
	if l.prepare(ops, now) > 0 {
		l.write(ops)
	}
	return l.settle(ops, now)
}

// prepare sets on each update's clone the status its outcome calls for
// and marks it to be written. Updates parked to run again are not written.
// It returns the number of ops marked.
func (l *loop[Obj]) prepare(ops []op[Obj], now time.Time) (writes int) {
	r := l.r
	for i := range ops {
		o := &ops[i]
		o.write, o.written, o.changed = false, false, false
		if o.delete || l.op.reapplies(o) {
			continue // a reapplied version runs again; its outcome counts
		}
		var st status.Status
		switch {
		case o.err == nil:
			st = status.DoneAt(now)
		case IsTerminal(o.err):
			st = status.TerminalErrorAt(now, o.err)
		default:
			st = status.ErrorAt(now, o.err)
		}
		o.updated = r.setStatus(o.updated, st)
		o.write = true
		writes++
	}
	return writes
}

// write stores the prepared statuses in one write transaction, and records
// the revisions it wrote as the loop's own.
func (l *loop[Obj]) write(ops []op[Obj]) {
	r := l.r
	wtxn := r.db.WriteTxn(r.table)
	lo := r.table.Revision(wtxn) // the table's revision before the writes
	for i := range ops {
		if o := &ops[i]; o.write {
			o.written, o.changed = r.writeStatus(wtxn, o)
		}
	}
	if hi := r.table.Revision(wtxn); hi > lo {
		l.own.add(lo+1, hi, l.lastRev)
	}
	wtxn.Commit()
}

// settle does what follows the writes for each op: figures, failure
// logs, retries and the parked versions a write made stale.
func (l *loop[Obj]) settle(ops []op[Obj], now time.Time) (failed int) {
	r := l.r
	fig := &l.figures
	fig.reset()
	for i := range ops {
		o := &ops[i]
		var prev *retry[Obj]
		if o.attempts > 0 {
			prev = r.retries.settle(o.key) // a failure is queued again below
		}
		out := outcome(o.err, r.opts.operationTimeout)
		fig.count(o.delete, out, o.started-o.ready, r.metrics.commit != nil)
		if o.err != nil {
			failed++
			l.failed(o, now)
		} else {
			l.totals.consecutive = 0
		}
		switch {
		case o.delete:
			if o.err != nil && !l.op.superseded(o) {
				r.scheduleRetry(o, 0, now, prev)
			}
			continue
		case !o.written:
			continue
		case o.changed:
			// The object changed and changed back to the version o
			// applied (a revert, or another reconciler's status): what
			// is parked behind o is a version no longer in the table.
			l.op.dropParked(o)
		}
		switch {
		case o.err == nil:
			fig.done(now.Sub(o.since), r.metrics.commit != nil) // since is set when collected
		case IsTerminal(o.err):
		case !l.op.superseded(o):
			r.scheduleRetry(o, r.getStatus(o.updated).ID(), now, prev)
		}
	}
	fig.stats.RefreshRepaired = int(r.refreshDrift.Swap(0))
	l.totals.add(fig)
	if r.metrics.commit != nil {
		r.metrics.commit.Committed(r.moduleID, r.opts.name, fig.stats)
	}
	if fig.converged > 0 && r.metrics.queue != nil {
		r.metrics.queue.Converged(r.moduleID, r.opts.name, fig.converged, fig.total, fig.longest)
	}
	return failed
}

// writeStatus stores o.updated, which carries the status o's outcome calls
// for. The write is a compare-and-swap on the revision o saw. If the object
// has changed since, the status is written only if the object still
// carries the status that asked for o: the same version, with only another
// reconciler's status changed, or written again as it was (changed reports
// this case). A newer version is left alone to be reconciled in its own
// turn.
func (r *reconciler[Obj]) writeStatus(wtxn statedb.WriteTxn, o *op[Obj]) (written, changed bool) {
	cur, found, err := r.table.CompareAndSwap(wtxn, o.rev, o.updated)
	switch {
	case err == nil:
		return true, false
	case !found || !errors.Is(err, statedb.ErrRevisionNotEqual):
		return false, false
	case o.statusID == 0 || r.getStatus(cur).ID() != o.statusID:
		return false, false
	}
	if _, _, err := r.table.Insert(wtxn, r.setStatus(r.clone(cur), r.getStatus(o.updated))); err != nil {
		r.log.Error("Reconciler failed to write status", "error", err)
		return false, false
	}
	return true, true
}

// scheduleRetry queues another attempt of o after its backoff, or after the
// delay the operation asked for with RetryAfter. statusID is the identity of
// the Error status written for an update; prev is the retry o was an
// attempt of, if any.
func (r *reconciler[Obj]) scheduleRetry(o *op[Obj], statusID uint64, now time.Time, prev *retry[Obj]) {
	key := o.key
	if key == "" {
		key = r.keyOf(o.obj)
	}
	attempts := o.attempts + 1
	wait, ok := retryAfter(o.err)
	if !ok {
		wait = backoff(attempts, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.rand())
	}
	first := now
	if prev != nil {
		first = prev.first
	}
	r.retries.add(&retry[Obj]{
		key:      key,
		obj:      o.obj,
		rev:      o.rev,
		delete:   o.delete,
		statusID: statusID,
		since:    o.since,
		attempts: attempts,
		err:      o.err,
		first:    first,
		at:       now.Add(wait),
	})
}

// commitFigures gathers the figures of one commit. Its slices are reused
// from one commit to the next.
type commitFigures struct {
	stats     metrics.CommitStats
	converged int
	total     time.Duration
	longest   time.Duration
}

func (c *commitFigures) reset() {
	waits, lat := c.stats.QueueWaits[:0], c.stats.Latencies[:0]
	*c = commitFigures{}
	c.stats.QueueWaits, c.stats.Latencies = waits, lat
}

// count records one committed op with its outcome and queue wait (in ns);
// the slices are filled only if some metrics want them.
func (c *commitFigures) count(isDelete bool, out metrics.Outcome, wait int64, slices bool) {
	if isDelete {
		c.stats.Delete.Add(out)
	} else {
		c.stats.Update.Add(out)
	}
	if slices {
		c.stats.QueueWaits = append(c.stats.QueueWaits, time.Duration(max(wait, 0)))
	}
}

// done records an object committed Done after latency.
func (c *commitFigures) done(latency time.Duration, slices bool) {
	c.converged++
	c.total += latency
	c.longest = max(c.longest, latency)
	if slices {
		c.stats.Latencies = append(c.stats.Latencies, latency)
	}
}
