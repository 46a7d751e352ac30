package status

import (
	"fmt"

	"github.com/cilium/statedb/index"
)

// Kind is the state of an object's reconciliation. The zero value is
// [KindUnset], which a reconciler ignores: an object is only reconciled once
// its status has been set, normally with [Pending].
type Kind uint8

const (
	// KindUnset is the zero Kind. Objects with it are not reconciled.
	KindUnset Kind = iota
	// KindPending asks the reconciler to apply the object to the target.
	KindPending
	// KindRefreshing asks the reconciler to apply the object again even though
	// it has not changed. The operation may treat it as a forced update.
	KindRefreshing
	// KindDone records that the object was applied successfully.
	KindDone
	// KindError records that applying the object failed. The error text is in
	// [Status.Error].
	KindError
)

var kindNames = [...]string{
	KindUnset:      "Unset",
	KindPending:    "Pending",
	KindRefreshing: "Refreshing",
	KindDone:       "Done",
	KindError:      "Error",
}

// The index keys are distinct single bytes built once so that [Kind.Key]
// does not allocate. Their byte order is not the order of the kinds ("D" <
// "E" < "P" < "R"), so query the index by kind, not by key range.
var kindKeys = [...]index.Key{
	KindUnset:      index.Key("?"),
	KindPending:    index.Key("P"),
	KindRefreshing: index.Key("R"),
	KindDone:       index.Key("D"),
	KindError:      index.Key("E"),
}

// String returns the name of the kind, such as "Pending".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Key returns the StateDB index key of the kind. It does not allocate. The
// returned key must not be modified.
func (k Kind) Key() index.Key {
	if int(k) < len(kindKeys) {
		return kindKeys[k]
	}
	return kindKeys[KindUnset]
}

// ParseKind parses the name of a kind as returned by [Kind.String]. It also
// accepts the empty string as [KindUnset].
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return KindUnset, nil
	}
	for k, name := range kindNames {
		if name == s {
			return Kind(k), nil
		}
	}
	if len(s) > 64 {
		s = s[:64] + "…" // the error names the kind, not all of a long input
	}
	return KindUnset, fmt.Errorf("%w: unknown kind %q", ErrMalformed, s)
}

// MarshalText implements [encoding.TextMarshaler]; JSON and YAML encoders use
// it to write the kind's name.
func (k Kind) MarshalText() ([]byte, error) {
	if int(k) >= len(kindNames) {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrMalformed, uint8(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]. Unknown names are an
// error wrapping [ErrMalformed].
func (k *Kind) UnmarshalText(text []byte) error {
	parsed, err := ParseKind(string(text))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}
