package status

import (
	"fmt"
	"time"

	"github.com/converge-go/converge/internal/ident"
)

// Status is the reconciliation status of an object for one reconciler.
// Keep it in a field of the object, named or embedded, or keep several in a
// [Set]. Its fields encode as any struct's do: embedded, they are the
// object's own in JSON and under "status" in YAML, as with the StateDB
// reconciler's Status.
//
// The zero Status has [KindUnset] and is ignored by reconcilers. Build
// statuses with [Pending], [Refreshing], [Done] and [Error]; each call gives
// the status a fresh identity (see the package documentation). A status
// written as a literal, or decoded from JSON or YAML outside a [Set], has
// none.
type Status struct {
	// Kind is the state of the reconciliation.
	Kind Kind `json:"kind" yaml:"kind"`
	// UpdatedAt is when the status was created.
	UpdatedAt time.Time `json:"updated-at" yaml:"updated-at"`
	// Error is the error text when Kind is KindError. It is empty on every
	// other kind, and ignored there if set.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
	// Terminal is set on an Error status whose error retrying cannot fix
	// (see [TerminalErrorAt]): the reconciler does not retry it, and waiting
	// for the object to become Done is pointless until it changes. It is
	// false on every other kind, and ignored there if set.
	Terminal bool `json:"terminal,omitempty" yaml:"terminal,omitempty"`

	// id identifies the write that created this status. Zero means none.
	id uint64
}

// nextID hands out status identities (see package ident): they increase,
// are meaningful only within one process and are never encoded.
func nextID() uint64 { return ident.Next() }

func newStatus(k Kind, at time.Time, errText string) Status {
	return Status{Kind: k, UpdatedAt: at, Error: errText, id: nextID()}
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// GetError returns the error text of an Error status, "" for other kinds.
// It matches the StateDB reconciler's Status.GetError, whose Error field is
// a pointer; here the field itself is the text.
func (s Status) GetError() string {
	if s.Kind != KindError {
		return ""
	}
	return s.Error
}

// Pending returns a status that asks the reconciler to apply the object. Set
// it whenever the object's desired state changes.
func Pending() Status { return newStatus(KindPending, time.Now(), "") }

// Refreshing returns a status that asks the reconciler to apply an unchanged
// object again, for example to repair drift in the target.
func Refreshing() Status { return newStatus(KindRefreshing, time.Now(), "") }

// Done returns a status recording a successful reconciliation.
func Done() Status { return newStatus(KindDone, time.Now(), "") }

// Error returns a status recording a failed reconciliation with err's text.
// A nil err is recorded as "<nil>" so that an Error status always explains
// itself.
func Error(err error) Status { return ErrorAt(time.Now(), err) }

// PendingAt is [Pending] stamped with at instead of the current time, for
// writers that stamp many objects with one clock reading. Each call still
// gives the status a fresh identity.
func PendingAt(at time.Time) Status { return newStatus(KindPending, at, "") }

// RefreshingAt is [Refreshing] stamped with at.
func RefreshingAt(at time.Time) Status { return newStatus(KindRefreshing, at, "") }

// DoneAt is [Done] stamped with at.
func DoneAt(at time.Time) Status { return newStatus(KindDone, at, "") }

// ErrorAt is [Error] stamped with at.
func ErrorAt(at time.Time, err error) Status {
	return newStatus(KindError, at, errorText(err))
}

// TerminalError is [Error] with [Status.Terminal] set: a failure that
// retrying cannot fix, stamped now. See [TerminalErrorAt].
func TerminalError(err error) Status { return TerminalErrorAt(time.Now(), err) }

// TerminalErrorAt is [ErrorAt] with [Status.Terminal] set: it records a
// failure that retrying cannot fix. Reconcilers write it for errors marked
// terminal; an object carrying it is not retried until it changes.
func TerminalErrorAt(at time.Time, err error) Status {
	s := newStatus(KindError, at, errorText(err))
	s.Terminal = true
	return s
}

// IsPendingOrRefreshing reports whether the status asks for reconciliation.
func (s Status) IsPendingOrRefreshing() bool {
	return s.Kind == KindPending || s.Kind == KindRefreshing
}

// ID returns the identity of the status: a number unique to the call that
// built it within this process, or zero for a status no constructor built
// (the zero Status, a literal, one decoded outside a [Set]). Two statuses
// with the same non-zero ID come from the same write. Reconcilers use it to
// recognise an object whose only change is another reconciler's status.
func (s Status) ID() uint64 { return s.id }

// String returns a short description for tables and logs, such as
// "Done (2s ago)" or "Error: disk full (1m ago)".
func (s Status) String() string {
	if s.Kind == KindUnset {
		return s.Kind.String()
	}
	if s.Kind == KindError && s.Terminal {
		return "Error (terminal): " + s.Error + ago(s.UpdatedAt)
	}
	if s.Kind == KindError {
		return "Error: " + s.Error + ago(s.UpdatedAt)
	}
	return s.Kind.String() + ago(s.UpdatedAt)
}

// check reports an error text or terminal flag on a status that is not an
// Error, which no constructor writes.
func (s Status) check() error {
	if s.Error != "" && s.Kind != KindError {
		return fmt.Errorf("error text on a %s status", s.Kind)
	}
	if s.Terminal && s.Kind != KindError {
		return fmt.Errorf("terminal flag on a %s status", s.Kind)
	}
	return nil
}
