package reconcilertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/status"
)

func waitCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "wait until the table, or one object, is reconciled",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.String("key", "", "wait for this object only, until its status is Done or Error")
			},
			Detail: []string{
				"Without --key, the command waits until the reconciler has handled every change of the table up to now (deletes included) and no object is Pending or Refreshing.",
				"Objects in Error waiting for a retry do not hold it up.",
				"With --key, it waits until that object's status is Done or Error; the object must be in the table.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("%w: unexpected arguments %q (select an object with --key)", script.ErrUsage, args)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			key, err := s.Flags.GetString("key")
			if err != nil {
				return nil, err
			}
			if s.Flags.Changed("key") {
				return nil, waitForKey(s, sub, key, timeout)
			}
			return waitForTable(s, sub, timeout)
		},
	)
}

func waitForKey(s *script.State, sub subject, key string, timeout time.Duration) error {
	return waitFor(s, timeout, fmt.Sprintf("for %q to be Done or Error", key), func() (bool, watches, string, error) {
		st, found, watch, err := sub.statusOf(sub.db().ReadTxn(), key)
		switch {
		case err != nil:
			return false, watches{}, "", err
		case !found:
			return false, watches{}, "", fmt.Errorf("no object with key %q in table %q", key, sub.tableName())
		}
		return st.Kind == status.KindDone || st.Kind == status.KindError, watches{watch}, "status is " + formatStatus(st), nil
	})
}

// waitForTable waits in two steps within one timeout: for the reconciler to
// reach the table's current revision, then for no object to be Pending or
// Refreshing (which also covers a reconciler that has not seen them yet).
func waitForTable(s *script.State, sub subject, timeout time.Duration) (script.WaitFunc, error) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(s.Context(), deadline)
	defer cancel()
	want := sub.tableRevision(sub.db().ReadTxn())
	reached, retryLow, err := sub.waitUntilReconciled(ctx, want)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = errTimeout
		}
		return nil, fmt.Errorf("waiting for the reconciler to handle revision %d of table %q (reached %d): %w", want, sub.tableName(), reached, err)
	}
	err = waitFor(s, max(time.Until(deadline), time.Millisecond), "for no object to be Pending or Refreshing", func() (bool, watches, string, error) {
		n, first, watch := sub.unreconciled(sub.db().ReadTxn())
		return n == 0, watches{watch}, fmt.Sprintf("%d object(s) Pending or Refreshing: %s", n, strings.Join(first, ", ")), nil
	})
	if err != nil {
		return nil, err
	}
	out := fmt.Sprintf("reconciled table %q up to revision %d\n", sub.tableName(), reached)
	if retryLow > 0 {
		out += fmt.Sprintf("failures from revision %d on wait for a retry\n", retryLow)
	}
	return func(*script.State) (string, string, error) { return out, "", nil }, nil
}

// formatStatus renders a status without its time, for stable output:
// "Done", "Error: disk full".
func formatStatus(st status.Status) string {
	if st.Kind == status.KindError && st.Terminal {
		return "Error (terminal): " + st.Error
	}
	if st.Kind == status.KindError {
		return st.Kind.String() + ": " + st.Error
	}
	return st.Kind.String()
}
