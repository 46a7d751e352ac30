package reconcilertest

import (
	"fmt"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

// confirmPrune calls the reconciler's ConfirmPrune (see pruneConfirmCmd).
func (t *typedSubject[Obj]) confirmPrune() { t.s.Reconciler.ConfirmPrune() }

func pruneConfirmCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "confirm a prune held by reconciler.WithPruneGuard and wait until it has run",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Bool("no-wait", false, "only confirm (Reconciler.ConfirmPrune) and return")
			},
			Detail: []string{
				"The command calls Reconciler.ConfirmPrune, which lets a held prune run once whatever the guard's bounds, and waits for a prune whose desired set includes every change of the table made before the command, then prints it.",
				"It fails if that prune failed. Without a held prune ConfirmPrune does nothing: the command then waits until --timeout, unless given --no-wait.",
				"Waiting needs the calls recorded by the Subject's Faults or Target, as for reconciler/prune.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("%w: unexpected arguments %q", script.ErrUsage, args)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			confirm, ok := sub.(interface{ confirmPrune() })
			if !ok {
				return nil, fmt.Errorf("reconciler %q cannot confirm prunes", sub.subjectName())
			}
			return askAndWaitForPrune(s, sub, timeout, confirm.confirmPrune, "for the confirmed prune", "no prune since the confirmation (was one held?)")
		},
	)
}
