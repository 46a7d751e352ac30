package reconciler

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is wrapped by the errors [Register] returns for missing
// arguments and for options with values out of range.
var ErrInvalidConfig = errors.New("invalid reconciler configuration")

// ErrPanic is wrapped by the error recorded for an operation that panicked.
var ErrPanic = errors.New("operation panicked")

// ErrRetryRequested is the error recorded when an operation returns
// RetryAfter with a nil error.
var ErrRetryRequested = errors.New("retry requested")

// ErrIndexNotFound is returned by [WaitForReconciliation] when the given
// status index is not an index of the table.
var ErrIndexNotFound = errors.New("index not found")

type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// TerminalError marks err as one that retrying cannot fix. From Update (or
// an UpdateBatch entry), the object is marked Error with err's text and is
// not retried until it changes. It is counted in the error metrics but,
// being settled, not in health. From Delete it makes no difference: a
// deleted object cannot change any more, and a delete must not be lost, so
// it is retried with backoff like any failure. Errors wrapping the returned
// error are recognised too. TerminalError(nil) is nil.
func TerminalError(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

// IsTerminal reports whether err is or wraps an error made by [TerminalError].
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter asks for the next attempt after d instead of after the backoff.
// d <= 0 means as soon as possible. The object is marked Error with err's
// text (or [ErrRetryRequested] if err is nil), and the backoff still grows as
// for any failure, so a later plain error backs off from where it was.
// Errors wrapping the returned error are recognised too.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = ErrRetryRequested
	}
	return &retryAfterError{after: max(d, 0), err: err}
}

// retryAfter returns the delay requested with RetryAfter, if any.
func retryAfter(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// panicError records a recovered panic.
func panicError(v any) error {
	return fmt.Errorf("%w: %v", ErrPanic, v)
}
