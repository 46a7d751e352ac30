// Package inforows keeps one reconciler's rows in the tables of package
// tables current: its row of the reconcilers table, and the rows of its
// failing keys in the retries table. It writes only what changed since
// its last write: its row when a figure changed, and the rows of the keys
// whose failures changed. The key queue tells it which keys those are and
// gives their records only as values (keyqueue.View), through View. It
// reads no clock and starts no goroutine; it is not safe for concurrent
// use.
package inforows

import (
	"encoding/hex"
	"strings"
	"time"
	"unicode"

	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/tables"
)

// Viewer is what the writer knows of a key whose failure changed: its
// record as a value. The zero value of a Viewer type stands for a failure
// that ended.
type Viewer[Obj any] interface {
	comparable
	View() keyqueue.View[Obj]
}

// Writer keeps the rows of one reconciler, identified by id. A nil
// *Writer (no tables to write to) does nothing.
type Writer[Obj any, V Viewer[Obj]] struct {
	tables  tables.Writer
	id      string
	last    tables.Info        // as last written
	retries []tables.RetryInfo // flush's buffer
	drift   *drift.Rows        // WithDriftCheck's drifted objects; nil without
	// outdated holds the keys whose row of the retries table is out of
	// date (see Changed): their failure changed since the last write,
	// with their record, or the zero V once it ended.
	outdated map[string]V
}

// New returns a writer of the rows of id to w, or nil if w is nil.
func New[Obj any, V Viewer[Obj]](w tables.Writer, id string) *Writer[Obj, V] {
	if w == nil {
		return nil
	}
	return &Writer[Obj, V]{tables: w, id: id, outdated: map[string]V{}}
}

// SetDrift has the rows of d (the drift check's drifted objects) written
// with the failures' rows.
func (w *Writer[Obj, V]) SetDrift(d *drift.Rows) { w.drift = d }

// OutdatedShrinkAbove is the size above which the keys out of date,
// written, are held anew, so that a burst of failures leaves no memory
// held at rest.
const OutdatedShrinkAbove = 1024

// Changed records that the failure of key changed (s its record), or
// ended (s the zero V): its row is written with the next Write.
func (w *Writer[Obj, V]) Changed(key string, s V) {
	w.outdated[key] = s
}

// Last returns the reconciler's row as last written.
func (w *Writer[Obj, V]) Last() tables.Info { return w.last }

// Write stores info as the reconciler's row if it differs from the last
// one written, and the rows of the keys whose failures changed since the
// last write (a failure that ended, or no attempts, removes a row).
func (w *Writer[Obj, V]) Write(info tables.Info) {
	if w == nil {
		return
	}
	w.flush(info, w.outdated)
	if len(w.outdated) > OutdatedShrinkAbove {
		w.outdated = map[string]V{} // give back what a burst took
	} else {
		clear(w.outdated)
	}
}

// WriteRow is Write but for the rows of the failing keys, which wait for
// the next Write.
func (w *Writer[Obj, V]) WriteRow(info tables.Info) {
	if w != nil {
		w.flush(info, nil)
	}
}

// flush is Write with the rows of the failing keys in outdated.
func (w *Writer[Obj, V]) flush(info tables.Info, outdated map[string]V) {
	info.ID = w.id
	var row *tables.Info
	if info != w.last {
		w.last = info
		row = new(tables.Info) // the table keeps it
		*row = info
	}
	var ended V
	for key, s := range outdated {
		retry := tables.RetryInfo{Reconciler: w.id, Key: DisplayKey(key)}
		if s == ended {
			w.retries = append(w.retries, retry)
			continue
		}
		if v := s.View(); v.Attempts > 0 {
			retry.Delete, retry.Attempts, retry.FirstFailed, retry.LastError = v.Task.Delete, v.Attempts, v.FirstFailed, v.Err.Error()
			retry.Errors = errorRecords(v)
			if v.Waiting {
				retry.NextAttempt = time.Unix(0, v.Due)
			}
		}
		w.retries = append(w.retries, retry)
	}
	if w.drift != nil {
		w.retries = drift.AppendRows(w.drift, w.id, w.retries, outdated, DisplayKey)
	}
	if row != nil || len(w.retries) > 0 {
		w.tables.Write(row, w.retries)
	}
	clear(w.retries)
	w.retries = w.retries[:0]
}

// errorRecords returns the recent errors of v for its row: a slice of its
// own, which the table keeps.
func errorRecords[Obj any](v keyqueue.View[Obj]) []tables.ErrorRecord {
	var buf [keyqueue.HistoryLen]keyqueue.ErrorRecord
	hist := v.History(buf[:0])
	if len(hist) == 0 {
		return nil
	}
	recs := make([]tables.ErrorRecord, len(hist))
	for i, h := range hist {
		recs[i] = tables.ErrorRecord{Error: h.Error, At: h.At, Attempt: h.Attempt}
	}
	return recs
}

// Refreshed records a refresh sweep's time in the reconciler's row.
func (w *Writer[Obj, V]) Refreshed(at time.Time) {
	if w != nil {
		w.tables.Refreshed(w.id, at)
	}
}

// DisplayKey renders a primary key for messages and the retries table: as
// is when it is printable text, in hex ("0x" followed by the bytes)
// otherwise. A printable key that itself starts with "0x" is shown in hex
// too, so that no two keys are shown the same.
func DisplayKey(key string) string {
	if strings.HasPrefix(key, "0x") {
		return "0x" + hex.EncodeToString([]byte(key))
	}
	for _, r := range key {
		if !unicode.IsPrint(r) {
			return "0x" + hex.EncodeToString([]byte(key))
		}
	}
	return key
}
