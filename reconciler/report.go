package reconciler

import (
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
)

// report is the last stage of a round: it publishes progress for
// WaitUntilReconciled, metrics, the reconciler's rows in the tables of
// TablesCell, and health. committed and failed count the operations
// committed in the round and those of them that failed.
func (l *loop[Obj]) report(txn statedb.ReadTxn, committed, failed int, now time.Time, paused bool) {
	r := l.r
	work := l.op.pending(now)

	// Every change read is done, except those still in flight, parked or
	// deferred.
	rev := l.lastRev
	if work.lowChange != 0 {
		rev = min(rev, work.lowChange-1)
	}
	if low := l.deferred.lowRev(); low != 0 {
		rev = min(rev, low-1)
	}

	failing := r.retries.len()
	if committed > 0 || failing != l.reported.failing {
		r.metrics.ReconciliationErrors(r.moduleID, r.opts.name, failed, failing)
	}
	if r.metrics.queue != nil && (failing != l.reported.failing || work.n != l.reported.inFlight) {
		r.metrics.queue.QueueLength(r.moduleID, r.opts.name, failing, work.n)
	}
	l.reported.failing, l.reported.inFlight = failing, work.n

	var oldest time.Time
	if r.metrics.round != nil || r.info != nil {
		oldest = earliest(work.oldestSince, r.retries.oldestSince())
	}
	if r.metrics.round != nil {
		var age time.Duration
		if !oldest.IsZero() {
			age = now.Sub(oldest)
		}
		r.metrics.round.Round(r.moduleID, r.opts.name, metrics.RoundStats{
			Adds:           l.adds,
			Retries:        l.retried,
			Depth:          work.depth,
			Retrying:       failing,
			InFlight:       work.n,
			OldestPending:  age,
			UnfinishedWork: work.unfinished,
			LongestRunning: work.longest,
		})
	}

	l.checkGate(txn)
	state := l.health.update(healthState{
		gateErr:      l.gateErr,
		paused:       paused,
		failing:      failing,
		retryVersion: r.retries.version,
		pruneErr:     l.prune.lastErr,
		limiterErr:   l.limiterErr,
	}, func() int { return r.table.NumObjects(txn) }, r.retries.errors)

	if r.info != nil {
		r.info.write(r.db, l.info(state, r.table.NumObjects(txn), failing, work.n, oldest), r.retries.changes())
	}

	// Progress last, so that a WaitUntilReconciled that returns sees the
	// round's figures published.
	r.progress.update(rev, r.retries.lowWatermark())
}

// info returns the reconciler's row of the reconcilers table.
func (l *loop[Obj]) info(state State, objects, failing, inFlight int, oldest time.Time) Info {
	r, t, p := l.r, &l.totals, &l.prune
	info := Info{
		Module:              r.moduleID.String(),
		Name:                r.opts.name,
		State:               state,
		Objects:             objects,
		Succeeded:           t.succeeded,
		Failed:              t.failed,
		ConsecutiveFailures: t.consecutive,
		LastError:           t.lastErr,
		LastErrorAt:         t.lastErrAt,
		Retrying:            failing,
		InFlight:            inFlight,
		OldestPending:       oldest,
		LastPrune:           p.last.at,
		LastPruneDuration:   p.last.duration,
		DriftRepaired:       uint64(t.refreshRepaired + p.repaired),
	}
	if p.lastErr != nil {
		info.LastPruneError = p.lastErr.Error()
	}
	return info
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
