package reconciler

import "github.com/converge-go/converge/status"

// Status is the reconciliation status an object carries for one reconciler:
// converge's [status.Status]. Unlike the StateDB reconciler's Status, its
// Error field is the error text itself (a string, empty unless the kind is
// Error), its identity is the method ID instead of a field, and it has a
// Terminal field for errors that retrying cannot fix. GetError,
// IsPendingOrRefreshing and String work as before. The zero Status has
// StatusKindUnset, which reconcilers ignore: build statuses with
// StatusPending and the other constructors. A Status is a value, safe to
// share.
type Status = status.Status

// StatusKind is the state of a reconciliation: converge's [status.Kind], a
// small integer where the StateDB reconciler's is a struct. Compare it with
// the StatusKind values below, print it with String, use Key for index
// keys, as before. It encodes as its name in JSON and YAML through
// MarshalText and UnmarshalText.
type StatusKind = status.Kind

// The kinds of a status, as in the StateDB reconciler.
const (
	// StatusKindUnset is the zero kind. Objects with it are not reconciled.
	StatusKindUnset = status.KindUnset
	// StatusKindPending asks the reconciler to apply the object.
	StatusKindPending = status.KindPending
	// StatusKindRefreshing asks the reconciler to apply an unchanged
	// object again.
	StatusKindRefreshing = status.KindRefreshing
	// StatusKindDone records that the object was applied.
	StatusKindDone = status.KindDone
	// StatusKindError records that applying the object failed.
	StatusKindError = status.KindError
)

// StatusPending returns a Pending status with a fresh identity: set it on
// an object whenever its desired state changes. It is [status.Pending].
func StatusPending() Status { return status.Pending() }

// StatusRefreshing returns a Refreshing status with a fresh identity, which
// asks for an unchanged object to be applied again. It is
// [status.Refreshing].
func StatusRefreshing() Status { return status.Refreshing() }

// StatusDone returns a Done status with a fresh identity. It is
// [status.Done].
func StatusDone() Status { return status.Done() }

// StatusError returns an Error status with err's text ("<nil>" for a nil
// err) and a fresh identity. It is [status.Error].
func StatusError(err error) Status { return status.Error(err) }

// StatusSet holds the statuses of one object for several named reconcilers:
// converge's [status.Set]. Its methods are those of the StateDB reconciler's
// StatusSet, on value receivers, and return new sets, so a set is safe to
// share. Keep it in a named field of the object. The zero StatusSet is
// empty; prefer NewStatusSet, which stamps the time and identity that names
// without an entry read as.
type StatusSet = status.Set

// NewStatusSet returns an empty set in which every reconciler reads its
// status as Pending until it writes one. It is [status.NewSet].
func NewStatusSet() StatusSet { return status.NewSet() }
