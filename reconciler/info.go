package reconciler

import (
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
)

// infoWriter keeps the reconciler's rows in the tables of TablesCell
// current. It writes only what changed since its last write.
type infoWriter[Obj any] struct {
	tables *Tables
	id     string
	last   Info // as last written, without the fields others write
}

func newInfoWriter[Obj any](tables *Tables, id string, lc *keyqueue.Queue[Obj]) *infoWriter[Obj] {
	if tables == nil {
		return nil
	}
	lc.TrackOutdated()
	return &infoWriter[Obj]{tables: tables, id: id}
}

// write stores info as the reconciler's row if it differs from the last
// one written, and the rows of failing objects that changed.
func (w *infoWriter[Obj]) write(db *statedb.DB, info Info, retries map[string]*keyqueue.State[Obj]) {
	if w == nil {
		return
	}
	info.ID = w.id
	if info == w.last && len(retries) == 0 {
		return
	}
	wtxn := db.WriteTxn(w.tables.reconcilers, w.tables.retries)
	defer wtxn.Commit()
	if info != w.last {
		// The refresh job writes LastRefresh; keep it.
		if cur, _, found := w.tables.reconcilers.Get(wtxn, InfoByID.Query(w.id)); found {
			info.LastRefresh = cur.LastRefresh
		}
		row := info
		w.tables.reconcilers.Insert(wtxn, &row)
		w.last = info
		w.last.LastRefresh = time.Time{}
	}
	for key, s := range retries {
		shown := displayKey(key)
		if s == nil || s.Attempts() == 0 {
			w.tables.retries.Delete(wtxn, &RetryInfo{Reconciler: w.id, Key: shown})
			continue
		}
		row := &RetryInfo{
			Reconciler:  w.id,
			Key:         shown,
			Delete:      s.Task().Delete,
			Attempts:    s.Attempts(),
			FirstFailed: s.FirstFailed(),
			LastError:   s.Err().Error(),
		}
		if due, waiting := s.Due(); waiting {
			row.NextAttempt = time.Unix(0, due)
		}
		w.tables.retries.Insert(wtxn, row)
	}
}

// refreshed records a refresh sweep's time in the reconciler's row.
func (w *infoWriter[Obj]) refreshed(db *statedb.DB, at time.Time) {
	if w == nil {
		return
	}
	wtxn := db.WriteTxn(w.tables.reconcilers)
	defer wtxn.Commit()
	row := Info{ID: w.id, State: StateRunning}
	if cur, _, found := w.tables.reconcilers.Get(wtxn, InfoByID.Query(w.id)); found {
		row = *cur
	}
	row.LastRefresh = at
	w.tables.reconcilers.Insert(wtxn, &row)
}
