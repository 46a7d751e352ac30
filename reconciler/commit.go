package reconciler

import (
	"errors"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/status"
)

// commit is the third stage of a round: it records the outcome of finished
// ops. Statuses of updates are written in one write transaction, stamped
// with now, and failures are queued for retry, unless a newer version of the
// object waits behind them (see operator.superseded). Then the commit's
// figures go to the metrics and the reconciler's totals. It returns the
// number of failed ops.
func (l *loop[Obj]) commit(ops []op[Obj], now time.Time) (failed int) {
	if len(ops) == 0 {
		return 0
	}
	r := l.r
	fig := &l.figures
	fig.reset()
	var (
		wtxn statedb.WriteTxn
		lo   statedb.Revision // the table's revision before the commit wrote
	)
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
		if o.delete {
			if o.err != nil && !l.op.superseded(o) {
				r.scheduleRetry(o, 0, now, prev)
			}
			continue
		}
		if l.op.reapplies(o) {
			continue // the same version runs again; its outcome counts
		}
		if wtxn == nil {
			wtxn = r.db.WriteTxn(r.table)
			lo = r.table.Revision(wtxn)
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
		written, changed := r.writeStatus(wtxn, o, st)
		if !written {
			continue
		}
		if changed {
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
			r.scheduleRetry(o, st.ID(), now, prev)
		}
	}
	if wtxn != nil {
		if hi := r.table.Revision(wtxn); hi > lo {
			l.own.add(lo+1, hi, l.lastRev)
		}
		wtxn.Commit()
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

// writeStatus stores st as the status of the object o worked on. The write
// is a compare-and-swap on the revision o saw. If the object has changed
// since, the status is written only if the object still carries the status
// that asked for o: the same version, with only another reconciler's status
// changed, or written again as it was (changed reports this case). A newer
// version is left alone to be reconciled in its own turn.
func (r *reconciler[Obj]) writeStatus(wtxn statedb.WriteTxn, o *op[Obj], st status.Status) (written, changed bool) {
	cur, found, err := r.table.CompareAndSwap(wtxn, o.rev, r.setStatus(o.updated, st))
	switch {
	case err == nil:
		return true, false
	case !found || !errors.Is(err, statedb.ErrRevisionNotEqual):
		return false, false
	case o.statusID == 0 || r.getStatus(cur).ID() != o.statusID:
		return false, false
	}
	if _, _, err := r.table.Insert(wtxn, r.setStatus(r.clone(cur), st)); err != nil {
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
		key = string(r.primary.ObjectToKey(o.obj))
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
