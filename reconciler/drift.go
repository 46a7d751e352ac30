package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/statedb"
)

// WithDriftCheck has every object the reconciler takes with a Refreshing
// status (marked by the refresh sweep of [WithRefreshing], by a re-check
// asked with [RecheckAfter], by a dependency of [WithDependency], or put
// back so) looked at in the target before it is rewritten: check reports
// whether obj, at revision in the table, is what the target holds.
//
//   - inSync: the object is written Done; Update is not called, so the
//     target is not written.
//   - drifted (inSync false, err nil): Update is called to repair it, and
//     the repair counts in the drift repaired (see [ReportRepaired]: one,
//     unless Update reports its own count). With [WithDriftReportOnly]
//     Update is not called: the object is written Done, the drift counted
//     as detected (tables.Info.DriftDetected) and the object shown as
//     drifted in the retries table (tables.RetryInfo.Drifted) until it
//     changes, is found in sync again, or is deleted. An object whose last
//     update failed (a dependency marks an Error object Refreshing) is
//     repaired all the same: its version never reached the target.
//   - an error is the object's failure, as one of Update would be: it is
//     marked Error, retried with backoff, and the retry checks again.
//
// check runs where Update would (on the reconciler's goroutine or a
// worker), with the context, operation timeout and panic recovery an
// Update has, and its own [WithOperationTimeout] deadline; it takes the
// same start an Update takes (Pause, a prune, the circuit breaker), and its
// outcome counts for the breaker as one of Update would. obj is the
// table's object: check must not modify it. With [BatchOperations] each
// Refreshing entry is checked, one call each, before the batch is built,
// and the entries found in sync (or, report-only, drifted) leave it. New
// versions (a Pending status) and deletes are never checked, and neither
// is an Error status found in the table at start (it is applied again).
//
// Off by default: a Refreshing object is then updated as a Pending one
// is. Obj must be the reconciled table's object type; Register refuses the
// option with [ErrInvalidConfig] otherwise, or if check is nil.
func WithDriftCheck[Obj any](check func(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) (inSync bool, err error)) Option {
	return func(o *options) {
		o.by = "WithDriftCheck"
		o.driftCheck = func(r any) error {
			rr, ok := r.(*reconciler[Obj])
			switch {
			case !ok:
				return fmt.Errorf("reconciler.Register: WithDriftCheck's function is not of the reconciled table's object type: %w", ErrInvalidConfig)
			case check == nil:
				return fmt.Errorf("reconciler.Register: WithDriftCheck needs a check function: %w", ErrInvalidConfig)
			}
			rr.target.drift = &driftCheck[Obj]{check: check, reportOnly: o.driftReportOnly}
			return nil
		}
	}
}

// WithDriftReportOnly makes [WithDriftCheck] detect drift and leave it:
// a drifted object is counted and shown, not repaired (Update is not
// called for it). It needs WithDriftCheck; Register refuses it with
// [ErrInvalidConfig] without. Off by default: drift found is repaired.
func WithDriftReportOnly() Option {
	return func(o *options) {
		o.by = "WithDriftReportOnly"
		o.driftReportOnly = true
	}
}

// applyDriftCheck applies WithDriftCheck, if given, once the reconciler is
// built.
func (r *reconciler[Obj]) applyDriftCheck() error {
	switch {
	case r.opts.driftCheck == nil && r.opts.driftReportOnly:
		return fmt.Errorf("reconciler.Register: WithDriftReportOnly needs WithDriftCheck: %w", ErrInvalidConfig)
	case r.opts.driftCheck == nil:
		return nil
	}
	if err := r.opts.driftCheck(r); err != nil {
		return err
	}
	r.target.drift.reportOnly = r.opts.driftReportOnly // whatever the order of the options
	if r.rep.info != nil {
		r.rep.info.drift = &r.target.drift.rows
	}
	return nil
}

// driftPrepare marks, before they are handed to the executor, the ops of
// work whose key's last update failed: the target does not hold their
// version, so report-only mode repairs rather than leaves what their
// check finds (a dependency marks an Error object Refreshing).
func (r *reconciler[Obj]) driftPrepare(work []op[Obj]) {
	d := r.target.drift
	if d == nil || !d.reportOnly || len(d.rows.failed) == 0 {
		return
	}
	for i := range work {
		if o := &work[i]; d.applies(o) {
			key, ok := o.key, true
			if o.s == nil {
				key, ok = r.objects.keyOf(o.Obj)
			}
			_, o.unapplied = d.rows.failed[key]
			o.unapplied = o.unapplied && ok
		}
	}
}

// driftSettled records the drift check's outcome of o, which ran, in the
// figures and the drifted rows: a repair counts one unless Update reported
// its own, a drift left is counted and shown, and any other outcome for a
// drifted object's key (a change, a delete, in sync, a failure) ends its
// row.
func (r *reconciler[Obj]) driftSettled(o *op[Obj], now time.Time) {
	d := r.target.drift
	if d == nil {
		return
	}
	left := d.reportOnly && o.checked == drifted && o.err == nil && !o.unapplied
	if o.checked == drifted && !left && o.err == nil && o.drift == 0 {
		o.drift = 1 // the repair the check asked for
	}
	// An Update that failed; a check that failed leaves what was known.
	failed := d.reportOnly && o.err != nil && !o.Delete && !(d.applies(o) && o.checked == notChecked)
	if !left && !failed && len(d.rows.set) == 0 && len(d.rows.failed) == 0 {
		return
	}
	key := o.key
	if o.s == nil {
		var ok bool
		if key, ok = r.objects.keyOf(o.Obj); !ok {
			return
		}
	}
	switch {
	case failed:
		if d.rows.failed == nil {
			d.rows.failed = map[string]struct{}{}
		}
		d.rows.failed[key] = struct{}{}
	case o.err == nil:
		delete(d.rows.failed, key) // applied, or deleted
	}
	if left {
		d.rows.detected++
		d.rows.mark(key, true)
	} else if _, ok := d.rows.set[key]; ok {
		d.rows.mark(key, false)
	}
}
