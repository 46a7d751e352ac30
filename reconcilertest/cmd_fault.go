package reconcilertest

import (
	"fmt"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func faultCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "inject faults into the reconciler's operations, clear or list them",
			Args:    "[error|terminal|retry-after|panic|delay|recheck|clear]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				fs.String("key", "", "only calls for this object key (default: every call, prunes included)")
				fs.String("op", "", "only this operation: update, delete or prune (default: all)")
				fs.Int("next", 0, "only the next N calls the fault fires on (default: until cleared)")
				fs.Float64("prob", 0, "fire with this probability, in (0, 1), drawn from --seed")
				fs.Uint64("seed", 1, "seed for --prob: the same calls get the same faults on every run")
				fs.Duration("duration", 0, "delay of 'delay' (default: until cleared), of 'retry-after' and of 'recheck'")
				fs.Bool("after", false, "fire once the wrapped operation succeeded: its change is applied, then the call fails or is delayed")
			},
			Detail: []string{
				"The modes: 'error' fails the call (wrapping ErrInjected), 'terminal' fails it with reconciler.TerminalError, 'retry-after' with reconciler.RetryAfter (--duration), 'panic' panics (part way through a batch), 'delay' holds the call for --duration, or until cleared, unless its context ends first, and 'recheck' lets an update succeed and ask for a re-check after --duration (reconciler.RecheckAfter).",
				"With --after, the fault fires on calls that the wrapped operation carried out without error, once it returned: the change is applied, then the call fails, or is held with it applied; 'panic' cannot be injected after.",
				"The newest fault matching a call decides.",
				"'clear' removes the faults for --key (or all) and releases delayed calls.",
				"Without arguments, the command lists the active faults.",
				"It needs the Subject's Faults (see NewFaultyOps).",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 1 {
				return nil, fmt.Errorf("%w: expected one mode", script.ErrUsage)
			}
			sub, err := lookup(s, reg)
			if err != nil {
				return nil, err
			}
			faults := sub.faults()
			if faults == nil {
				return nil, fmt.Errorf("reconciler %q has no Faults in its Subject: wrap its operations with NewFaultyOps", sub.subjectName())
			}
			key, _ := s.Flags.GetString("key")
			var out string
			switch {
			case len(args) == 0:
				var b strings.Builder
				for _, f := range faults.Faults() {
					b.WriteString(f.String() + "\n")
				}
				out = b.String()
			case args[0] == "clear":
				out = fmt.Sprintf("cleared %d fault(s)\n", faults.Clear(key))
			default:
				f, err := faultFromFlags(s.Flags, args[0])
				if err != nil {
					return nil, err
				}
				if err := faults.Inject(f); err != nil {
					return nil, err
				}
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}

// faultFromFlags builds the Fault a reconciler/fault line asks for.
func faultFromFlags(fs *pflag.FlagSet, modeText string) (Fault, error) {
	mode, err := ParseMode(modeText)
	if err != nil {
		return Fault{}, fmt.Errorf("%w: %w", script.ErrUsage, err)
	}
	f := Fault{Mode: mode}
	f.Key, _ = fs.GetString("key")
	opText, _ := fs.GetString("op")
	if opText != "" {
		if f.Op, err = ParseOp(opText); err != nil {
			return Fault{}, fmt.Errorf("--op: %w", err)
		}
	}
	f.Next, _ = fs.GetInt("next")
	f.Probability, _ = fs.GetFloat64("prob")
	f.Seed, _ = fs.GetUint64("seed")
	f.Duration, _ = fs.GetDuration("duration")
	f.After, _ = fs.GetBool("after")
	if fs.Changed("prob") && (f.Probability <= 0 || f.Probability >= 1) {
		return Fault{}, fmt.Errorf("--prob must be in (0, 1), got %v", f.Probability)
	}
	if fs.Changed("seed") && !fs.Changed("prob") {
		return Fault{}, fmt.Errorf("--seed needs --prob")
	}
	if fs.Changed("duration") && mode != ModeDelay && mode != ModeRetryAfter && mode != ModeRecheck {
		return Fault{}, fmt.Errorf("--duration applies to delay, retry-after and recheck, not %s", mode)
	}
	return f, nil
}
