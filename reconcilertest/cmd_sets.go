package reconcilertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
)

// setsCmds returns the sets/* commands, acting on the sets.Table of the
// Subjects that have one (Subject.Sets).
func setsCmds(reg *Registry) map[string]script.Cmd {
	return map[string]script.Cmd{
		"sets/retire":  setsRetireCmd(reg),
		"sets/refresh": setsRefreshCmd(reg),
		"sets/wait":    setsWaitCmd(reg),
		"sets/status":  setsStatusCmd(reg),
	}
}

// setsView is the untyped view of a Subject's sets.Table.
type setsView interface {
	tableName() string
	retire(ctx context.Context, name string) (int, error)
	// refresh marks the objects with keys (all if none) for name and
	// returns how many, and a function that waits for their attempts.
	refresh(ctx context.Context, name string, keys []string) (int, func(context.Context) (sets.Result, error), error)
	wait(ctx context.Context, names []string, opts ...sets.WaitOption) error
	// statuses renders the set of the object with key, one line per name.
	statuses(key string) (string, error)
}

type typedSets[Obj any] struct{ t *typedSubject[Obj] }

// sets returns the view of the Subject's Sets, nil if it has none.
func (t *typedSubject[Obj]) sets() setsView {
	if t.s.Sets == nil {
		return nil
	}
	return typedSets[Obj]{t}
}

func (v typedSets[Obj]) tableName() string { return v.t.s.Table.Name() }

func (v typedSets[Obj]) retire(ctx context.Context, name string) (int, error) {
	return v.t.s.Sets.Retire(ctx, name)
}

func (v typedSets[Obj]) refresh(ctx context.Context, name string, keys []string) (int, func(context.Context) (sets.Result, error), error) {
	var queries []statedb.Query[Obj]
	txn := v.t.s.DB.ReadTxn()
	for _, key := range keys {
		obj, found, _, err := v.t.find(txn, key)
		switch {
		case err != nil:
			return 0, nil, err
		case !found:
			return 0, nil, fmt.Errorf("no object with key %q in table %q", key, v.tableName())
		}
		q, ok := v.t.s.Table.PrimaryIndexer().QueryFromObject(obj)
		if !ok {
			return 0, nil, fmt.Errorf("object %q has no primary key", key)
		}
		queries = append(queries, q)
	}
	m, err := v.t.s.Sets.Refresh(ctx, name, queries...)
	if err != nil {
		return 0, nil, err
	}
	return m.Len(), m.Wait, nil
}

func (v typedSets[Obj]) wait(ctx context.Context, names []string, opts ...sets.WaitOption) error {
	return v.t.s.Sets.Wait(ctx, names, opts...)
}

func (v typedSets[Obj]) statuses(key string) (string, error) {
	obj, found, _, err := v.t.find(v.t.s.DB.ReadTxn(), key)
	switch {
	case err != nil:
		return "", err
	case !found:
		return "", fmt.Errorf("no object with key %q in table %q", key, v.tableName())
	}
	var b strings.Builder
	set, err := v.t.s.Sets.Statuses(obj)
	if err != nil {
		return "", err
	}
	for name, st := range set.All() {
		fmt.Fprintf(&b, "%s: %s\n", name, formatStatus(st))
	}
	return b.String(), nil
}

// lookupSets finds the sets.Table of --table, or the only one registered.
func lookupSets(s *script.State, reg *Registry) (setsView, error) {
	table, err := s.Flags.GetString("table")
	if err != nil {
		return nil, err
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	found := map[string]setsView{}
	for _, sub := range reg.subjects {
		if ws, ok := sub.(interface{ sets() setsView }); ok {
			if v := ws.sets(); v != nil {
				found[v.tableName()] = v
			}
		}
	}
	names := slices.Sorted(maps.Keys(found))
	switch {
	case table != "" && found[table] != nil:
		return found[table], nil
	case table != "":
		return nil, fmt.Errorf("no Subject of table %q has a sets.Table (Subject.Sets); tables with one: %s", table, quoteAll(names))
	case len(names) == 1:
		return found[names[0]], nil
	case len(names) == 0:
		return nil, errors.New("no Subject has a sets.Table: set Subject.Sets")
	default:
		return nil, fmt.Errorf("several tables have a sets.Table (%s): choose one with --table", quoteAll(names))
	}
}

func tableFlag(fs *pflag.FlagSet) {
	fs.String("table", "", "the table (default: the only one whose Subjects have a sets.Table)")
}

// setsTimed looks the table up and makes the context of --timeout.
func setsTimed(s *script.State, reg *Registry) (setsView, context.Context, context.CancelFunc, error) {
	v, err := lookupSets(s, reg)
	if err != nil {
		return nil, nil, nil, err
	}
	timeout, err := getTimeout(s)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(s.Context(), timeout)
	return v, ctx, cancel, nil
}

func setsRetireCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "remove reconciler names from every object's status set (sets.Table.Retire)",
			Args:    "name...",
			Flags:   func(fs *pflag.FlagSet) { tableFlag(fs); timeoutFlag(fs) },
			Detail:  []string{"Prints how many objects each name was removed from."},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, script.ErrUsage
			}
			v, ctx, cancel, err := setsTimed(s, reg)
			if err != nil {
				return nil, err
			}
			defer cancel()
			var out strings.Builder
			for _, name := range args {
				n, err := v.retire(ctx, name)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(&out, "retired %s from %d object(s)\n", name, n)
			}
			return func(*script.State) (string, string, error) { return out.String(), "", nil }, nil
		},
	)
}

func setsRefreshCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "refresh one reconciler name of a status set and wait until each object was attempted (sets.Table.Refresh, Marked.Wait)",
			Args:    "name",
			Async:   true,
			Flags: func(fs *pflag.FlagSet) {
				tableFlag(fs)
				timeoutFlag(fs)
				fs.StringSlice("key", nil, "refresh only these objects (repeat, or separate with commas)")
			},
			Detail: []string{
				"The objects are marked when the command runs; the wait runs in the background with '&'.",
				"Prints how many were marked and what the attempts gave: Done, Error (each failed object with its error, in key order), deleted.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) != 1 {
				return nil, script.ErrUsage
			}
			keys, err := s.Flags.GetStringSlice("key")
			if err != nil {
				return nil, err
			}
			v, ctx, cancel, err := setsTimed(s, reg)
			if err != nil {
				return nil, err
			}
			n, wait, err := v.refresh(ctx, args[0], keys)
			if err != nil {
				cancel()
				return nil, err
			}
			return func(*script.State) (string, string, error) {
				defer cancel()
				r, err := wait(ctx)
				if errors.Is(err, sets.ErrNotSettled) {
					err = fmt.Errorf("%w: %s", errTimeout, err) // not wrapping ctx's error: the script would stop
					return "", err.Error() + "\n", err
				} else if err != nil {
					return "", "", err
				}
				var out strings.Builder
				fmt.Fprintf(&out, "marked %d object(s) for %s\nattempted: %d Done, %d Error, %d deleted\n", n, args[0], r.Done, len(r.Failed), r.Deleted)
				for _, f := range r.Failed {
					fmt.Fprintf(&out, "%s: %s\n", f.Key, formatStatus(f.Status))
				}
				return out.String(), "", nil
			}, nil
		},
	)
}

func setsWaitCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "wait until the named reconcilers of a status set have settled the table as it is now (sets.Table.Wait)",
			Args:    "name...",
			Flags: func(fs *pflag.FlagSet) {
				tableFlag(fs)
				timeoutFlag(fs)
				fs.Bool("error-ok", false, "an Error settles an object too (sets.DoneOrError)")
			},
			Detail: []string{
				"Settled is Done for every name, or a terminal Error (any Error with --error-ok).",
				"Prints the objects in Error, if any, and fails on --timeout with the objects not settled.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, script.ErrUsage
			}
			errorOK, err := s.Flags.GetBool("error-ok")
			if err != nil {
				return nil, err
			}
			v, ctx, cancel, err := setsTimed(s, reg)
			if err != nil {
				return nil, err
			}
			defer cancel()
			var wopts []sets.WaitOption
			if errorOK {
				wopts = append(wopts, sets.DoneOrError())
			}
			err = v.wait(ctx, args, wopts...)
			out := fmt.Sprintf("settled by %s\n", strings.Join(args, ", "))
			switch {
			case errors.Is(err, sets.ErrNotSettled):
				err = fmt.Errorf("%w: %s", errTimeout, err) // not wrapping ctx's error: the script would stop
				// On stderr too, for a script to match what was not settled.
				return func(*script.State) (string, string, error) { return "", err.Error() + "\n", err }, nil
			case err != nil && !errors.Is(err, reconciler.ErrObjectFailed):
				return nil, err
			case err != nil:
				out += err.Error() + "\n"
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}

func setsStatusCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the status of each name in an object's status set",
			Args:    "key",
			Flags:   tableFlag,
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) != 1 {
				return nil, script.ErrUsage
			}
			v, err := lookupSets(s, reg)
			if err != nil {
				return nil, err
			}
			out, err := v.statuses(args[0])
			if err != nil {
				return nil, err
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}
