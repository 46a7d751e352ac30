package reconciler

import (
	"context"
	"fmt"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/changes"
	"github.com/converge-go/converge/status"
)

// WithDependency re-reconciles objects when something they depend on
// changes: whenever an object of table is inserted, changed or deleted,
// mapper is called with it (and whether it was deleted) and returns queries
// on the reconciled table's primary index (for example
// routeByName.Query(name)) for the objects to reconcile again; a query
// marks the first object it finds, so one on a non-unique index marks one
// object only. Each object
// found is given a new status, in write transactions of up to a thousand
// objects, so that the table stays the only source of truth and other
// reconcilers sharing a status.Set are not disturbed: a Done or Error object
// is marked Refreshing, a Pending or Refreshing one gets a new status of
// the same kind and time, and one whose status is Unset (never to be
// reconciled) is left alone. The new status identity matters when the object's
// operation is already running with the dependency as it was: its outcome is
// then not recorded and the object is reconciled again, so no change of a
// dependency is missed. A mark is a write like any other: a writer that
// puts back an object it read before the mark (without CompareAndSwap)
// undoes it. A query that finds nothing is ignored.
//
// Several dependencies may be given. Each has a job ("dependency-<table>")
// that reads its table's changes from registration on, so that no change is
// missed between registration and start, across stops and starts of the
// hive, or while the reconciler is paused (marking goes on while paused;
// the objects are reconciled on Resume). mapper runs on that job's
// goroutine; it must not block. A mapper that panics is recovered (unless
// WithoutPanicRecovery) and the job's health says so. table must not be
// the reconciled table itself, which would mark its own changes forever.
//
// Obj must be the reconciled table's object type; Register refuses the
// option with ErrInvalidConfig otherwise, or if table or mapper is nil.
func WithDependency[Obj, Dep any](table statedb.Table[Dep], mapper func(dep Dep, deleted bool) []statedb.Query[Obj]) Option {
	return func(o *options) {
		o.by = "WithDependency"
		d := &dependency[Obj, Dep]{table: table, mapper: mapper}
		o.dependencies = append(o.dependencies, func(r any) (job.Job, error) {
			rr, ok := r.(*reconciler[Obj])
			if !ok {
				return nil, fmt.Errorf("reconciler.Register: WithDependency's queries are not of the reconciled table's object type: %w", ErrInvalidConfig)
			}
			return d.register(rr)
		})
	}
}

// dependency is one WithDependency option.
type dependency[Obj, Dep any] struct {
	table  statedb.Table[Dep]
	mapper func(Dep, bool) []statedb.Query[Obj]
}

// registerDependencies checks the dependencies and returns their jobs.
func registerDependencies[Obj any](r *reconciler[Obj]) ([]job.Job, error) {
	var jobs []job.Job
	for _, d := range r.opts.dependencies {
		j, err := d(r)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func (d *dependency[Obj, Dep]) register(r *reconciler[Obj]) (job.Job, error) {
	switch {
	case d.table == nil || d.mapper == nil:
		return nil, fmt.Errorf("reconciler.Register: WithDependency needs a table and a mapper: %w", ErrInvalidConfig)
	case d.table.Name() == r.objects.table.Name():
		return nil, fmt.Errorf("reconciler.Register: table %q cannot be a dependency of itself: %w", d.table.Name(), ErrInvalidConfig)
	}
	t := &dependencyTracker[Obj, Dep]{r: r, d: d, changes: changes.New(r.db, d.table)}
	return job.OneShot(r.jobName("dependency-"+d.table.Name()), t.run), nil
}

// dependencyTracker is the job of one dependency.
type dependencyTracker[Obj, Dep any] struct {
	r       *reconciler[Obj]
	d       *dependency[Obj, Dep]
	changes *changes.Feed[Dep] // across stops
}

func (t *dependencyTracker[Obj, Dep]) run(ctx context.Context, health cell.Health) error {
	if _, err := t.changes.Open(); err != nil {
		return fmt.Errorf("reading the changes of dependency %q: %w", t.d.table.Name(), err)
	}
	defer t.changes.Close()
	var queries []statedb.Query[Obj]
	reported := false
	for {
		seq, watch := t.changes.Next(t.r.db.ReadTxn())
		var mapErr, markErr error
		seen := 0
		for change := range seq {
			seen++
			mapped, err := t.mapped(change)
			if err != nil {
				mapErr = err
				continue
			}
			queries = append(queries, mapped...)
			if len(queries) >= refreshBatch {
				if err := t.mark(queries); err != nil {
					markErr = err
				}
				clear(queries)
				queries = queries[:0]
			}
		}
		// Health changes with the outcome of the changes seen; a pass
		// that saw none leaves it as it is.
		if err := t.mark(queries); err != nil {
			markErr = err
		}
		switch {
		case markErr != nil:
			health.Degraded("Failed to mark objects that depend on "+t.d.table.Name(), markErr)
		case mapErr != nil:
			health.Degraded("Failed to map a change of "+t.d.table.Name(), mapErr)
		case seen > 0 || !reported:
			health.OK("Watching " + t.d.table.Name())
		}
		reported = true
		clear(queries)
		queries = queries[:0]
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		}
	}
}

// mapped calls the mapper, turning a panic into an error unless
// WithoutPanicRecovery was given: a bug in the mapper must not stop the
// program, nor the objects of other changes from being marked.
func (t *dependencyTracker[Obj, Dep]) mapped(change statedb.Change[Dep]) (qs []statedb.Query[Obj], err error) {
	if t.r.opts.recoverPanics {
		defer func() {
			if v := recover(); v != nil {
				err = t.r.recovered("WithDependency mapper of "+t.d.table.Name(), v)
			}
		}()
	}
	return t.d.mapper(change.Object, change.Deleted), nil
}

// mark gives the objects that the queries find a new status, as
// WithDependency describes. A query that StateDB rejects (one on
// an index the table does not have panics in Get) is a bug in the mapper:
// nothing is marked and the error is returned.
func (t *dependencyTracker[Obj, Dep]) mark(queries []statedb.Query[Obj]) (err error) {
	if len(queries) == 0 {
		return nil
	}
	r := t.r
	now := r.clock.now()
	marked := 0
	wtxn := r.db.WriteTxn(r.objects.table)
	defer func() {
		if v := recover(); v != nil {
			wtxn.Abort()
			err = fmt.Errorf("WithDependency mapper for %q returned a bad query: %v", t.d.table.Name(), v)
			r.log.Error("Reconciler dependency failed", "error", err)
		}
	}()
	for _, q := range queries {
		obj, _, found := r.objects.table.Get(wtxn, q)
		if !found {
			continue
		}
		var st status.Status
		switch old := r.objects.getStatus(obj); old.Kind {
		case status.KindUnset:
			continue // never reconciled: a mark must not change that
		case status.KindPending:
			st = status.PendingAt(old.UpdatedAt)
		case status.KindRefreshing:
			st = status.RefreshingAt(old.UpdatedAt)
		default:
			st = status.RefreshingAt(now)
		}
		marked1 := r.objects.withStatus(obj, st)
		if _, ok := r.objects.keyOf(marked1); !ok {
			r.noKey("a dependency mark (setStatus removed it)", marked1)
			continue
		}
		if _, _, err := r.objects.table.Insert(wtxn, marked1); err == nil {
			marked++
		}
	}
	wtxn.Commit()
	if marked > 0 && r.rep.metrics.refresh != nil {
		r.rep.metrics.refresh.RefreshMarked(r.moduleID, r.opts.name, marked)
	}
	return nil
}
