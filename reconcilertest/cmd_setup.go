package reconcilertest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/reconciler"
)

// SetupFault is a setup step for reconciler.WithSetup whose failures a
// test controls: pass its Setup method to WithSetup and set it as the
// Subject's Setup, for reconciler/setup-fault. It succeeds unless told to
// fail with Fail. The zero value is not usable: make one with
// NewSetupFault. Safe for concurrent use.
type SetupFault struct {
	mu        sync.Mutex
	mode      Mode          // ModeError, ModePanic or ModeRetryAfter
	left      int           // failures left; negative: until Clear
	after     time.Duration // ModeRetryAfter's delay
	calls     int
	succeeded int
	changed   chan struct{} // closed and replaced on every call's end
}

// NewSetupFault returns a setup step that succeeds.
func NewSetupFault() *SetupFault { return &SetupFault{changed: make(chan struct{})} }

// Setup is the setup step: it fails as Fail set, else returns nil. Its
// errors wrap ErrInjected.
func (f *SetupFault) Setup(ctx context.Context, _ statedb.ReadTxn) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	defer func() {
		close(f.changed)
		f.changed = make(chan struct{})
	}()
	if f.left == 0 {
		f.succeeded++
		return nil
	}
	if f.left > 0 {
		f.left--
	}
	err := fmt.Errorf("setup: %w", ErrInjected)
	switch f.mode {
	case ModePanic:
		panic(err)
	case ModeRetryAfter:
		return reconciler.RetryAfter(f.after, err)
	}
	return err
}

// Fail makes the next n calls fail (n < 0: every call until Clear) with an
// error wrapping ErrInjected (ModeError), a panic of one (ModePanic) or
// one wrapped in reconciler.RetryAfter(after) (ModeRetryAfter).
func (f *SetupFault) Fail(mode Mode, n int, after time.Duration) error {
	switch mode {
	case ModeError, ModePanic, ModeRetryAfter:
	default:
		return fmt.Errorf("a setup step fails with error, panic or retry-after, not %s", mode)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.left, f.after = mode, n, after
	return nil
}

// Clear makes the calls succeed again.
func (f *SetupFault) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = 0
}

// Calls returns how many calls the step had, how many succeeded, and a
// channel closed when the next call ends.
func (f *SetupFault) Calls() (calls, succeeded int, changed <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.succeeded, f.changed
}

// setupFault is the Subject's SetupFault, for setupFaultCmd.
func (t *typedSubject[Obj]) setupFault() *SetupFault { return t.s.Setup }

func setupFaultCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "make the setup step (reconciler.WithSetup) fail, clear that, or print its calls",
			Args:    "[error|panic|retry-after|clear]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Int("next", 0, "only the next N calls fail (default: until cleared)")
				fs.Duration("duration", 0, "the delay of 'retry-after'")
				fs.Int("succeeded", 0, "without a mode: first wait until the step has succeeded N times in all")
			},
			Detail: []string{
				"'error' fails the calls (wrapping ErrInjected), 'panic' panics, 'retry-after' fails with reconciler.RetryAfter(--duration).",
				"Without a mode, it prints 'calls=N succeeded=M' after waiting for --succeeded.",
				"It needs the Subject's Setup (see NewSetupFault), given to reconciler.WithSetup.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 1 {
				return nil, fmt.Errorf("%w: expected one mode", script.ErrUsage)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			var sf *SetupFault
			if h, ok := sub.(interface{ setupFault() *SetupFault }); ok {
				sf = h.setupFault()
			}
			if sf == nil {
				return nil, fmt.Errorf("reconciler %q has no Setup in its Subject: give it a NewSetupFault", sub.subjectName())
			}
			next, _ := s.Flags.GetInt("next")
			after, _ := s.Flags.GetDuration("duration")
			switch {
			case len(args) == 0:
				want, _ := s.Flags.GetInt("succeeded")
				var line string
				err := waitFor(s, timeout, fmt.Sprintf("for %d successful setup call(s)", want), func() (bool, watches, string, error) {
					calls, ok, changed := sf.Calls()
					line = fmt.Sprintf("calls=%d succeeded=%d", calls, ok)
					return ok >= want, watches{changed}, line, nil
				})
				if err != nil {
					return nil, err
				}
				return func(*script.State) (string, string, error) { return line + "\n", "", nil }, nil
			case args[0] == "clear":
				sf.Clear()
				return nil, nil
			}
			mode, err := ParseMode(args[0])
			if err != nil {
				return nil, fmt.Errorf("%w: %w", script.ErrUsage, err)
			}
			if s.Flags.Changed("duration") && mode != ModeRetryAfter {
				return nil, fmt.Errorf("--duration applies to retry-after, not %s", mode)
			}
			if next <= 0 {
				next = -1
			}
			return nil, sf.Fail(mode, next, after)
		},
	)
}
