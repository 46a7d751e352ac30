package reconcilertest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func targetCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the target, or wait until it holds what is expected",
			Args:    "[key=value...]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Bool("table", false, "wait until the target equals the table")
				fs.Bool("empty", false, "wait until the target is empty")
			},
			Detail: []string{
				"The target is the Subject's Target, or its TargetReader.",
				"Without arguments, the command prints what the target holds, one 'key=value' line per entry, sorted.",
				"With key=value arguments, it waits until the target holds exactly those.",
				"With --table, it waits until the target equals the table, every object whatever its status (see Target.Diff), and shows the differences if it times out.",
				"With --empty, it waits until the target is empty.",
				"A Target wakes the command on every change; another TargetReader is checked every 10ms.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			sub, tgt, err := lookupTarget(s, reg)
			if err != nil {
				return nil, err
			}
			timeout, err := getTimeout(s)
			if err != nil {
				return nil, err
			}
			table, _ := s.Flags.GetBool("table")
			empty, _ := s.Flags.GetBool("empty")
			want, err := parsePairs(args)
			if err != nil {
				return nil, err
			}
			modes := 0
			for _, on := range []bool{table, empty, len(args) > 0} {
				if on {
					modes++
				}
			}
			if modes > 1 {
				return nil, fmt.Errorf("%w: give only one of --table, --empty and key=value arguments", script.ErrUsage)
			}

			var state map[string]string
			switch {
			case table:
				err = waitFor(s, timeout, "for the target to equal the table", func() (bool, watches, string, error) {
					txn := sub.db().ReadTxn()
					_, _, tableWatch := sub.unreconciled(txn)
					diff, stateWatch, err := tgt.diff(txn)
					if err != nil {
						return false, watches{}, "", err
					}
					return diff == "", watches{tableWatch, stateWatch}, "\n" + diff, nil
				})
				if err == nil {
					state, _, err = tgt.read()
				}
			case empty || len(want) > 0:
				err = waitFor(s, timeout, "for the target to hold ["+formatState(want)+"]", func() (bool, watches, string, error) {
					var (
						watch <-chan struct{}
						err   error
					)
					state, watch, err = tgt.read()
					if err != nil {
						return false, watches{}, "", err
					}
					return maps.Equal(state, want), watches{watch}, "it holds [" + formatState(state) + "]", nil
				})
			default:
				state, _, err = tgt.read()
			}
			if err != nil {
				return nil, err
			}
			out := formatState(state)
			if out != "" {
				out = strings.ReplaceAll(out, " ", "\n") + "\n"
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}

func targetSetCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "change the target behind the reconciler's back",
			Args:    "key=value...",
			Flags:   nameFlag,
			Detail: []string{
				"The command stores each value under its key in the target without the reconciler knowing, to simulate drift, or leftovers that a prune must remove.",
				"The target must be a TargetWriter, as a Target is; on a read-only TargetReader the command fails.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: expected one or more key=value arguments", script.ErrUsage)
			}
			w, err := lookupTargetWriter(s, reg, "reconciler/target/set")
			if err != nil {
				return nil, err
			}
			pairs, err := parsePairs(args)
			if err != nil {
				return nil, err
			}
			for _, k := range slices.Sorted(maps.Keys(pairs)) {
				w.Set(k, pairs[k])
			}
			return nil, nil
		},
	)
}

func targetUnsetCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "remove keys from the target behind the reconciler's back",
			Args:    "key...",
			Flags:   nameFlag,
			Detail: []string{
				"The command removes each key from the target without the reconciler knowing.",
				"The target must be a TargetWriter, as a Target is; on a read-only TargetReader the command fails.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: expected one or more keys", script.ErrUsage)
			}
			w, err := lookupTargetWriter(s, reg, "reconciler/target/unset")
			if err != nil {
				return nil, err
			}
			for _, k := range args {
				w.Remove(k)
			}
			return nil, nil
		},
	)
}

func lookupTarget(s *script.State, reg *Registry) (subject, targetView, error) {
	sub, err := lookup(s, reg)
	if err != nil {
		return nil, nil, err
	}
	tgt := sub.target()
	if tgt == nil {
		return nil, nil, fmt.Errorf("reconciler %q has no Target or TargetReader in its Subject", sub.subjectName())
	}
	return sub, tgt, nil
}

// lookupTargetWriter finds the target of the reconciler --name selects, for
// the command cmd, which changes it.
func lookupTargetWriter(s *script.State, reg *Registry, cmd string) (TargetWriter, error) {
	sub, tgt, err := lookupTarget(s, reg)
	if err != nil {
		return nil, err
	}
	w, ok := tgt.reader().(TargetWriter)
	if !ok {
		return nil, fmt.Errorf("the target of reconciler %q (%T) is read-only: %s needs a TargetReader that is also a reconcilertest.TargetWriter", sub.subjectName(), tgt.reader(), cmd)
	}
	return w, nil
}

// parsePairs parses key=value arguments.
func parsePairs(args []string) (map[string]string, error) {
	pairs := make(map[string]string, len(args))
	for _, arg := range args {
		k, v, ok := strings.Cut(arg, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q is not key=value", script.ErrUsage, arg)
		}
		if _, dup := pairs[k]; dup {
			return nil, fmt.Errorf("%w: key %q given twice", script.ErrUsage, k)
		}
		pairs[k] = v
	}
	return pairs, nil
}
