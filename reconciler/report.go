package reconciler

import (
	"github.com/cilium/statedb"
)

// report is the last stage of a round: it publishes progress for
// WaitUntilReconciled, metrics and health. committed and failed count the
// operations committed in the round and those of them that failed.
func (l *loop[Obj]) report(txn statedb.ReadTxn, committed, failed int) {
	r := l.r
	inFlight, lowChange := l.op.pending()

	// Every change read is done, except those still in flight or parked.
	rev := l.lastRev
	if lowChange != 0 {
		rev = min(rev, lowChange-1)
	}
	r.progress.update(rev, r.retries.lowWatermark())

	failing := r.retries.len()
	if committed > 0 || failing != l.reported.failing {
		r.metrics.ReconciliationErrors(r.moduleID, r.opts.name, failed, failing)
	}
	if r.queueMetrics != nil && (failing != l.reported.failing || inFlight != l.reported.inFlight) {
		r.queueMetrics.QueueLength(r.moduleID, r.opts.name, failing, inFlight)
	}
	l.reported.failing, l.reported.inFlight = failing, inFlight

	l.health.update(healthState{
		failing:      failing,
		retryVersion: r.retries.version,
		pruneErr:     l.prune.lastErr,
		limiterErr:   l.limiterErr,
	}, func() int { return r.table.NumObjects(txn) }, r.retries.errors)
}
