package reconciler

import (
	"errors"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// commit is the third stage of a round: it records the outcome of finished
// ops. Statuses of updates are written in one write transaction, stamped
// with now, and failures are queued for retry, unless a newer version of the
// object waits behind them (see operator.superseded). It returns the number
// of failed ops.
func (l *loop[Obj]) commit(ops []op[Obj], now time.Time) (failed int) {
	r := l.r
	var (
		wtxn                         statedb.WriteTxn
		converged                    int
		convergedTotal, convergedMax time.Duration
	)
	for i := range ops {
		o := &ops[i]
		if o.attempts > 0 {
			r.retries.settle(o.key) // a failure is queued again below
		}
		if o.err != nil {
			failed++
		}
		if o.delete {
			if o.err != nil && !l.op.superseded(o) {
				r.scheduleRetry(o, 0, now)
			}
			continue
		}
		if wtxn == nil {
			wtxn = r.db.WriteTxn(r.table)
		}
		var st status.Status
		if o.err == nil {
			st = status.DoneAt(now)
		} else {
			st = status.ErrorAt(now, o.err)
		}
		if !r.writeStatus(wtxn, o, st) {
			continue
		}
		switch {
		case o.err == nil:
			d := now.Sub(o.since) // since is always set when collected
			converged++
			convergedTotal += d
			convergedMax = max(convergedMax, d)
		case IsTerminal(o.err):
			r.log.Warn("Reconciler operation failed terminally; not retrying until the object changes",
				"error", o.err)
		case !l.op.superseded(o):
			r.scheduleRetry(o, st.ID(), now)
		}
	}
	if wtxn != nil {
		wtxn.Commit()
	}
	if converged > 0 && r.queueMetrics != nil {
		r.queueMetrics.Converged(r.moduleID, r.opts.name, converged, convergedTotal, convergedMax)
	}
	return failed
}

// writeStatus stores st as the status of the object o worked on. The write
// is a compare-and-swap on the revision o saw. If the object has changed
// since, the status is written only if the object still carries the status
// that asked for o, meaning the only change was another reconciler's status;
// a newer version is left alone to be reconciled in its own turn.
func (r *reconciler[Obj]) writeStatus(wtxn statedb.WriteTxn, o *op[Obj], st status.Status) bool {
	cur, found, err := r.table.CompareAndSwap(wtxn, o.rev, r.setStatus(o.updated, st))
	switch {
	case err == nil:
		return true
	case !found || !errors.Is(err, statedb.ErrRevisionNotEqual):
		return false
	case o.statusID == 0 || r.getStatus(cur).ID() != o.statusID:
		return false
	}
	if _, _, err := r.table.Insert(wtxn, r.setStatus(r.clone(cur), st)); err != nil {
		r.log.Error("Reconciler failed to write status", "error", err)
		return false
	}
	return true
}

// scheduleRetry queues another attempt of o after its backoff, or after the
// delay the operation asked for with RetryAfter. statusID is the identity of
// the Error status written for an update.
func (r *reconciler[Obj]) scheduleRetry(o *op[Obj], statusID uint64, now time.Time) {
	key := o.key
	if key == "" {
		key = string(r.primary.ObjectToKey(o.obj))
	}
	attempts := o.attempts + 1
	wait, ok := retryAfter(o.err)
	if !ok {
		wait = backoff(attempts, r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter, r.rand())
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
		at:       now.Add(wait),
	})
}
