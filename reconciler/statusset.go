package reconciler

import (
	"fmt"

	"github.com/converge-go/converge/status"
)

// WithStatusSet says that the reconciler keeps its status in a
// [status.Set] of each object, under its name ([WithName], which must be
// given): get returns the object's set, and set returns the object with the
// set replaced (it is given a clone and may modify it in place; it must
// change nothing else). Register's setStatus and getStatus must then be nil:
// the reconciler reads and writes its entry of the set itself. The
// reconcilers of one set need names of their own: two of one name would
// share its entry, each taking the other's status for its own. Register
// cannot refuse that, as two sets of one table may use the same names.
//
// Reconcilers of one table that keep their statuses in one set this way
// write them with one copy of the set per object version, not one copy per
// reconciler (see "Several reconcilers of one table"): with four, that is
// three of every four copies saved, and the garbage they make. Obj must be
// the reconciled table's object type; Register refuses the option with
// [ErrInvalidConfig] otherwise, if get or set is nil, without a name, or
// with a setStatus or getStatus of its own.
func WithStatusSet[Obj any](get func(Obj) status.Set, set func(Obj, status.Set) Obj) Option {
	return func(o *options) {
		o.by = "WithStatusSet"
		o.statusSet = func(r any) error {
			rr, ok := r.(*reconciler[Obj])
			switch {
			case !ok:
				return fmt.Errorf("reconciler.Register: WithStatusSet's functions are not of the reconciled table's object type: %w", ErrInvalidConfig)
			case get == nil || set == nil:
				return fmt.Errorf("reconciler.Register: WithStatusSet needs both its get and set functions: %w", ErrInvalidConfig)
			case rr.opts.name == "":
				return fmt.Errorf("reconciler.Register: WithStatusSet needs the name of WithName, the reconciler's entry in the set: %w", ErrInvalidConfig)
			}
			rr.objects.UseSet(rr.opts.name, get, set)
			return nil
		}
	}
}
