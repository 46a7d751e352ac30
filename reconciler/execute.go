package reconciler

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
)

// op is one unit of work: applying or deleting one version of one object.
type op[Obj any] struct {
	obj      Obj // the object to apply, or the deleted object
	updated  Obj // for updates: the clone handed to Update
	rev      statedb.Revision
	key      string    // primary key; filled in only where needed
	statusID uint64    // identity of the object's status in the table
	since    time.Time // when the status that asked for the work was written
	attempts int       // failures of this version so far
	ready    int64     // when the work became ready (Unix ns): since, a deletion, a retry's time
	started  int64     // when the operation started (Unix ns)
	delete   bool
	refresh  bool // an update asked for by a Refreshing status
	ran      bool // the operation returned, and err is its outcome
	// Set by commit: the status is to be written (write), was written
	// (written), over a changed object (changed).
	write, written, changed bool
	err                     error
}

// executor runs operations. The loop has one and so does every worker; its
// buffers are reused from one call to the next.
type executor[Obj any] struct {
	r       *reconciler[Obj]
	updates batch[Obj]
	deletes batch[Obj]

	// drift counts ReportRepaired calls; ctx is the context given to run
	// with drift attached, made once for each new parent context.
	drift  driftCounter
	parent context.Context
	ctx    context.Context
}

// withDrift returns ctx with the executor's drift counter attached. The
// loop and each worker always run with the same context, so this
// allocates once.
func (e *executor[Obj]) withDrift(ctx context.Context) context.Context {
	if ctx != e.parent {
		e.parent, e.ctx = ctx, context.WithValue(ctx, driftKey{}, &e.drift)
	}
	return e.ctx
}

// batch is the argument of one batch operation and, entry by entry, the op
// each entry stands for.
type batch[Obj any] struct {
	entries []BatchEntry[Obj]
	ops     []*op[Obj]
}

func (b *batch[Obj]) add(o *op[Obj], obj Obj) {
	b.entries = append(b.entries, BatchEntry[Obj]{Object: obj, Revision: o.rev})
	b.ops = append(b.ops, o)
}

func (b *batch[Obj]) started(t time.Time) {
	for _, o := range b.ops {
		o.started = t.UnixNano()
	}
}

func (b *batch[Obj]) reset() {
	clear(b.entries) // drop references to objects until the next call
	clear(b.ops)
	b.entries, b.ops = b.entries[:0], b.ops[:0]
}

// run applies ops, recording each outcome in op.err. It stops early, leaving
// the rest untouched, if ctx ends.
func (e *executor[Obj]) run(ctx context.Context, txn statedb.ReadTxn, ops []op[Obj]) {
	ctx = e.withDrift(ctx)
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
		o.started = start.UnixNano()
		name := metrics.OpUpdate
		if o.delete {
			name = metrics.OpDelete
			o.err = r.call(ctx, name, func(ctx context.Context) error {
				return r.ops.Delete(ctx, txn, o.rev, o.obj)
			})
		} else {
			o.updated = r.clone(o.obj)
			o.err = r.call(ctx, name, func(ctx context.Context) error {
				return r.ops.Update(ctx, txn, o.rev, o.updated)
			})
		}
		o.ran = true
		if n := e.drift.take(); n > 0 && o.refresh && !o.delete {
			r.refreshDrift.Add(int64(n))
		}
		end := time.Now()
		r.metrics.ReconciliationDuration(r.moduleID, r.opts.name, name, end.Sub(start))
		start = end
	}
}

// runBatch applies ops with BatchOperations: deletes first, then updates.
func (e *executor[Obj]) runBatch(ctx context.Context, txn statedb.ReadTxn, ops []op[Obj]) {
	r := e.r
	for i := range ops {
		o := &ops[i]
		if o.delete {
			e.deletes.add(o, o.obj)
		} else {
			o.updated = r.clone(o.obj)
			e.updates.add(o, o.updated)
		}
	}
	if len(e.deletes.entries) > 0 && ctx.Err() == nil {
		start := time.Now()
		e.deletes.started(start)
		err := r.call(ctx, "delete batch", func(ctx context.Context) error {
			r.batchOps.DeleteBatch(ctx, txn, e.deletes.entries)
			return batchTimeout(ctx)
		})
		r.metrics.ReconciliationDuration(r.moduleID, r.opts.name, metrics.OpDelete, time.Since(start))
		// A batch cut short by the end of ctx may leave entries it never
		// got to with a nil Result: they did not run.
		ran := ctx.Err() == nil
		for i, o := range e.deletes.ops {
			o.err = entryErr(e.deletes.entries[i].Result, err)
			o.ran = ran
		}
		e.drift.take() // drift is counted for prunes and refreshes only
	}
	if len(e.updates.entries) > 0 && ctx.Err() == nil {
		start := time.Now()
		e.updates.started(start)
		err := r.call(ctx, "update batch", func(ctx context.Context) error {
			r.batchOps.UpdateBatch(ctx, txn, e.updates.entries)
			return batchTimeout(ctx)
		})
		r.metrics.ReconciliationDuration(r.moduleID, r.opts.name, metrics.OpUpdate, time.Since(start))
		ran := ctx.Err() == nil
		for i, o := range e.updates.ops {
			o.updated = e.updates.entries[i].Object
			o.err = entryErr(e.updates.entries[i].Result, err)
			o.ran = ran
		}
		// Drift reported by a batch counts if the batch refreshed anything.
		if n := e.drift.take(); n > 0 && slices.ContainsFunc(e.updates.ops, func(o *op[Obj]) bool { return o.refresh }) {
			r.refreshDrift.Add(int64(n))
		}
	}
	e.deletes.reset()
	e.updates.reset()
}

// call invokes one operation, named what for the log, with the operation
// timeout and, unless disabled, turns a panic into an error wrapping
// ErrPanic, logged with its stack. fn does not escape, so the closures the
// callers pass do not allocate.
func (r *reconciler[Obj]) call(ctx context.Context, what string, fn func(context.Context) error) (err error) {
	if r.opts.operationTimeout > 0 {
		parent := ctx
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.operationTimeout)
		defer cancel()
		defer func() {
			// Mark an error of an operation whose own timeout expired,
			// to tell it from one of a deadline of the operation's own.
			if err != nil && ctx.Err() == context.DeadlineExceeded && parent.Err() == nil {
				err = &timeoutError{err}
			}
		}()
	}
	if r.opts.recoverPanics {
		defer func() {
			if v := recover(); v != nil {
				err = r.recovered(what, v)
			}
		}()
	}
	return fn(ctx)
}

// recovered logs a recovered panic with its stack and returns it as an
// error wrapping ErrPanic. It must be called from the deferred function.
func (r *reconciler[Obj]) recovered(what string, v any) error {
	r.log.Error("Reconciler operation panicked; recorded as its error",
		"operation", what, "panic", v, "stack", string(debug.Stack()))
	return panicError(v)
}

// batchTimeout returns ctx's error if it ran out while a batch ran, so that
// call marks it as the batch's timeout; nil otherwise. Entries the batch
// did not get to then fail with it.
func batchTimeout(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return ctx.Err()
	}
	return nil
}

// timeoutError marks the error of an operation that exceeded the operation
// timeout.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string { return e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

// entryErr is the outcome of a batch entry: its Result, or the batch's
// error (a panic or a timeout) if it has none. When the batch timed out, an
// entry that failed with its context's deadline timed out too.
func entryErr(result, batchErr error) error {
	switch {
	case result == nil:
		return batchErr
	case batchErr != nil && errors.Is(result, context.DeadlineExceeded) && errors.As(batchErr, new(*timeoutError)):
		return &timeoutError{result}
	}
	return result
}
