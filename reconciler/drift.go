package reconciler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/tables"
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

// driftVerdict is what the drift check said of an op: nothing (not
// checked), in sync, or drifted (repaired by the Update that followed, or
// only reported).
type driftVerdict uint8

const (
	notChecked driftVerdict = iota
	inSync
	drifted
)

// driftCheck is the state of WithDriftCheck, owned by the target: the
// check and its mode, read-only after Register and read by the loop and
// the workers; and rows, the drifted objects, owned by the loop's
// goroutine.
type driftCheck[Obj any] struct {
	check      func(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) (bool, error)
	reportOnly bool
	rows       driftRows
}

// applies reports whether the check runs for o.
func (d *driftCheck[Obj]) applies(o *op[Obj]) bool {
	return d != nil && o.Refresh && !o.Delete
}

// checkOne runs the drift check for o (which applies) with ctx, the
// context of its call, as r.call runs an operation, once the caller has
// passed the gate (the check ends the start: gate.entered), and records
// its verdict in o. It reports whether Update must follow (the object
// drifted and is to be repaired) and the check's error.
func (r *reconciler[Obj]) checkOne(ctx context.Context, txn statedb.ReadTxn, o *op[Obj]) (update bool, err error) {
	d := r.target.drift
	var ok bool
	err = r.call(ctx, "drift check", func(ctx context.Context) (err error) {
		r.gate.entered()
		ok, err = d.check(ctx, txn, o.Rev, o.Obj)
		return err
	})
	switch {
	case err != nil:
		return false, err
	case ok:
		o.checked = inSync
		return false, nil
	}
	o.checked = drifted
	return !d.reportOnly || o.unapplied, nil
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

// checkFirst runs the drift check for o, an op of the inline loop or a
// worker that passed the gate, if it applies, and reports whether Update
// follows: always without the check.
func (r *reconciler[Obj]) checkFirst(ctx context.Context, txn statedb.ReadTxn, o *op[Obj]) (update bool, err error) {
	if !r.target.drift.applies(o) {
		return true, nil
	}
	return r.checkOne(ctx, txn, o)
}

// checkEntry runs the drift check for o, an update of a batch being built
// (which applies), as one start of its own at the gate, and reports
// whether o goes into the batch: it drifted and is to be repaired. One
// that does not has its outcome, or never ran (the gate closed) and goes
// back to the queue.
func (e *runner[Obj]) checkEntry(ctx context.Context, txn statedb.ReadTxn, o *op[Obj]) bool {
	r := e.r
	if ctx.Err() != nil {
		return false
	}
	ok, probe := r.gate.enter(), false
	if !ok && r.breaker != nil {
		ok = r.gate.enterProbe() // the circuit breaker's probe
		probe = ok
	}
	if !ok {
		return false
	}
	o.started = time.Now().UnixNano()
	call := e.callContext()
	update, err := r.checkOne(call, txn, o)
	call.close()
	o.err, o.ran = err, true
	if r.breaker != nil {
		r.recordOutcome(ctx, o, probe) // may put it back: held
	}
	if update && o.ran {
		o.ran = false // the batch's to run
		return true
	}
	return false
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

// driftRows are the objects a report-only drift check found drifted and
// left, for the retries table, and how many drifts it found. Owned by the
// loop's goroutine; the zero value is empty.
type driftRows struct {
	detected uint64              // drifts found and left since Register
	set      map[string]struct{} // the keys drifted now
	changed  map[string]bool     // keys whose row changed since the last take: drifted or not
	// failed holds, in report-only mode, the keys whose last update
	// failed: as many as fail, as the key queue holds.
	failed map[string]struct{}
}

// mark records key as drifted or no longer.
func (d *driftRows) mark(key string, isDrifted bool) {
	if d.set == nil {
		d.set, d.changed = map[string]struct{}{}, map[string]bool{}
	}
	if isDrifted {
		d.set[key] = struct{}{}
	} else {
		delete(d.set, key)
	}
	d.changed[key] = isDrifted
}

// appendDriftRows appends to retries, the rows infoWriter.write made of
// outdated (see keyqueue.Queue.TakeOutdated), the rows of the keys whose
// drift changed since the last call, for the reconciler id, and forgets
// those changes. A key outdated holds keeps its failure row: a drift that
// ends removes no failure, and a drift found replaces the removal of the
// failure before it.
func appendDriftRows[Obj any](d *driftRows, id string, retries []tables.RetryInfo, outdated map[string]*keyqueue.State[Obj]) []tables.RetryInfo {
	if d == nil || len(d.changed) == 0 {
		return retries
	}
	for key, isDrifted := range d.changed {
		row := tables.RetryInfo{Reconciler: id, Key: displayKey(key), Drifted: isDrifted}
		if _, ok := outdated[key]; ok {
			if isDrifted {
				if i := slices.IndexFunc(retries, func(r tables.RetryInfo) bool { return r.Key == row.Key }); i >= 0 && retries[i].Attempts == 0 {
					retries[i] = row
				}
			}
			continue
		}
		retries = append(retries, row)
	}
	clear(d.changed)
	return retries
}
