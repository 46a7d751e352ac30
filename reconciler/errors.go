package reconciler

import (
	"errors"

	"github.com/converge-go/converge/reconciler/internal/work"
)

// The errors of the package. Test for them with [errors.Is]: the errors
// returned and recorded wrap them.
var (
	// ErrInvalidConfig is wrapped by the errors [Register] returns for missing
	// arguments and for options with values out of range.
	ErrInvalidConfig = errors.New("invalid reconciler configuration")

	// ErrPanic is wrapped by the error recorded for an operation that panicked.
	ErrPanic = work.ErrPanic

	// ErrRetryRequested is the error recorded when an operation returns
	// RetryAfter with a nil error.
	ErrRetryRequested = errors.New("retry requested")

	// ErrNoPrimaryKey is wrapped by the error recorded for an update after
	// which the object has no primary key: Update changed the fields the
	// table's primary index reads, so the object cannot be stored. The object
	// is marked Error, as it was before Update, and retried. StateDB stores no
	// object without a primary key, so it arises only from such a change;
	// elsewhere (a clone or setStatus that drops the key) the object is left
	// alone and the reconciler logs an error naming this.
	ErrNoPrimaryKey = work.ErrNoPrimaryKey

	// ErrIndexNotFound is returned by [WaitForReconciliation] when the given
	// status index is not an index of the table.
	ErrIndexNotFound = errors.New("index not found")

	// ErrObjectDeleted is wrapped by the error [WaitForObject] returns when the
	// object it was waiting for is deleted from the table.
	ErrObjectDeleted = errors.New("object deleted")

	// ErrObjectNotFound is wrapped by the error [WaitForObject] returns, with
	// [FailIfAbsent], when no object matches the query at the first look.
	ErrObjectNotFound = errors.New("object not found")

	// ErrObjectFailed is wrapped by the error [WaitForObject] returns, with
	// [StopOnError], when the object's status is Error. The returned error's text
	// includes the status's error text.
	ErrObjectFailed = errors.New("object failed to reconcile")
)
