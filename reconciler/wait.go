package reconciler

import (
	"context"
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
