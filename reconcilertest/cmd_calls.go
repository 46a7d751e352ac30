package reconcilertest

import (
	"fmt"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func callsCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the recorded operation calls, or wait for a number of them",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.String("op", "", "only calls of this operation (update, delete, prune)")
				fs.String("key", "", "only calls for this key")
				fs.Int("min", -1, "wait until there are at least this many matching calls")
				fs.Int("exactly", -1, "wait until there are exactly this many matching calls")
				fs.Bool("reset", false, "forget the calls recorded so far, after printing them")
				fs.Bool("target", false, "read the Target's calls (those that reached it) rather than the Faults'")
				fs.Bool("in-flight", false, "read the calls that have started and not yet returned")
				fs.String("via", "", "only calls made as entries of a batch operation (batch) or as single operations (single)")
			},
			Detail: []string{
				"The command prints the calls the reconciler made, one per line in the order they returned, as recorded by the Subject's Faults (every attempt, with injected failures) or, without Faults, by its Target.",
				"With --min or --exactly, it waits until the number of matching calls is reached; --exactly fails at once if there are already more, but with --in-flight, whose calls may still return, it waits for them.",
				"With --target, it reads the calls that reached the Target, which record updated values and the keys prunes removed.",
				"With --reset, it forgets the recorded calls (of Faults and Target) afterwards.",
				"With --in-flight, it reads the calls that have started and not returned, such as those a delay fault holds, in the order they started; --reset does not apply to them.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("%w: unexpected arguments %q (select calls with --op and --key)", script.ErrUsage, args)
			}
			sub, err := lookup(s, reg)
			if err != nil {
				return nil, err
			}
			rec := sub.recorder()
			if fromTarget, _ := s.Flags.GetBool("target"); fromTarget {
				if tgt := sub.targetRecorder(); tgt != nil {
					rec = tgt
				} else {
					return nil, fmt.Errorf("reconciler %q has no Target in its Subject", sub.subjectName())
				}
			}
			if rec == nil {
				return nil, fmt.Errorf("reconciler %q has neither Faults nor Target in its Subject: no calls are recorded", sub.subjectName())
			}
			timeout, err := getTimeout(s)
			if err != nil {
				return nil, err
			}
			opText, _ := s.Flags.GetString("op")
			var op Op
			if opText != "" {
				if op, err = ParseOp(opText); err != nil {
					return nil, fmt.Errorf("--op: %w", err)
				}
			}
			key, _ := s.Flags.GetString("key")
			via, _ := s.Flags.GetString("via")
			if via != "" && via != "batch" && via != "single" {
				return nil, fmt.Errorf("--via: want batch or single, got %q", via)
			}
			inFlight, _ := s.Flags.GetBool("in-flight")
			if inFlight && s.Flags.Changed("reset") {
				return nil, fmt.Errorf("%w: --reset forgets returned calls, not those in flight", script.ErrUsage)
			}
			read := rec.CallsWatch
			if inFlight {
				read = rec.InFlightWatch
			}
			minN, _ := s.Flags.GetInt("min")
			exactly, _ := s.Flags.GetInt("exactly")
			if s.Flags.Changed("min") && s.Flags.Changed("exactly") {
				return nil, fmt.Errorf("%w: give --min or --exactly, not both", script.ErrUsage)
			}
			if (s.Flags.Changed("min") && minN < 0) || (s.Flags.Changed("exactly") && exactly < 0) {
				return nil, fmt.Errorf("--min and --exactly must not be negative")
			}

			var matched []Call
			what := fmt.Sprintf("for calls (op %q, key %q, via %q)", op, key, via)
			if inFlight {
				what = "for calls in flight" + strings.TrimPrefix(what, "for calls")
			}
			err = waitFor(s, timeout, what, func() (bool, watches, string, error) {
				calls, watch := read()
				matched = matched[:0]
				for _, c := range calls {
					if (op == "" || c.Op == op) && (key == "" || c.Key == key) &&
						(via == "" || (via == "batch") == (c.Batch > 0)) {
						matched = append(matched, c)
					}
				}
				n := len(matched)
				state := fmt.Sprintf("%d matching call(s)", n)
				if inFlight {
					state += " in flight"
				}
				switch {
				case exactly >= 0 && n > exactly && !inFlight: // calls recorded are never fewer; calls in flight may return
					return false, watches{}, "", fmt.Errorf("%s, more than the %d expected:\n%s", state, exactly, formatCalls(matched))
				case exactly >= 0:
					return n == exactly, watches{watch}, state, nil
				case minN >= 0:
					return n >= minN, watches{watch}, state, nil
				}
				return true, watches{}, state, nil
			})
			if err != nil {
				return nil, err
			}
			out := formatCalls(matched)
			if reset, _ := s.Flags.GetBool("reset"); reset {
				for _, r := range []CallRecorder{sub.recorder(), sub.targetRecorder()} {
					if r != nil {
						r.ResetCalls()
					}
				}
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}

func formatCalls(calls []Call) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	return b.String()
}
