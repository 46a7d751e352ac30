package main

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/cilium/statedb"
	upstream "github.com/cilium/statedb/reconciler"

	"github.com/converge-go/converge/status"
)

// What a workload waits for and checks in an env.

// waitDone blocks until object id is Done.
func (e *env) waitDone(ctx context.Context, id uint64) error {
	for {
		o, _, watch, ok := e.tbl.GetWatch(e.db.ReadTxn(), idIndex.Query(id))
		if ok && e.isDone(o) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for object %d: %w", id, ctx.Err())
		case <-watch:
		}
	}
}

// waitAllDone blocks until no object is Pending, Refreshing or Error, as
// seen through the status index (setup.statusIndex must be set).
func (e *env) waitAllDone(ctx context.Context) error {
	for {
		txn := e.db.ReadTxn()
		var watches [3]<-chan struct{}
		busy := false
		for i := range watches {
			var seq iter.Seq2[*object, statedb.Revision]
			if e.s.impl == implUpstream {
				kind := [...]upstream.StatusKind{upstream.StatusKindPending, upstream.StatusKindRefreshing, upstream.StatusKindError}[i]
				seq, watches[i] = e.tbl.ListWatch(txn, upStatusIndex.Query(kind))
			} else {
				kind := [...]status.Kind{status.KindPending, status.KindRefreshing, status.KindError}[i]
				seq, watches[i] = e.tbl.ListWatch(txn, convStatusIndex.Query(kind))
			}
			for range seq {
				busy = true
				break
			}
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for all objects to be Done: %w", ctx.Err())
		case <-watches[0]:
		case <-watches[1]:
		case <-watches[2]:
		}
	}
}

// waitCaughtUp blocks until the reconciler has processed every change up to
// now (the floor and insert-only runs have nothing to wait for).
func (e *env) waitCaughtUp(ctx context.Context) error {
	rev := e.tbl.Revision(e.db.ReadTxn())
	var err error
	switch e.s.impl {
	case implConverge:
		_, _, err = e.conv.WaitUntilReconciled(ctx, rev)
	case implUpstream:
		_, _, err = e.up.WaitUntilReconciled(ctx, rev)
	}
	return err
}

func (e *env) prune() {
	switch e.s.impl {
	case implConverge:
		e.conv.Prune()
	case implUpstream:
		e.up.Prune()
	}
}

// checkAllDone scans the table and returns an error unless it holds n
// objects, all Done (and, if after is set, with a status written after it).
func (e *env) checkAllDone(n int, after time.Time) error {
	txn := e.db.ReadTxn()
	if got := e.tbl.NumObjects(txn); got != n {
		return fmt.Errorf("%s: table holds %d objects, want %d", e.s.impl, got, n)
	}
	for o := range e.tbl.All(txn) {
		updated := o.conv.UpdatedAt
		if e.s.impl == implUpstream {
			updated = o.up.UpdatedAt
		}
		if !e.isDone(o) || updated.Before(after) {
			return fmt.Errorf("%s: object %d not reconciled: converge %s, upstream %s", e.s.impl, o.id, o.conv, o.up)
		}
	}
	return nil
}
