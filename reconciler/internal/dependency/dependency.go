// Package dependency is the job of one WithDependency option: it reads the
// changes of a table the reconciled objects depend on and gives each
// object its mapper names a new status, so that the reconcile job, which
// reads only the reconciled table, takes it again. See [Tracker].
//
// The tracker writes to the reconciled table and nowhere else: the table
// stays the only source of truth, and other reconcilers sharing a
// status.Set are not disturbed. It knows nothing of the reconcile job.
package dependency

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/changes"
	"github.com/converge-go/converge/status"
)

// batch is how many objects one write transaction marks.
const batch = 1000

// Config is what New needs. Recover and Marked may be nil; the rest is
// required. The functions are called on Run's goroutine.
type Config[Obj, Dep any] struct {
	DB    *statedb.DB
	Table statedb.RWTable[Obj] // the reconciled table, whose objects are marked
	Dep   statedb.Table[Dep]   // the table depended on; not Table
	// Mapper returns, for a change of Dep, queries on Table's primary
	// index for the objects to reconcile again. It must not block.
	Mapper func(dep Dep, deleted bool) []statedb.Query[Obj]

	// Status reads the reconciler's status of an object; WithStatus
	// returns a copy of it carrying st (the object read is shared).
	Status     func(Obj) status.Status
	WithStatus func(obj Obj, st status.Status) Obj
	// Keyed reports whether an object WithStatus returned still has its
	// primary key; one without is left alone (Keyed says so where it
	// should be said).
	Keyed func(Obj) bool
	Now   func() time.Time
	// Recover, if not nil, turns a panic of Mapper (v, as recovered) into
	// an error, from the deferred function; nil lets the panic through.
	Recover func(what string, v any) error
	// Marked is told how many objects a write transaction marked, if any.
	Marked func(n int)
	// Failed is told of a query StateDB rejected (see Run), to log it.
	Failed func(err error)
}

// Tracker follows one dependency: its change feed, opened by Run and
// kept across stops, so that no change is missed between New and Run, nor
// while the job is stopped. Make one with New; the zero value is not
// usable. Run is the job: one goroutine runs it at a time.
type Tracker[Obj, Dep any] struct {
	cfg     Config[Obj, Dep]
	changes *changes.Feed[Dep] // across stops
	queries []statedb.Query[Obj]
}

// New returns the tracker of cfg.Dep, reading its changes from now on.
func New[Obj, Dep any](cfg Config[Obj, Dep]) *Tracker[Obj, Dep] {
	return &Tracker[Obj, Dep]{cfg: cfg, changes: changes.New(cfg.DB, cfg.Dep)}
}

// Run marks the objects the changes of the dependency map to, as they
// come, until ctx ends; it returns nil then. Health changes with the
// outcome of the changes seen (a pass that sees none leaves it as it is):
// Degraded while marking or mapping fails, else OK.
func (t *Tracker[Obj, Dep]) Run(ctx context.Context, health cell.Health) error {
	name := t.cfg.Dep.Name()
	if _, err := t.changes.Open(); err != nil {
		return fmt.Errorf("reading the changes of dependency %q: %w", name, err)
	}
	defer t.changes.Close()
	reported := false
	for {
		watch, seen, mapErr, markErr := t.pass()
		switch {
		case markErr != nil:
			health.Degraded("Failed to mark objects that depend on "+name, markErr)
		case mapErr != nil:
			health.Degraded("Failed to map a change of "+name, mapErr)
		case seen > 0 || !reported:
			health.OK("Watching " + name)
		}
		reported = true
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		}
	}
}

// pass reads the changes not read yet and marks what they map to. It
// returns a channel closed when there are more, how many it saw, and the
// last error of the mapper and of marking.
func (t *Tracker[Obj, Dep]) pass() (watch <-chan struct{}, seen int, mapErr, markErr error) {
	seq, watch := t.changes.Next(t.cfg.DB.ReadTxn())
	flush := func() {
		if err := t.mark(t.queries); err != nil {
			markErr = err
		}
		clear(t.queries)
		t.queries = t.queries[:0]
	}
	for change := range seq {
		seen++
		mapped, err := t.mapped(change)
		if err != nil {
			mapErr = err
			continue
		}
		t.queries = append(t.queries, mapped...)
		if len(t.queries) >= batch {
			flush()
		}
	}
	flush()
	return watch, seen, mapErr, markErr
}

// mapped calls the mapper, turning a panic into an error if Recover is
// set: a bug in the mapper must not stop the program, nor the objects of
// other changes from being marked.
func (t *Tracker[Obj, Dep]) mapped(change statedb.Change[Dep]) (qs []statedb.Query[Obj], err error) {
	if t.cfg.Recover != nil {
		defer func() {
			if v := recover(); v != nil {
				err = t.cfg.Recover("WithDependency mapper of "+t.cfg.Dep.Name(), v)
			}
		}()
	}
	return t.cfg.Mapper(change.Object, change.Deleted), nil
}

// Mark returns the status an object marked for a dependency gets in place
// of old, or false to leave it: a Done object is marked Refreshing (at
// now), an Error one Pending (at now: a version whose last attempt failed
// stays one to apply, as a drift check looks only at Refreshing objects,
// and report-only, finding the target without it, would write it Done), a
// Pending or Refreshing one gets a new status of the same kind and time,
// and one whose status is Unset (never to be reconciled) is left alone.
// The new status's identity is what makes an operation already running
// with the dependency as it was not count. sets.Table.Refresh marks so
// too.
func Mark(old status.Status, now time.Time) (status.Status, bool) {
	switch old.Kind {
	case status.KindUnset:
		return status.Status{}, false
	case status.KindPending:
		return status.PendingAt(old.UpdatedAt), true
	case status.KindRefreshing:
		return status.RefreshingAt(old.UpdatedAt), true
	case status.KindError:
		return status.PendingAt(now), true
	}
	return status.RefreshingAt(now), true
}

// mark gives the objects that the queries find a new status (see Mark),
// in one write transaction. A query that StateDB rejects (one on an
// index the table does not have panics in Get) is a bug in the mapper:
// nothing is marked and the error is returned. A query that finds
// nothing is ignored.
func (t *Tracker[Obj, Dep]) mark(queries []statedb.Query[Obj]) (err error) {
	if len(queries) == 0 {
		return nil
	}
	c := &t.cfg
	now := c.Now()
	marked := 0
	wtxn := c.DB.WriteTxn(c.Table)
	defer func() {
		if v := recover(); v != nil {
			wtxn.Abort()
			err = fmt.Errorf("WithDependency mapper for %q returned a bad query: %v", c.Dep.Name(), v)
			c.Failed(err)
		}
	}()
	for _, q := range queries {
		obj, _, found := c.Table.Get(wtxn, q)
		if !found {
			continue
		}
		st, ok := Mark(c.Status(obj), now)
		if !ok {
			continue // never reconciled: a mark must not change that
		}
		obj = c.WithStatus(obj, st)
		if !c.Keyed(obj) {
			continue
		}
		if _, _, err := c.Table.Insert(wtxn, obj); err == nil {
			marked++
		}
	}
	wtxn.Commit()
	if marked > 0 && c.Marked != nil {
		c.Marked(marked)
	}
	return nil
}
