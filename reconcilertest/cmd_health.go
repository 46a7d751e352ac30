package reconcilertest

import (
	"fmt"
	"regexp"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func healthCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the reconciler's health, or wait until it matches",
			Args:    "[regexp]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.String("level", "", "wait until the level is this one (OK, Degraded, Stopped)")
			},
			Detail: []string{
				"The command prints the health the reconcile job reported, from the Subject's cell.SimpleHealth, as 'SCOPE: level=LEVEL message=MESSAGE error=ERROR'.",
				"With --level or a regexp, it waits until the level is that one and the line matches the regexp.",
				"As cell.SimpleHealth has no change notification, it checks every 10ms until the timeout.",
				"A paused reconciler (reconciler/pause) reports level OK with the message 'Paused'.",
			},
			RegexpArgs: func(rawArgs ...string) []int {
				if len(rawArgs) > 0 {
					return []int{0}
				}
				return nil
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 1 {
				return nil, fmt.Errorf("%w: expected at most one regexp", script.ErrUsage)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			h, scope := sub.health()
			if h == nil {
				return nil, fmt.Errorf("reconciler %q has no Health in its Subject: set it to the hive's *cell.SimpleHealth", sub.subjectName())
			}
			level, err := s.Flags.GetString("level")
			if err != nil {
				return nil, err
			}
			switch cell.Level(level) {
			case "", cell.StatusOK, cell.StatusDegraded, cell.StatusStopped, cell.StatusUnknown:
			default:
				return nil, fmt.Errorf("--level: unknown level %q: want OK, Degraded, Stopped or Unknown", level)
			}
			var re *regexp.Regexp
			if len(args) == 1 {
				if re, err = regexp.Compile(args[0]); err != nil {
					return nil, fmt.Errorf("bad regexp %q: %w", args[0], err)
				}
			}
			matching := level != "" || re != nil
			var line string
			err = waitFor(s, timeout, fmt.Sprintf("for health %q to match", scope), func() (bool, watches, string, error) {
				got, gotLevel, ok := readHealth(h, scope)
				if !ok {
					if !matching {
						return false, watches{}, "", fmt.Errorf("no health reported for scope %q", scope)
					}
					return false, watches{}, fmt.Sprintf("no health reported for scope %q", scope), nil
				}
				line = got
				return (level == "" || gotLevel == cell.Level(level)) && (re == nil || re.MatchString(line)), watches{}, line, nil
			})
			if err != nil {
				return nil, err
			}
			return func(*script.State) (string, string, error) { return line + "\n", "", nil }, nil
		},
	)
}

// readHealth formats the report of scope in h like cell.SimpleHealthCmd.
func readHealth(h *cell.SimpleHealth, scope string) (string, cell.Level, bool) {
	child := h.GetChild(scope)
	if child == nil {
		return "", "", false
	}
	child.Lock() // the mutex of the whole tree, which guards every scope's fields
	defer child.Unlock()
	var errText string
	if child.Error != nil {
		errText = child.Error.Error()
	}
	return fmt.Sprintf("%s: level=%s message=%s error=%s", scope, child.Level, child.Status, errText), child.Level, true
}
