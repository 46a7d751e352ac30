package reconcilertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

func waitObjectCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "wait for one object with reconciler.WaitForObject",
			Args:    "key",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Bool("stop-on-error", false, "fail as soon as the status is Error (reconciler.StopOnError)")
			},
			Detail: []string{
				"The command waits, as reconciler.WaitForObject does, until the object with the given key is Done, then prints 'KEY: Done'.",
				"It fails, printing what it saw, when the object is deleted ('KEY: deleted'), when its status is a terminal Error ('KEY: Error (terminal): MESSAGE'), with --stop-on-error when its status is any Error ('KEY: Error: MESSAGE'), and at the timeout ('KEY: timed out, last status KIND', or 'KEY: timed out, not in the table').",
				"Without --stop-on-error a retryable Error keeps it waiting, as a retry may succeed.",
				"If the object is not in the table yet, it waits for it to appear.",
				"Run it in the background ('reconciler/wait-object KEY &', then 'wait') to start waiting before the writes it waits for.",
			},
			Async: true,
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("%w: expected one KEY", script.ErrUsage)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			stopOnError, err := s.Flags.GetBool("stop-on-error")
			if err != nil {
				return nil, err
			}
			key := args[0]
			ctx, cancel := context.WithTimeout(s.Context(), timeout)
			wait, err := sub.startWaitForObject(ctx, key, stopOnError)
			if err != nil {
				cancel()
				return nil, err
			}
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				defer cancel()
				st, seen, err := wait()
				out, err := describeObjectWait(s.Context(), key, timeout, st, seen, err)
				done <- result{out, err}
			}()
			return func(*script.State) (string, string, error) {
				r := <-done
				return r.out, "", r.err
			}, nil
		},
	)
}

// describeObjectWait turns what the wait for key returned into the
// command's output and error. A timeout does not wrap the context's error,
// so that a script can expect it with "!".
func describeObjectWait(scriptCtx context.Context, key string, timeout time.Duration, st status.Status, seen bool, err error) (string, error) {
	switch {
	case err == nil:
		return key + ": Done\n", nil
	case errors.Is(err, reconciler.ErrObjectFailed):
		return key + ": " + formatStatus(st) + "\n", fmt.Errorf("object %q failed: %w", key, err)
	case errors.Is(err, reconciler.ErrObjectDeleted), errors.Is(err, reconciler.ErrObjectNotFound):
		return key + ": deleted\n", fmt.Errorf("object %q was deleted while waiting for it", key)
	case scriptCtx.Err() != nil:
		return "", fmt.Errorf("waiting for %q: %w", key, err)
	case errors.Is(err, context.DeadlineExceeded) && !seen:
		return key + ": timed out, not in the table\n", fmt.Errorf("%w after %s waiting for %q to appear in the table", errTimeout, timeout, key)
	case errors.Is(err, context.DeadlineExceeded):
		return key + ": timed out, last status " + formatStatus(st) + "\n", fmt.Errorf("%w after %s waiting for %q to be Done: last status %s", errTimeout, timeout, key, formatStatus(st))
	}
	return "", fmt.Errorf("waiting for %q: %w", key, err)
}
