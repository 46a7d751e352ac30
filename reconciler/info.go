package reconciler

import (
	"time"

	"github.com/converge-go/converge/reconciler/internal/drift"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/tables"
)

// infoWriter keeps the reconciler's rows in the tables of Params.Tables
// current. It writes only what changed since its last write: its row when
// a figure changed, and the rows of the keys whose failures changed.
type infoWriter[Obj any] struct {
	tables  tables.Writer
	id      string
	last    tables.Info        // as last written
	retries []tables.RetryInfo // write's buffer
	drift   *drift.Rows        // WithDriftCheck's drifted objects; nil without
	// outdated holds the keys whose row of the retries table is out of
	// date, as the key queue tells them (see failureChanged): their
	// failure changed since the last write, with their State, or nil once
	// it ended.
	outdated map[string]*keyqueue.State[Obj]
}

func newInfoWriter[Obj any](w tables.Writer, id string, lc *keyqueue.Queue[Obj]) *infoWriter[Obj] {
	if w == nil {
		return nil
	}
	iw := &infoWriter[Obj]{tables: w, id: id, outdated: map[string]*keyqueue.State[Obj]{}}
	lc.Configure(keyqueue.Settings[Obj]{FailureChanged: iw.failureChanged})
	return iw
}

// outdatedShrinkAbove is the size above which infoWriter.outdated,
// written, is made anew, so that a burst of failures leaves no memory held
// at rest.
const outdatedShrinkAbove = 1024

// failureChanged records that the failure of key changed (s its State),
// or ended (s nil): its row is written with the next write.
func (w *infoWriter[Obj]) failureChanged(key string, s *keyqueue.State[Obj]) {
	w.outdated[key] = s
}

// write stores info as the reconciler's row if it differs from the last
// one written, and the rows of the keys whose failures changed since the
// last write (a failure that ended, or no attempts, removes a row).
func (w *infoWriter[Obj]) write(info tables.Info) {
	if w == nil {
		return
	}
	w.flush(info, w.outdated)
	if len(w.outdated) > outdatedShrinkAbove {
		w.outdated = map[string]*keyqueue.State[Obj]{} // give back what a burst took
	} else {
		clear(w.outdated)
	}
}

// writeRow is write but for the rows of the failing keys, which wait for
// the next write.
func (w *infoWriter[Obj]) writeRow(info tables.Info) {
	if w != nil {
		w.flush(info, nil)
	}
}

// flush is write with the rows of the failing keys in outdated.
func (w *infoWriter[Obj]) flush(info tables.Info, outdated map[string]*keyqueue.State[Obj]) {
	info.ID = w.id
	var row *tables.Info
	if info != w.last {
		w.last = info
		row = new(tables.Info) // the table keeps it
		*row = info
	}
	for key, s := range outdated {
		retry := tables.RetryInfo{Reconciler: w.id, Key: displayKey(key)}
		if s == nil {
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
	w.retries = drift.AppendRows(w.drift, w.id, w.retries, outdated, displayKey)
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

// refreshed records a refresh sweep's time in the reconciler's row.
func (w *infoWriter[Obj]) refreshed(at time.Time) {
	if w != nil {
		w.tables.Refreshed(w.id, at)
	}
}
