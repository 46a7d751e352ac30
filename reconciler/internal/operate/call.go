package operate

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/converge-go/converge/reconciler/internal/work"
)

// Caller calls one operation, with the operation timeout and, unless
// Recover is off, a panic turned into an error. The zero value calls
// without a timeout and lets a panic through.
type Caller struct {
	Timeout time.Duration // the operation timeout; 0 for none
	Recover bool          // turn a panic into an error wrapping work.ErrPanic
	Log     *slog.Logger  // where a recovered panic is logged; required with Recover
}

// Call invokes one operation, named what for the log, with the operation
// timeout and, if Recover is set, turns a panic into an error wrapping
// work.ErrPanic, logged with its stack. fn does not escape, so the
// closures the callers pass do not allocate.
func (c Caller) Call(ctx context.Context, what string, fn func(context.Context) error) (err error) {
	if c.Timeout > 0 {
		parent := ctx
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		defer func() {
			// Mark an error of an operation whose own timeout expired,
			// to tell it from one of a deadline of the operation's own.
			if err != nil && ctx.Err() == context.DeadlineExceeded && parent.Err() == nil {
				err = work.Timeout(err)
			}
		}()
	}
	if c.Recover {
		defer func() {
			if v := recover(); v != nil {
				err = c.Recovered(what, v)
			}
		}()
	}
	return fn(ctx)
}

// Recovered logs a recovered panic with its stack and returns it as an
// error wrapping work.ErrPanic. It must be called from the deferred
// function.
func (c Caller) Recovered(what string, v any) error {
	c.Log.Error("Reconciler operation panicked; recorded as its error",
		"operation", what, "panic", v, "stack", string(debug.Stack()))
	return work.Panicked(v)
}

// batchTimeout returns ctx's error if it ran out while a batch ran, so that
// Call marks it as the batch's timeout; nil otherwise. Entries the batch
// did not get to then fail with it.
func batchTimeout(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return ctx.Err()
	}
	return nil
}

// EntryErr is the outcome of a batch entry: its result, or the batch's
// error (a panic, a timeout, or what ProcessBatch returned) if it has
// none. When the batch timed out, an entry that failed with its context's
// deadline timed out too.
func EntryErr(result, batchErr error) error {
	switch {
	case result == nil:
		return batchErr
	case batchErr != nil && errors.Is(result, context.DeadlineExceeded) && work.IsTimeout(batchErr):
		return work.Timeout(result)
	}
	return result
}
