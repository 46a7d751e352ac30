package work

import (
	"errors"
	"fmt"
	"time"

	"github.com/converge-go/converge/metrics"
)

// ErrPanic is wrapped by the error recorded for an operation that
// panicked; the reconciler exports it as reconciler.ErrPanic.
var ErrPanic = errors.New("operation panicked")

// ErrEntryLost is the outcome of an op whose batch entry the batch
// operation overwrote: its result is unknown, so it is tried again, and it
// is no failure of its own (it counts no attempt towards the last one).
var ErrEntryLost = errors.New("batch operation lost the entry: no result for it")

type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Terminal marks err as one retrying cannot fix (reconciler.TerminalError).
// Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

// IsTerminal reports whether err is or wraps an error made by Terminal.
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

// RetryAfter asks for the next attempt after d (reconciler.RetryAfter); err
// must not be nil.
func RetryAfter(d time.Duration, err error) error {
	return &retryAfterError{after: max(d, 0), err: err}
}

// RetryDelay returns the delay err asks for with RetryAfter, if any.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

type timeoutError struct{ err error }

func (e *timeoutError) Error() string { return e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

// Timeout marks err, an operation's, as the end of the operation timeout.
func Timeout(err error) error { return &timeoutError{err} }

// IsTimeout reports whether err is or wraps an error made by Timeout.
func IsTimeout(err error) bool { return errors.As(err, new(*timeoutError)) }

// Panicked returns the error recorded for an operation that panicked with
// v.
func Panicked(v any) error { return fmt.Errorf("%w: %v", ErrPanic, v) }

// Outcome classifies how an operation ended, in the order of precedence
// metrics.Outcome documents: a panic, a timeout of the operation's own
// deadline (timeout, if set), a terminal error, any other error.
func Outcome(err error, timeout time.Duration) metrics.Outcome {
	switch {
	case err == nil:
		return metrics.OutcomeSuccess
	case errors.Is(err, ErrPanic):
		return metrics.OutcomePanic
	case timeout > 0 && IsTimeout(err):
		return metrics.OutcomeTimeout
	case IsTerminal(err):
		return metrics.OutcomeTerminal
	}
	return metrics.OutcomeError
}

// ErrNoPrimaryKey is wrapped by the error recorded for an update after
// which the object has no primary key; the reconciler exports it as
// reconciler.ErrNoPrimaryKey.
var ErrNoPrimaryKey = errors.New("object has no primary key")
