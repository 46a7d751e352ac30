package reconcilertest

import (
	"fmt"
	"time"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

func pruneCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "ask the reconciler to prune and wait until it has pruned",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Bool("no-wait", false, "only ask for the prune (Reconciler.Prune) and return")
			},
			Detail: []string{
				"The command calls Reconciler.Prune and waits for a prune whose desired set includes every change of the table made before the command, then prints it.",
				"It fails if that prune failed.",
				"A prune happens only once the table is initialized.",
				"Waiting needs the calls recorded by the Subject's Faults or Target: wrap operations of your own with NewFaultyOps (without faults it passes every call through), or use --no-wait.",
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
			return askAndWaitForPrune(s, sub, timeout, sub.prune, "for a prune", "no prune since the request")
		},
	)
}

// askAndWaitForPrune calls ask (which asks sub for a prune) and, unless
// --no-wait, waits until a prune whose desired set includes every change of
// the table made before the call has run, and prints it; waiting says stuck
// while none has. It fails if that prune failed.
func askAndWaitForPrune(s *script.State, sub subject, timeout time.Duration, ask func(), what, stuck string) (script.WaitFunc, error) {
	noWait, err := s.Flags.GetBool("no-wait")
	if err != nil {
		return nil, err
	}
	if noWait {
		ask()
		return nil, nil
	}
	rec := sub.recorder()
	if rec == nil {
		return nil, fmt.Errorf("reconciler %q has neither Faults nor Target in its Subject, so its prunes cannot be seen: wrap its operations with NewFaultyOps, or use --no-wait", sub.subjectName())
	}
	want := sub.tableRevision(sub.db().ReadTxn())
	seen := len(rec.Calls())
	ask()

	var pruned Call
	err = waitFor(s, timeout, what, func() (bool, watches, string, error) {
		calls, watch := rec.CallsWatch()
		for _, c := range calls[min(seen, len(calls)):] {
			if c.Op == OpPrune && c.Txn != nil && sub.tableRevision(c.Txn) >= want {
				pruned = c
				return true, watches{}, "", nil
			}
		}
		if ok, pending := sub.initialized(sub.db().ReadTxn()); !ok {
			return false, watches{watch}, fmt.Sprintf("table %q is not initialized, pending initializers %q", sub.tableName(), pending), nil
		}
		return false, watches{watch}, stuck, nil
	})
	if err != nil {
		return nil, err
	}
	if pruned.Err != nil {
		return nil, fmt.Errorf("prune failed: %w", pruned.Err)
	}
	return func(*script.State) (string, string, error) { return pruned.String() + "\n", "", nil }, nil
}
