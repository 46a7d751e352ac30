package reconcilertest

import (
	"fmt"
	"maps"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func targetCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the recording target, or wait until it holds what is expected",
			Args:    "[key=value...]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Bool("table", false, "wait until the target equals the table")
				fs.Bool("empty", false, "wait until the target is empty")
			},
			Detail: []string{
				"Without arguments, prints what the Subject's Target holds, one sorted",
				"'key=value' line per entry. With key=value arguments, waits until the",
				"target holds exactly those. With --table, waits until the target equals",
				"the table (every object, whatever its status; see Target.Diff) and shows",
				"the differences if it times out. With --empty, waits until it is empty.",
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
					var tableWatch, stateWatch <-chan struct{}
					_, _, tableWatch = sub.unreconciled(txn)
					state, stateWatch = tgt.StateWatch()
					diff := tgt.diff(txn)
					return diff == "", watches{tableWatch, stateWatch}, "\n" + diff, nil
				})
			case empty || len(want) > 0:
				err = waitFor(s, timeout, "for the target to hold ["+formatState(want)+"]", func() (bool, watches, string, error) {
					var watch <-chan struct{}
					state, watch = tgt.StateWatch()
					return maps.Equal(state, want), watches{watch}, "it holds [" + formatState(state) + "]", nil
				})
			default:
				state, _ = tgt.StateWatch()
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
			Summary: "change the recording target behind the reconciler's back",
			Args:    "key=value...",
			Flags:   nameFlag,
			Detail: []string{
				"Stores each value under its key in the Subject's Target without the",
				"reconciler knowing, to simulate drift or leftovers that prune must remove.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: expected one or more key=value arguments", script.ErrUsage)
			}
			_, tgt, err := lookupTarget(s, reg)
			if err != nil {
				return nil, err
			}
			pairs, err := parsePairs(args)
			if err != nil {
				return nil, err
			}
			for k, v := range pairs {
				tgt.Set(k, v)
			}
			return nil, nil
		},
	)
}

func targetUnsetCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "remove keys from the recording target behind the reconciler's back",
			Args:    "key...",
			Flags:   nameFlag,
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: expected one or more keys", script.ErrUsage)
			}
			_, tgt, err := lookupTarget(s, reg)
			if err != nil {
				return nil, err
			}
			for _, k := range args {
				tgt.Remove(k)
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
		return nil, nil, fmt.Errorf("reconciler %q has no Target in its Subject", sub.subjectName())
	}
	return sub, tgt, nil
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
