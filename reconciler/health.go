package reconciler

import (
	"errors"
	"fmt"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
)

// maxHealthErrors caps how many object errors a Degraded health report
// lists; the rest are summarised by count.
const maxHealthErrors = 10

// healthReporter reports the reconcile job's health, only when it changes.
type healthReporter struct {
	health       cell.Health
	reported     bool
	degraded     bool
	objects      int
	retryVersion uint64
	pruneErr     error
}

// report publishes metrics and health after each round; failed is the
// number of operations that failed in it.
func (l *loop[Obj]) report(txn statedb.ReadTxn, failed int) {
	r := l.r
	failing := r.retries.len()
	r.metrics.ReconciliationErrors(r.moduleID, r.opts.name, failed, failing)
	if r.queueMetrics != nil {
		inFlight := 0
		if l.pool != nil {
			inFlight = l.pool.inFlight()
		}
		r.queueMetrics.QueueLength(r.moduleID, r.opts.name, failing, inFlight)
	}

	h := &l.health
	if failing == 0 && r.lastPruneErr == nil {
		n := r.table.NumObjects(txn)
		if !h.reported || h.degraded || n != h.objects {
			h.health.OK(fmt.Sprintf("OK, %d object(s)", n))
		}
		h.reported, h.degraded, h.objects, h.pruneErr = true, false, n, nil
		return
	}
	if h.reported && h.degraded && h.retryVersion == r.retries.version && h.pruneErr == r.lastPruneErr {
		return
	}
	errs := make([]error, 0, maxHealthErrors+2)
	if r.lastPruneErr != nil {
		errs = append(errs, r.lastPruneErr)
	}
	errs = append(errs, r.retries.errors(maxHealthErrors)...)
	if omitted := failing - maxHealthErrors; omitted > 0 {
		errs = append(errs, fmt.Errorf("%d more error(s) omitted", omitted))
	}
	reason := fmt.Sprintf("%d object(s) failing", failing)
	if r.lastPruneErr != nil {
		reason += ", prune failed"
	}
	h.health.Degraded(reason, errors.Join(errs...))
	h.reported, h.degraded = true, true
	h.retryVersion, h.pruneErr = r.retries.version, r.lastPruneErr
}
