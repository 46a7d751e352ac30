package reconcilertest

import (
	"fmt"

	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

// pausedMessage is the health message of a paused reconciler.
const pausedMessage = "Paused"

func pauseCmd(reg *Registry) script.Cmd {
	return pauseOrResumeCmd(reg, true, script.CmdUsage{
		Summary: "pause the reconciler and wait until it says it is paused",
		Flags:   pauseFlags,
		Detail: []string{
			"The command calls Reconciler.Pause, then waits until the reconcile job's health says 'Paused' (level OK).",
			"From then on no operation, prune or refresh sweep starts until reconciler/resume, while changes to the table accumulate.",
			"Operations already running finish first.",
			"Pausing a paused reconciler does nothing.",
			"Waiting needs the Subject's Health, which it checks every 10ms; with --no-wait it only calls Pause.",
		},
	})
}

func resumeCmd(reg *Registry) script.Cmd {
	return pauseOrResumeCmd(reg, false, script.CmdUsage{
		Summary: "resume a paused reconciler and wait until it no longer says it is paused",
		Flags:   pauseFlags,
		Detail: []string{
			"The command calls Reconciler.Resume, then waits until the reconcile job's health no longer says 'Paused'.",
			"The reconciler has then started a round, and every change made while it was paused converges (reconciler/wait waits for that).",
			"Resuming a running reconciler does nothing.",
			"Waiting needs the Subject's Health, which it checks every 10ms; with --no-wait it only calls Resume.",
		},
	})
}

func pauseFlags(fs *pflag.FlagSet) {
	nameFlag(fs)
	timeoutFlag(fs)
	fs.Bool("no-wait", false, "only call the method and return")
}

func pauseOrResumeCmd(reg *Registry, pause bool, usage script.CmdUsage) script.Cmd {
	return script.Command(usage, func(s *script.State, args ...string) (script.WaitFunc, error) {
		if len(args) > 0 {
			return nil, fmt.Errorf("%w: unexpected arguments %q", script.ErrUsage, args)
		}
		sub, timeout, err := lookupTimed(s, reg)
		if err != nil {
			return nil, err
		}
		noWait, err := s.Flags.GetBool("no-wait")
		if err != nil {
			return nil, err
		}
		h, scope := sub.health()
		if h == nil && !noWait {
			return nil, fmt.Errorf("reconciler %q has no Health in its Subject, so whether it paused cannot be seen: set it to the hive's *cell.SimpleHealth, or use --no-wait", sub.subjectName())
		}
		what := "for the reconciler to say it is paused"
		if pause {
			sub.pause()
		} else {
			sub.resume()
			what = "for the reconciler to say it is no longer paused"
		}
		if noWait {
			return nil, nil
		}
		return nil, waitFor(s, timeout, what, func() (bool, watches, string, error) {
			line, level, ok := readHealth(h, scope)
			if !ok {
				return false, watches{}, fmt.Sprintf("no health reported for scope %q", scope), nil
			}
			paused := level == cell.StatusOK && healthMessage(h, scope) == pausedMessage
			return paused == pause, watches{}, line + " (is the hive started?)", nil
		})
	})
}

// healthMessage returns the message of scope's last health report.
func healthMessage(h *cell.SimpleHealth, scope string) string {
	child := h.GetChild(scope)
	if child == nil {
		return ""
	}
	child.Lock()
	defer child.Unlock()
	return child.Status
}
