package sets

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// Retire removes name's entry from every object's set, in write
// transactions of at most [MaxObjectsPerTxn] objects each, so that no
// object stays Pending for a name nobody serves and a wait over the set
// (status.Set.IsPendingOrRefreshing, reconciler.WaitForReconciliation on
// an index of it, [Table.Wait] without that name) does not hang. It
// returns how many objects it changed.
//
// Each object is read again in the transaction that writes it, so a write
// made since Retire began is never overwritten; an object that gains the
// entry after Retire has passed it keeps it (see [Retired], which follows
// the table). The other names' statuses are left as they are, identities
// included, so their reconcilers do not redo work. A reconciler of name
// still running would read the missing entry as Pending and reconcile the
// object again: retire a name once its reconciler is gone for good.
//
// It stops when ctx ends, returning the count so far and ctx's error: the
// transactions committed before stay. An empty name, or one that
// reconciler.WithName refuses, is an error wrapping
// reconciler.ErrInvalidConfig. Safe for concurrent use.
func (t *Table[Obj]) Retire(ctx context.Context, name string) (int, error) {
	if err := t.checkCall(ctx, "sets: Retire"); err != nil {
		return 0, err
	}
	if err := checkName("sets: Retire", name); err != nil {
		return 0, err
	}
	return t.retire(ctx, []string{name}, t.table.All(t.db.ReadTxn()))
}

// retire removes the entries of names from the objects of objs.
func (t *Table[Obj]) retire(ctx context.Context, names []string, objs func(func(Obj, statedb.Revision) bool)) (int, error) {
	return t.rewrite(ctx, "sets: Retire", objs, edit[Obj]{
		needs: func(_ string, s status.Set) bool {
			return slices.ContainsFunc(names, func(n string) bool { return has(s, n) })
		},
		change: func(s status.Set) status.Set {
			for _, n := range names {
				s = s.Delete(n)
			}
			return s
		},
	})
}

// retiredIn is what the Invoke of Retired takes from the hive.
type retiredIn[Obj any] struct {
	cell.In

	JobGroup job.Group
	Table    *Table[Obj]
}

// Retired declares names as reconcilers of a status.Set that left for
// good: their module is gone and is not coming back. It returns a cell
// that adds a job, "retire-sets", to the module's job.Group; the job
// removes the names' entries from every object of the [Table] the hive
// provides (provide one made with [Of]), as [Table.Retire] does, and then
// follows the table: an object written later that still names one (a
// writer that builds its set with status.Set.Pending("gone"), a restore
// of an old dump) has the entry removed in turn, so no object waits for a
// name nobody serves. It runs until the hive stops.
//
// The job writes nothing while the hive starts: it starts with the job
// group, after the start hooks before it have run, and waits until the
// table is initialized (every initializer registered on it has completed)
// before its first write. Its health, under the job's scope, is OK with
// the count of objects changed so far; an error (a function given to Of
// that panics) is reported Degraded and the job retried with backoff, from
// 100ms up to one minute.
//
// An empty name, or one that reconciler.WithName refuses, makes the
// Invoke fail with an error wrapping reconciler.ErrInvalidConfig, and so
// does no name at all.
func Retired[Obj any](names ...string) cell.Cell {
	return cell.Invoke(func(in retiredIn[Obj]) error {
		if len(names) == 0 {
			return fmt.Errorf("sets.Retired: no name given: %w", errInvalid)
		}
		for _, n := range names {
			if err := checkName("sets.Retired", n); err != nil {
				return err
			}
		}
		if in.Table == nil || in.Table.table == nil {
			return fmt.Errorf("sets.Retired: the hive provides a nil *sets.Table: %w", errInvalid)
		}
		in.JobGroup.Add(job.OneShot("retire-sets", in.Table.retiredJob(slices.Clone(names)),
			job.WithRetry(-1, &job.ExponentialBackoff{Min: 100 * time.Millisecond, Max: time.Minute})))
		return nil
	})
}

// retiredJob is the job of Retired.
func (t *Table[Obj]) retiredJob(names []string) job.OneShotFunc {
	return func(ctx context.Context, health cell.Health) error {
		for {
			initialized, watch := t.table.Initialized(t.db.ReadTxn())
			if initialized {
				break
			}
			health.OK(fmt.Sprintf("Waiting for table %q to be initialized", t.table.Name()))
			select {
			case <-ctx.Done():
				return nil
			case <-watch:
			}
		}
		var (
			changed int
			next    statedb.Revision // objects written at or after next are read
		)
		for {
			txn := t.db.ReadTxn()
			objs, watch := t.table.LowerBoundWatch(txn, statedb.ByRevision[Obj](next))
			n, err := t.retire(ctx, names, objs)
			changed += n
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				return err
			}
			next = t.table.Revision(txn) + 1
			health.OK(fmt.Sprintf("Retired %s: %d object(s) changed", strings.Join(names, ", "), changed))
			select {
			case <-ctx.Done():
				return nil
			case <-watch:
			}
		}
	}
}
