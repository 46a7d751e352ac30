package index

import (
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/status"
)

// DefaultStatusIndexName is the index name used by [NewStatusIndex].
const DefaultStatusIndexName = "status"

// NewStatusIndex returns a non-unique StateDB index named "status" over the
// kind of the status that getStatus reads from an object. Pass it to
// statedb.NewTable as a secondary index and query it with
// Query(status.KindPending) and the like.
//
// getStatus must not be nil and must not block; it is called on every insert.
func NewStatusIndex[Obj any](getStatus func(Obj) status.Status) statedb.Index[Obj, status.Kind] {
	return NewNamedStatusIndex(DefaultStatusIndexName, getStatus)
}

// NewNamedStatusIndex is like [NewStatusIndex] with a chosen index name, for
// tables that index the statuses of several reconcilers.
func NewNamedStatusIndex[Obj any](name string, getStatus func(Obj) status.Status) statedb.Index[Obj, status.Kind] {
	return statedb.Index[Obj, status.Kind]{
		Name: name,
		FromObject: func(obj Obj) index.KeySet {
			return index.NewKeySet(getStatus(obj).Kind.Key())
		},
		FromKey: status.Kind.Key,
		FromString: func(s string) (index.Key, error) {
			k, err := status.ParseKind(s)
			if err != nil {
				return nil, err
			}
			return k.Key(), nil
		},
		Unique: false,
	}
}
