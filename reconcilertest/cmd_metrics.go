package reconcilertest

import (
	"expvar"
	"fmt"
	"regexp"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func metricsCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the reconciler's expvar metrics, or wait until they match",
			Args:    "[regexp...]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
			},
			Detail: []string{
				"The command prints the Subject's metrics.ExpVar as one 'VARIABLE KEY: VALUE' line per figure, sorted, for example 'reconciliation_current_errors mymodule: 0'.",
				"The keys are the module ID, with '/NAME' for a named reconciler (see metrics.ExpVar).",
				"With regexps, it waits until each matches a line.",
				"As expvar has no change notification, it checks every 10ms until the timeout.",
			},
			RegexpArgs: func(rawArgs ...string) []int {
				idx := make([]int, len(rawArgs))
				for i := range idx {
					idx[i] = i
				}
				return idx
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			sub, err := lookup(s, reg)
			if err != nil {
				return nil, err
			}
			m := sub.metrics()
			if m == nil {
				return nil, fmt.Errorf("reconciler %q has no Metrics in its Subject: set it to the *metrics.ExpVar given to reconciler.WithMetrics", sub.subjectName())
			}
			timeout, err := getTimeout(s)
			if err != nil {
				return nil, err
			}
			res := make([]*regexp.Regexp, len(args))
			for i, a := range args {
				if res[i], err = regexp.Compile(a); err != nil {
					return nil, fmt.Errorf("bad regexp %q: %w", a, err)
				}
			}
			var lines []string
			err = waitFor(s, timeout, "for the metrics to match", func() (bool, watches, string, error) {
				lines = formatExpVar(m.Map())
				var missing []string
			next:
				for _, re := range res {
					for _, l := range lines {
						if re.MatchString(l) {
							continue next
						}
					}
					missing = append(missing, fmt.Sprintf("%q", re))
				}
				state := "no line matches " + strings.Join(missing, ", ") + " in:\n" + strings.Join(lines, "\n")
				return len(missing) == 0, watches{}, state, nil
			})
			if err != nil {
				return nil, err
			}
			out := strings.Join(lines, "\n")
			if out != "" {
				out += "\n"
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}

// formatExpVar renders a map of maps, as metrics.ExpVar.Map returns, as
// sorted "VARIABLE KEY: VALUE" lines.
func formatExpVar(m *expvar.Map) []string {
	var lines []string
	m.Do(func(v expvar.KeyValue) {
		inner, ok := v.Value.(*expvar.Map)
		if !ok {
			lines = append(lines, fmt.Sprintf("%s: %s", v.Key, v.Value))
			return
		}
		inner.Do(func(kv expvar.KeyValue) {
			lines = append(lines, fmt.Sprintf("%s %s: %s", v.Key, kv.Key, kv.Value))
		})
	})
	return lines
}
