package commit

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

// prepare sets on each update's clone the status its outcome calls for and
// returns how many there are to write.
func (c *Committer[Obj]) prepare(ops []work.Op[Obj], now time.Time) (writes int) {
	for i := range ops {
		o := &ops[i]
		if !o.Ran || o.Delete {
			continue
		}
		o.Updated = c.cfg.Objects.SetStatus(o.Updated, outcomeStatus(o, now))
		writes++
	}
	return writes
}

// outcomeStatus is the status the outcome of o, an update that ran, calls
// for.
func outcomeStatus[Obj any](o *work.Op[Obj], now time.Time) status.Status {
	switch {
	case o.Err == nil:
		return status.DoneAt(now)
	case work.IsTerminal(o.Err):
		return status.TerminalErrorAt(now, o.Err)
	default:
		return status.ErrorAt(now, o.Err)
	}
}

// write stores the prepared statuses in one write transaction, sets each
// op's Written (and Over, for a write over a changed object; see
// writeStatus), and adds the revisions it wrote to c.wrote.
func (c *Committer[Obj]) write(ops []work.Op[Obj], now time.Time) {
	table := c.cfg.Objects.Table
	wtxn := c.cfg.DB.WriteTxn(table)
	lo := table.Revision(wtxn) // the table's revision before the writes
	for i := range ops {
		if o := &ops[i]; o.Ran && !o.Delete {
			c.writeOp(wtxn, o, now)
		}
	}
	if hi := table.Revision(wtxn); hi > lo {
		c.wrote = append(c.wrote, Range{lo + 1, hi})
	}
	wtxn.Commit()
}

// writeOp writes the status of o, an update that ran, and sets its Written
// and Over.
func (c *Committer[Obj]) writeOp(wtxn statedb.WriteTxn, o *work.Op[Obj], now time.Time) {
	o.Written, o.Over = c.writeStatus(wtxn, o)
	if !o.Written && o.NoKey {
		// Update changed the fields the primary index reads: its
		// changes cannot be stored. Record that on the object as
		// it was.
		o.Err = fmt.Errorf("%w: Update left the object without one", work.ErrNoPrimaryKey)
		o.Updated = c.cfg.Objects.WithStatus(o.Obj, status.ErrorAt(now, o.Err))
		o.Written, o.Over = c.writeStatus(wtxn, o)
	}
}

// writeStatus stores o.Updated with a compare-and-swap on the revision o
// applied. An object changed since still gets the status if it carries the
// very status that asked for o, unless a delete or a prune came between
// (see keyqueue.View.Superseded); a newer version is left to its own turn.
// over reports such a write over a changed object: what was read since is
// older.
func (c *Committer[Obj]) writeStatus(wtxn statedb.WriteTxn, o *work.Op[Obj]) (written, over bool) {
	objs := c.cfg.Objects
	cur, found, err := objs.Table.CompareAndSwap(wtxn, o.Rev, o.Updated)
	switch {
	case err == nil && !found:
		// StateDB stores nothing for an object without a primary key and
		// says so only this way (a compare-and-swap needs the object).
		if o.NoKey {
			work.LogNoKey(c.cfg.Log, "a status write (setStatus removed it)", o.Updated)
		}
		o.NoKey = true
		return false, false
	case err == nil:
		return true, false
	case !found || !errors.Is(err, statedb.ErrRevisionNotEqual):
		return false, false
	case o.S != nil && o.S.View().Superseded:
		return false, false
	case o.StatusID == 0 || objs.GetStatus(cur).ID() != o.StatusID:
		if ch, ok := objs.WrittenBack(cur, o.StatusID); ok {
			c.cfg.Queue.Add(ch)
		}
		return false, false
	}
	if _, _, err := objs.Table.Insert(wtxn, objs.WithStatus(cur, objs.GetStatus(o.Updated))); err != nil {
		c.cfg.Log.Error("Reconciler failed to write status", "error", err)
		return false, false
	}
	return true, true
}
