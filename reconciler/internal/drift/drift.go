// Package drift is the reconciler's drift check (WithDriftCheck): the
// user's check of whether the target holds a Refreshing object as the
// table does, its verdicts, and, in report-only mode, the drift found and
// left: how much, which objects are drifted now for the retries table,
// and which keys' last update failed (their drift is repaired all the
// same, as the target never got their version). See [Check].
package drift

import (
	"context"
	"slices"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/tables"
)

// Verdict is what the check said of an operation: nothing (not checked,
// or the check failed), in sync, or drifted (repaired by the Update that
// follows, or only reported).
type Verdict uint8

const (
	NotChecked Verdict = iota
	InSync
	Drifted
)

// Check is the state of WithDriftCheck: the check and its mode, read-only
// after New and read by the loop and the workers; and the rows of the
// drifted objects, owned by the loop's goroutine (Prepare, Settled,
// Record, Rows). A nil *Check checks nothing.
type Check[Obj any] struct {
	check      func(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) (bool, error)
	reportOnly bool
	rows       Rows
}

// New returns the check of check, leaving drift found if reportOnly.
func New[Obj any](check func(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj) (bool, error), reportOnly bool) *Check[Obj] {
	return &Check[Obj]{check: check, reportOnly: reportOnly}
}

// SetReportOnly sets the mode, before the reconciler starts.
func (d *Check[Obj]) SetReportOnly(on bool) { d.reportOnly = on }

// Applies reports whether the check runs for an operation: a refresh
// that is not a delete.
func (d *Check[Obj]) Applies(refresh, delete bool) bool { return d != nil && refresh && !delete }

// Run calls the check for obj at revision and returns its verdict, and
// whether Update must follow: the object drifted and is to be repaired
// (always, unless report-only; then only if unapplied, its key's last
// update having failed). An error is the check's, with no verdict.
func (d *Check[Obj]) Run(ctx context.Context, txn statedb.ReadTxn, revision statedb.Revision, obj Obj, unapplied bool) (v Verdict, update bool, err error) {
	ok, err := d.check(ctx, txn, revision, obj)
	switch {
	case err != nil:
		return NotChecked, false, err
	case ok:
		return InSync, false, nil
	}
	return Drifted, !d.reportOnly || unapplied, nil
}

// Failing reports whether some keys' last update failed in report-only
// mode: Unapplied may say yes.
func (d *Check[Obj]) Failing() bool { return d != nil && d.reportOnly && len(d.rows.failed) > 0 }

// Unapplied reports whether key's last update failed (report-only).
func (d *Check[Obj]) Unapplied(key string) bool {
	_, ok := d.rows.failed[key]
	return ok
}

// Outcome is what an operation that ran did, as the drift rows see it.
type Outcome struct {
	Verdict   Verdict
	Err       error // the operation's (or the check's) error
	Delete    bool
	Applies   bool  // the check applied (Applies)
	Unapplied bool  // the key's last update failed (Unapplied)
	Repaired  int64 // the drift Update reported repaired (ReportRepaired)
}

// Row is what Settled found to record for an operation's key; Due says
// whether Record must be called.
type Row struct {
	left, failed, due bool
}

// Due reports whether the key's rows change: Record it.
func (r Row) Due() bool { return r.due }

// Settled returns the drift o repaired (one for a repair the check asked
// for, unless Update reported its own count) and what to record for its
// key: a drift left is counted and shown, and any other outcome for a
// drifted object's key (a change, a delete, in sync, a failure) ends its
// row.
func (d *Check[Obj]) Settled(o Outcome) (repaired int64, row Row) {
	row.left = d.reportOnly && o.Verdict == Drifted && o.Err == nil && !o.Unapplied
	repaired = o.Repaired
	if o.Verdict == Drifted && !row.left && o.Err == nil && repaired == 0 {
		repaired = 1 // the repair the check asked for
	}
	// An Update that failed; a check that failed leaves what was known.
	row.failed = d.reportOnly && o.Err != nil && !o.Delete && !(o.Applies && o.Verdict == NotChecked)
	row.due = row.left || row.failed || len(d.rows.set) > 0 || len(d.rows.failed) > 0
	return repaired, row
}

// Record records row, from Settled, for the operation's key.
func (d *Check[Obj]) Record(key string, row Row, err error) {
	rows := &d.rows
	switch {
	case row.failed:
		if rows.failed == nil {
			rows.failed = map[string]struct{}{}
		}
		rows.failed[key] = struct{}{}
	case err == nil:
		delete(rows.failed, key) // applied, or deleted
	}
	if row.left {
		rows.detected++
		rows.mark(key, true)
	} else if _, ok := rows.set[key]; ok {
		rows.mark(key, false)
	}
}

// Rows returns the drift rows, for the reconcilers and retries tables.
func (d *Check[Obj]) Rows() *Rows { return &d.rows }

// Rows are the objects a report-only drift check found drifted and left,
// for the retries table, and how many drifts it found. Owned by the
// loop's goroutine; the zero value is empty.
type Rows struct {
	detected uint64              // drifts found and left since Register
	set      map[string]struct{} // the keys drifted now
	changed  map[string]bool     // keys whose row changed since the last take: drifted or not
	// failed holds, in report-only mode, the keys whose last update
	// failed: as many as fail, as the key queue holds.
	failed map[string]struct{}
}

// Detected returns how many drifts were found and left.
func (d *Rows) Detected() uint64 { return d.detected }

// mark records key as drifted or no longer.
func (d *Rows) mark(key string, isDrifted bool) {
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

// AppendRows appends to retries, the rows made of outdated (the failure
// rows of the keys whose failures changed), the rows of the keys whose
// drift changed since the last call, for the reconciler id, keys shown
// with display, and forgets those changes. A key outdated holds keeps its
// failure row: a drift that ends removes no failure, and a drift found
// replaces the removal of the failure before it.
func AppendRows[V any](d *Rows, id string, retries []tables.RetryInfo, outdated map[string]V, display func(string) string) []tables.RetryInfo {
	if d == nil || len(d.changed) == 0 {
		return retries
	}
	for key, isDrifted := range d.changed {
		row := tables.RetryInfo{Reconciler: id, Key: display(key), Drifted: isDrifted}
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
