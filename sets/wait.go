package sets

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// WaitOption changes what [Table.Wait] waits for. The zero set of options
// waits for Done.
type WaitOption func(*waitOptions)

type waitOptions struct {
	doneOrError bool
	snapshot    statedb.ReadTxn
}

// Snapshot makes [Table.Wait] wait for the objects of the table as of txn
// (for example the transaction a write's Commit returned) instead of those
// of the table at the call. A nil txn is ignored; a write transaction
// (statedb.WriteTxn, even committed) makes Wait fail with an error wrapping
// reconciler.ErrInvalidConfig, as Wait takes the table's lock, which the
// transaction may hold.
func Snapshot(txn statedb.ReadTxn) WaitOption {
	return func(o *waitOptions) { o.snapshot = txn }
}

// DoneOrError makes [Table.Wait] count an object settled for a name once its
// status is Done or Error, retryable or terminal, instead of waiting for
// the reconciler's retries to make it Done: use it when the first outcome
// is the answer the caller needs.
func DoneOrError() WaitOption {
	return func(o *waitOptions) { o.doneOrError = true }
}

// Wait blocks until every named reconciler has settled every object of the
// table as it is when Wait is called (its snapshot; see [Snapshot] for
// another): the status of each
// name is Done, or a terminal Error (the object is not retried until it
// changes, as for reconciler.WaitForObject), or with [DoneOrError] any
// Error. It returns nil if every status is Done, and an error wrapping
// reconciler.ErrObjectFailed that lists the first ten objects in Error
// (key, name, error; in key order) and counts the rest otherwise.
//
// Objects inserted after the snapshot are not waited for. An object of the
// snapshot deleted since is settled (its delete is the reconcilers'
// business: see Reconciler.WaitUntilReconciled); one changed since is
// waited for in its latest version, so a table written without pause may
// keep Wait waiting. A name missing from an object's set reads as Pending
// (status.Set.Get): a name that joins is waited for until its reconciler
// has reconciled every object, and a name that left must not be given
// (retire it, see [Table.Retire]).
//
// When ctx ends first, it returns an error wrapping ctx's error and
// [ErrNotSettled] that lists the first ten objects not settled (in key
// order) with the status of each name that holds them up, and counts the
// rest. No name, an empty one or a repeated one, a nil WaitOption and a
// write transaction given to [Snapshot] are errors wrapping
// reconciler.ErrInvalidConfig.
//
// Like reconciler.WaitForReconciliation, it does not need the reconcilers
// themselves and is safe to call from any goroutine. It wakes on the
// table's changes (a change iterator of its own, registered in a write
// transaction that takes the table's lock for no write, closed on return)
// and never polls; it keeps a map entry per object not settled.
func (t *Table[Obj]) Wait(ctx context.Context, names []string, opts ...WaitOption) error {
	if err := t.checkCall(ctx, "sets: Wait"); err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("sets: Wait: no name given: %w", reconciler.ErrInvalidConfig)
	}
	for i, n := range names {
		if err := checkName("sets: Wait", n); err != nil {
			return err
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("sets: Wait: name %q given twice: %w", n, reconciler.ErrInvalidConfig)
		}
	}
	var o waitOptions
	for _, opt := range opts {
		if opt == nil {
			return fmt.Errorf("sets: Wait: nil WaitOption: %w", reconciler.ErrInvalidConfig)
		}
		opt(&o)
	}
	if _, open := o.snapshot.(statedb.WriteTxn); open {
		// Wait takes the table's lock to register its change iterator: a
		// caller holding it in this write transaction would wait forever,
		// whatever ctx says.
		return fmt.Errorf("sets: Wait: Snapshot was given a write transaction; give it the ReadTxn its Commit returned: %w", reconciler.ErrInvalidConfig)
	}
	failed := map[string][]ObjectStatus{} // by key: the names in Error of its last version
	settled := func(s status.Set) (bool, []ObjectStatus) {
		var errs []ObjectStatus
		for _, n := range names {
			switch st := s.Get(n); {
			case st.Kind == status.KindDone:
			case st.Kind == status.KindError && (o.doneOrError || st.Terminal):
				errs = append(errs, ObjectStatus{Name: n, Status: st})
			default:
				return false, nil
			}
		}
		return true, errs
	}
	f := follower[Obj]{t: t, remaining: map[string]Obj{}, seed: o.snapshot == nil}
	f.settle = func(key string, obj Obj, deleted bool) (bool, error) {
		delete(failed, key)
		if deleted {
			return true, nil
		}
		s, err := t.statuses(obj)
		if err != nil {
			return false, err
		}
		ok, errs := settled(s)
		if len(errs) > 0 {
			for i := range errs {
				errs[i].Key = showKey(key)
			}
			failed[key] = errs
		}
		return ok, nil
	}
	if o.snapshot != nil {
		for obj := range t.table.All(o.snapshot) {
			if key, ok := t.key(obj); ok {
				f.remaining[key] = obj // the first batch of changes settles it
			}
		}
	}
	if err := f.run(ctx); err != nil {
		if ctx.Err() == nil {
			return err
		}
		unsettled := func(key string) []ObjectStatus {
			s, err := t.statuses(f.remaining[key])
			if err != nil {
				return nil
			}
			var out []ObjectStatus
			for _, n := range names {
				if st := s.Get(n); st.Kind != status.KindDone && !(st.Kind == status.KindError && (o.doneOrError || st.Terminal)) {
					out = append(out, ObjectStatus{Key: showKey(key), Name: n, Status: st})
				}
			}
			return out
		}
		return fmt.Errorf("sets: Wait for %s on table %q: %w: %w: %d object(s) not settled: %s",
			strings.Join(names, ", "), t.table.Name(), ctx.Err(), ErrNotSettled, len(f.remaining), waiting(sortedKeys(f.remaining), unsettled))
	}
	if len(failed) == 0 {
		return nil
	}
	var errs []ObjectStatus
	for _, key := range sortedKeys(failed) {
		errs = append(errs, failed[key]...)
	}
	return fmt.Errorf("sets: Wait for %s on table %q: %d object(s) failed: %s: %w",
		strings.Join(names, ", "), t.table.Name(), len(failed), list(errs), reconciler.ErrObjectFailed)
}
