package reconciler

import (
	"context"
	"fmt"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/work"
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
//     update failed, marked Refreshing (by the application), is repaired
//     all the same: its version never reached the target. A dependency
//     ([WithDependency]) marks an Error object Pending, applied again
//     unchecked, as the reconciler knows only the failures it wrote (not
//     one put back, restored or carried over a restart).
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
			rr.target.drift = drift.New(check, o.driftReportOnly)
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
	r.target.drift.SetReportOnly(r.opts.driftReportOnly) // whatever the order of the options
	if r.rep.info != nil {
		r.rep.info.SetDrift(r.target.drift.Rows())
	}
	return nil
}

// driftPrepare marks, before they are handed to the executor, the ops of
// work whose key's last update failed: the target does not hold their
// version, so report-only mode repairs rather than leaves what their
// check finds (an application marks an Error object Refreshing). Only with
// a drift check (WithDriftCheck).
func (r *reconciler[Obj]) driftPrepare(work []work.Op[Obj]) {
	d := r.target.drift
	if !d.Failing() {
		return
	}
	for i := range work {
		if o := &work[i]; d.Applies(o.Refresh, o.Delete) {
			key, ok := o.Key, true
			if o.S == nil {
				key, ok = r.objects.KeyOf(o.Obj)
			}
			o.Unapplied = ok && d.Unapplied(key)
		}
	}
}

// driftSettled records the drift check's outcome of o, which ran (see
// drift.Check.Settled): the drift repaired, for commit to count, and the
// rows of its key. Only with a drift check (WithDriftCheck).
func (r *reconciler[Obj]) driftSettled(o *work.Op[Obj]) {
	d := r.target.drift
	var row drift.Row
	o.Drift, row = d.Settled(drift.Outcome{Verdict: o.Checked, Err: o.Err, Delete: o.Delete,
		Applies: d.Applies(o.Refresh, o.Delete), Unapplied: o.Unapplied, Repaired: o.Drift})
	if !row.Due() {
		return
	}
	key := o.Key
	if o.S == nil {
		var ok bool
		if key, ok = r.objects.KeyOf(o.Obj); !ok {
			return
		}
	}
	d.Record(key, row, o.Err)
}
