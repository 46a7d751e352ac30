package sets

import (
	"errors"

	"github.com/converge-go/converge/reconciler"
)

// The errors of the package. Test for them with [errors.Is]. Bad
// arguments are refused with errors wrapping reconciler.ErrInvalidConfig,
// and objects that failed are reported with errors wrapping
// reconciler.ErrObjectFailed, as package reconciler does.
var (
	// ErrFuncPanicked is wrapped by the error returned when a function
	// given to [Of] (clone, get or set) panics. The panic is recovered on
	// the caller's goroutine; a write transaction under way is aborted,
	// and those committed before it stay.
	ErrFuncPanicked = errors.New("a function given to sets.Of panicked")

	// ErrNotSettled is wrapped, with the context's error, by the error
	// [Table.Wait] and [Marked.Wait] return when their context ends before
	// every object they wait for is settled. Its text lists the first ten
	// of them, with the status of each name that holds it up.
	ErrNotSettled = errors.New("objects not settled")
)

// errInvalid is reconciler.ErrInvalidConfig, which this package's bad
// arguments wrap.
var errInvalid = reconciler.ErrInvalidConfig
