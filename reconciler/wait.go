package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// WaitForReconciliation blocks until no object of table has a Pending or
// Refreshing status, as seen through statusIndex (see
// index.NewStatusIndex), or until ctx ends, returning ctx's error. It
// returns an error wrapping [ErrIndexNotFound] if statusIndex is not an
// index of table. It is safe to call from any goroutine.
func WaitForReconciliation[Obj any](ctx context.Context, db *statedb.DB, table statedb.Table[Obj], statusIndex statedb.Index[Obj, status.Kind]) error {
	if db == nil || table == nil {
		return fmt.Errorf("WaitForReconciliation: db and table must not be nil: %w", ErrInvalidConfig)
	}
	if !slices.Contains(table.Indexes(), statusIndex.Name) {
		return fmt.Errorf("WaitForReconciliation: table %q has no index %q: %w", table.Name(), statusIndex.Name, ErrIndexNotFound)
	}
	for {
		txn := db.ReadTxn()
		pending, pendingWatch := table.ListWatch(txn, statusIndex.Query(status.KindPending))
		refreshing, refreshingWatch := table.ListWatch(txn, statusIndex.Query(status.KindRefreshing))
		if isEmpty(pending) && isEmpty(refreshing) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pendingWatch:
		case <-refreshingWatch:
		}
	}
}

func isEmpty[A, B any](seq func(func(A, B) bool)) bool {
	for range seq {
		return false
	}
	return true
}

// WaitOption changes what [WaitForObject] waits for. The zero set of options
// waits for Done, through Error statuses, and for an absent object to appear.
type WaitOption func(*waitOptions)

type waitOptions struct {
	stopOnError  bool
	failIfAbsent bool
}

// StopOnError makes [WaitForObject] return as soon as the object's status is
// Error, with an error wrapping [ErrObjectFailed], instead of waiting for a
// retry to succeed: use it when the first failure is the answer the caller
// needs. Without it, WaitForObject returns on terminal errors only.
func StopOnError() WaitOption {
	return func(o *waitOptions) { o.stopOnError = true }
}

// FailIfAbsent makes [WaitForObject] return an error wrapping
// [ErrObjectNotFound] when no object matches the query at the first look,
// instead of waiting for one to be inserted. Use it when the object's
// insertion has committed before the call, so that absence means it was
// deleted already.
func FailIfAbsent() WaitOption {
	return func(o *waitOptions) { o.failIfAbsent = true }
}

// WaitForObject blocks until the object of table that query selects has
// been reconciled, and returns the object as last read. query should select
// one object, usually by primary key; on a non-unique index the first match
// is taken. It must be a query on an index of table. getStatus reads the
// object's status for the reconciler of interest, for example
// func(o *T) status.Status { return o.Statuses.Get("routes") } with a
// [status.Set].
//
// It returns:
//
//   - the object and a nil error once its status is Done;
//   - the object and an error wrapping [ErrObjectFailed] once its status is
//     a terminal Error ([status.Status.Terminal], written for errors marked
//     with [TerminalError]); the error is terminal too ([IsTerminal]);
//   - with [StopOnError], the object and an error wrapping [ErrObjectFailed]
//     once its status is any Error;
//   - the object as last seen and an error wrapping [ErrObjectDeleted] if
//     the object is deleted after WaitForObject has seen it;
//   - with [FailIfAbsent], an error wrapping [ErrObjectNotFound] if no object
//     matches at the first look;
//   - the object as last seen (the zero value if never seen) and an error
//     wrapping ctx.Err(), whose text gives the last status seen, when ctx
//     ends;
//   - an error wrapping [ErrInvalidConfig] if db, table or getStatus is nil.
//
// Pending, Refreshing and Unset statuses keep it waiting, and so, without
// [StopOnError], do retryable Error statuses: the reconciler retries them
// and a later attempt may succeed. Bound ctx: an object whose target keeps
// failing is retried for ever.
//
// If no object matches yet, it waits for one to appear (unless
// [FailIfAbsent]), so it may be called before the insertion it waits for
// commits. It reports the status of whatever version it reads: called before
// a change to an object that is already Done, it returns at once; to wait for
// a particular write, call it after that write has committed with a Pending
// status.
//
// It wakes on the table's watch channels and never polls. It is safe to call
// from any goroutine, and does not need the reconciler itself.
func WaitForObject[Obj any](ctx context.Context, db *statedb.DB, table statedb.Table[Obj], query statedb.Query[Obj], getStatus func(Obj) status.Status, opts ...WaitOption) (Obj, error) {
	var last Obj
	if db == nil || table == nil || getStatus == nil {
		return last, fmt.Errorf("WaitForObject: db, table and getStatus must not be nil: %w", ErrInvalidConfig)
	}
	var o waitOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var (
		seen   bool
		lastSt status.Status
	)
	for {
		obj, _, watch, found := table.GetWatch(db.ReadTxn(), query)
		switch {
		case found:
			seen, last, lastSt = true, obj, getStatus(obj)
			switch {
			case lastSt.Kind == status.KindDone:
				return obj, nil
			case lastSt.Kind == status.KindError && lastSt.Terminal:
				return obj, fmt.Errorf("WaitForObject: table %q: %w: %w", table.Name(), ErrObjectFailed, TerminalError(errors.New(lastSt.Error)))
			case lastSt.Kind == status.KindError && o.stopOnError:
				return obj, fmt.Errorf("WaitForObject: table %q: %w: %s", table.Name(), ErrObjectFailed, lastSt.Error)
			}
		case seen:
			return last, fmt.Errorf("WaitForObject: table %q: %w", table.Name(), ErrObjectDeleted)
		case o.failIfAbsent:
			return last, fmt.Errorf("WaitForObject: table %q: %w", table.Name(), ErrObjectNotFound)
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("WaitForObject: table %q: %w (%s)", table.Name(), ctx.Err(), describeLast(seen, lastSt))
		case <-watch:
		}
	}
}

// describeLast says what WaitForObject last saw, for its error on ctx end.
func describeLast(seen bool, st status.Status) string {
	switch {
	case !seen:
		return "no object matched the query"
	case st.Kind == status.KindError:
		return "last status Error: " + st.Error
	default:
		return "last status " + st.Kind.String()
	}
}
