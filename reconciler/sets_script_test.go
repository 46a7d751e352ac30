package reconciler_test

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// newItemSets returns the sets.Table of the items' Statuses, for the
// sets/* commands of scripts with -reconcilers.
func newItemSets(db *statedb.DB, table statedb.RWTable[*item]) (*sets.Table[*item], error) {
	return sets.Of(db, table, (*item).clone,
		func(it *item) status.Set { return it.Statuses },
		func(it *item, s status.Set) *item { it.Statuses = s; return it })
}

// joinCmd registers, while the hive runs, a reconciler of the names -join
// gave, each once: a name that joins a table that already has objects.
func joinCmd(names []string, add func(name string) error) script.Cmd {
	var (
		mu     sync.Mutex
		joined = map[string]bool{}
	)
	return script.Command(script.CmdUsage{Summary: "register the reconciler NAME (one of -join) on the running hive", Args: "name"},
		func(_ *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) != 1 {
				return nil, script.ErrUsage
			}
			mu.Lock()
			defer mu.Unlock()
			switch name := args[0]; {
			case !slices.Contains(names, name):
				return nil, fmt.Errorf("%q is not one of -join %q", name, names)
			case joined[name]:
				return nil, fmt.Errorf("%q has joined already", name)
			default:
				joined[name] = true
				return nil, add(name)
			}
		})
}
