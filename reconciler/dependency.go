package reconciler

import (
	"fmt"
	"time"

	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/dependency"
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
// reconcilers sharing a status.Set are not disturbed: a Done object is
// marked Refreshing, an Error one Pending (a version whose last attempt
// failed is applied again, never only checked: see [WithDriftCheck]), a
// Pending or Refreshing one gets a new status of the same kind and time,
// and one whose status is Unset (never to be reconciled) is left alone. The new status identity matters when the object's
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
		d := &dependencyOpt[Obj, Dep]{table: table, mapper: mapper}
		o.dependencies = append(o.dependencies, func(r any) (job.Job, error) {
			rr, ok := r.(*reconciler[Obj])
			if !ok {
				return nil, fmt.Errorf("reconciler.Register: WithDependency's queries are not of the reconciled table's object type: %w", ErrInvalidConfig)
			}
			return d.register(rr)
		})
	}
}

// dependencyOpt is one WithDependency option.
type dependencyOpt[Obj, Dep any] struct {
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

func (d *dependencyOpt[Obj, Dep]) register(r *reconciler[Obj]) (job.Job, error) {
	switch {
	case d.table == nil || d.mapper == nil:
		return nil, fmt.Errorf("reconciler.Register: WithDependency needs a table and a mapper: %w", ErrInvalidConfig)
	case d.table.Name() == r.objects.Table.Name():
		return nil, fmt.Errorf("reconciler.Register: table %q cannot be a dependency of itself: %w", d.table.Name(), ErrInvalidConfig)
	}
	cfg := dependency.Config[Obj, Dep]{
		DB: r.db, Table: r.objects.Table, Dep: d.table, Mapper: d.mapper,
		Status: r.objects.GetStatus, WithStatus: r.objects.WithStatus,
		Now:    func() time.Time { return r.clock.now() },
		Failed: func(err error) { r.log.Error("Reconciler dependency failed", "error", err) },
		Keyed: func(obj Obj) bool {
			_, ok := r.objects.KeyOf(obj)
			if !ok {
				r.noKey("a dependency mark (setStatus removed it)", obj)
			}
			return ok
		},
	}
	if r.opts.recoverPanics {
		cfg.Recover = r.recovered
	}
	if m := r.rep.metrics.Refresh; m != nil {
		cfg.Marked = func(n int) { m.RefreshMarked(r.moduleID, r.opts.name, n) }
	}
	return job.OneShot(r.jobName("dependency-"+d.table.Name()), dependency.New(cfg).Run), nil
}
