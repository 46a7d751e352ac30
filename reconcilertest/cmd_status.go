package reconcilertest

import (
	"fmt"
	"regexp"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/status"
)

func statusCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print an object's status, or wait until it matches",
			Args:    "key [regexp]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.String("kind", "", "wait until the status has this kind (Pending, Refreshing, Done, Error)")
			},
			Detail: []string{
				"The command prints the status of the object with the given key as 'KEY: KIND' or 'KEY: Error: MESSAGE'.",
				"With --kind or a regexp, it waits until the status has that kind and the printed line matches the regexp.",
				"The object must be in the table.",
			},
			RegexpArgs: func(rawArgs ...string) []int {
				if len(rawArgs) > 1 {
					return []int{1}
				}
				return nil
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) < 1 || len(args) > 2 {
				return nil, fmt.Errorf("%w: expected KEY [REGEXP]", script.ErrUsage)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			kindText, err := s.Flags.GetString("kind")
			if err != nil {
				return nil, err
			}
			kind, err := status.ParseKind(kindText)
			if err != nil {
				return nil, fmt.Errorf("--kind: %w", err)
			}
			var re *regexp.Regexp
			if len(args) == 2 {
				if re, err = regexp.Compile(args[1]); err != nil {
					return nil, fmt.Errorf("bad regexp %q: %w", args[1], err)
				}
			}
			key, line := args[0], ""
			what := fmt.Sprintf("for the status of %q to match", key)
			err = waitFor(s, timeout, what, func() (bool, watches, string, error) {
				st, found, watch, err := sub.statusOf(sub.db().ReadTxn(), key)
				switch {
				case err != nil:
					return false, watches{}, "", err
				case !found:
					return false, watches{}, "", fmt.Errorf("no object with key %q in table %q", key, sub.tableName())
				}
				line = key + ": " + formatStatus(st)
				ok := (kind == status.KindUnset || st.Kind == kind) && (re == nil || re.MatchString(line))
				return ok, watches{watch}, line, nil
			})
			if err != nil {
				return nil, err
			}
			return func(*script.State) (string, string, error) { return line + "\n", "", nil }, nil
		},
	)
}
