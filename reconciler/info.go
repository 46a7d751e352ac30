package reconciler

import (
	"time"

	"github.com/cilium/statedb"
	"github.com/converge-go/converge/metrics"
)

// totals are the running figures of a reconciler that its row in the
// reconcilers table shows. The loop owns them.
type totals struct {
	succeeded, failed uint64
	sinceSuccess      int // failed operations since the last that succeeded
	lastErr           string
	lastErrAt         time.Time
	refreshRepaired   int
}

// add counts a commit's figures.
func (t *totals) add(fig *commitFigures) {
	for _, c := range []*metrics.OutcomeCounts{&fig.stats.Update, &fig.stats.Delete} {
		ok := c[metrics.OutcomeSuccess]
		t.succeeded += uint64(ok)
		t.failed += uint64(c.Failed())
	}
	t.refreshRepaired += fig.stats.RefreshRepaired
}

// succeededLast records that an operation succeeded: the count of
// failures since one did starts again.
func (t *totals) succeededLast() { t.sinceSuccess = 0 }

// infoWriter keeps the reconciler's rows in the tables of TablesCell
// current. It writes only what changed since its last write.
type infoWriter[Obj any] struct {
	tables *Tables
	id     string
	last   Info // as last written, without the fields others write
}

func newInfoWriter[Obj any](tables *Tables, id string, keys *lifecycles[Obj]) *infoWriter[Obj] {
	if tables == nil {
		return nil
	}
	keys.trackOutdated()
	return &infoWriter[Obj]{tables: tables, id: id}
}

// write stores info as the reconciler's row if it differs from the last
// one written, and the rows of failing objects that changed.
func (w *infoWriter[Obj]) write(db *statedb.DB, info Info, retries map[string]*keyState[Obj]) {
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
		if s == nil || s.attempts == 0 {
			w.tables.retries.Delete(wtxn, &RetryInfo{Reconciler: w.id, Key: shown})
			continue
		}
		row := &RetryInfo{
			Reconciler:  w.id,
			Key:         shown,
			Delete:      s.task.delete,
			Attempts:    s.attempts,
			FirstFailed: s.first,
			LastError:   s.err.Error(),
		}
		if s.phase == phaseWaiting {
			row.NextAttempt = time.Unix(0, s.due)
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
