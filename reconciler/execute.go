package reconciler

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
)

// op is one unit of work: applying or deleting one version of one object.
type op[Obj any] struct {
	obj      Obj // the object as stored in the table (or as deleted)
	updated  Obj // for updates: the clone handed to Update
	rev      statedb.Revision
	key      string    // primary key; filled in only where needed
	statusID uint64    // identity of the status that asked for this work
	since    time.Time // when that status was written
	attempts int       // failures of this version so far
	delete   bool
	err      error
}

// executor runs operations. The loop has one and so does every worker; its
// buffers are reused from one call to the next.
type executor[Obj any] struct {
	r       *reconciler[Obj]
	updates []BatchEntry[Obj]
	deletes []BatchEntry[Obj]
}

// run applies ops, recording each outcome in op.err. It stops early, leaving
// the rest untouched, if ctx ends.
func (e *executor[Obj]) run(ctx context.Context, txn statedb.ReadTxn, ops []op[Obj]) {
	if e.r.batchOps != nil {
		e.runBatch(ctx, txn, ops)
		return
	}
	r := e.r
	// One clock read per operation: each operation's end is the next one's
	// start.
	start := time.Now()
	for i := range ops {
		if ctx.Err() != nil {
			return
		}
		o := &ops[i]
		name := metrics.OpUpdate
		if o.delete {
			name = metrics.OpDelete
			o.err = r.call(ctx, txn, callDelete, o, nil)
		} else {
			o.updated = r.clone(o.obj)
			o.err = r.call(ctx, txn, callUpdate, o, nil)
		}
		end := time.Now()
		r.metrics.ReconciliationDuration(r.moduleID, r.opts.name, name, end.Sub(start))
		start = end
	}
}

// runBatch applies ops with BatchOperations: deletes first, then updates.
func (e *executor[Obj]) runBatch(ctx context.Context, txn statedb.ReadTxn, ops []op[Obj]) {
	r := e.r
	e.updates, e.deletes = e.updates[:0], e.deletes[:0]
	for i := range ops {
		o := &ops[i]
		if o.delete {
			e.deletes = append(e.deletes, BatchEntry[Obj]{Object: o.obj, Revision: o.rev, op: o})
		} else {
			o.updated = r.clone(o.obj)
			e.updates = append(e.updates, BatchEntry[Obj]{Object: o.updated, Revision: o.rev, op: o})
		}
	}
	if len(e.deletes) > 0 && ctx.Err() == nil {
		start := time.Now()
		err := r.call(ctx, txn, callDeleteBatch, nil, e.deletes)
		r.metrics.ReconciliationDuration(r.moduleID, r.opts.name, metrics.OpDelete, time.Since(start))
		for i := range e.deletes {
			e.deletes[i].op.err = firstErr(err, e.deletes[i].Result)
		}
	}
	if len(e.updates) > 0 && ctx.Err() == nil {
		start := time.Now()
		err := r.call(ctx, txn, callUpdateBatch, nil, e.updates)
		r.metrics.ReconciliationDuration(r.moduleID, r.opts.name, metrics.OpUpdate, time.Since(start))
		for i := range e.updates {
			entry := &e.updates[i]
			entry.op.updated = entry.Object
			entry.op.err = firstErr(err, entry.Result)
		}
	}
	clear(e.updates) // drop references to objects until the next call
	clear(e.deletes)
}

// What call invokes.
const (
	callUpdate = iota
	callDelete
	callUpdateBatch
	callDeleteBatch
	callPrune
)

var callNames = [...]string{"update", "delete", "update batch", "delete batch", "prune"}

// call invokes one operation (o for single ones, batch for batches, neither
// for prune) with the operation timeout and, unless
// disabled, turns a panic into an error wrapping ErrPanic, logging it with
// its stack. It takes its arguments rather than a closure so that the hot
// path does not allocate.
func (r *reconciler[Obj]) call(ctx context.Context, txn statedb.ReadTxn, which int, o *op[Obj], batch []BatchEntry[Obj]) (err error) {
	if r.opts.operationTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.operationTimeout)
		defer cancel()
	}
	if r.opts.recoverPanics {
		defer func() {
			if v := recover(); v != nil {
				err = r.recovered(callNames[which], v)
			}
		}()
	}
	switch which {
	case callUpdate:
		return r.ops.Update(ctx, txn, o.rev, o.updated)
	case callDelete:
		return r.ops.Delete(ctx, txn, o.rev, o.obj)
	case callUpdateBatch:
		r.batchOps.UpdateBatch(ctx, txn, batch)
	case callDeleteBatch:
		r.batchOps.DeleteBatch(ctx, txn, batch)
	case callPrune:
		return r.ops.Prune(ctx, txn, r.table.All(txn))
	}
	return nil
}

// recovered logs a recovered panic with its stack and returns it as an
// error wrapping ErrPanic. It must be called from the deferred function.
func (r *reconciler[Obj]) recovered(what string, v any) error {
	r.log.Error("Reconciler operation panicked; recorded as its error",
		"operation", what, "panic", v, "stack", string(debug.Stack()))
	return panicError(v)
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
