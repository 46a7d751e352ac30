package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// scriptDrift is the drift check of the scripts' -drift-check: an item is
// in sync when the target holds its value, and the check of a key made to
// fail with drift/fail returns an error. It counts the checks per key for
// drift/checks. Safe for concurrent use.
type scriptDrift struct {
	tgt *reconcilertest.Target[*item]

	mu      sync.Mutex
	fail    map[string]bool
	checks  map[string]int
	changed chan struct{} // closed and replaced on every check
}

func newScriptDrift(tgt *reconcilertest.Target[*item]) *scriptDrift {
	return &scriptDrift{tgt: tgt, fail: map[string]bool{}, checks: map[string]int{}, changed: make(chan struct{})}
}

// errCheckFault is the error of a check made to fail with drift/fail.
var errCheckFault = errors.New("injected check fault")

func (d *scriptDrift) check(ctx context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) (bool, error) {
	d.mu.Lock()
	d.checks[it.ID]++
	fail := d.fail[it.ID]
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	if fail {
		return false, fmt.Errorf("%w: %s", errCheckFault, it.ID)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	v, ok, err := d.tgt.Get(it.ID)
	return ok && v == it.Value, err
}

// options returns the reconciler options of -drift-check and
// -drift-report-only.
func (d *scriptDrift) options(reportOnly bool) []reconciler.Option {
	opts := []reconciler.Option{reconciler.WithDriftCheck(d.check)}
	if reportOnly {
		opts = append(opts, reconciler.WithDriftReportOnly())
	}
	return opts
}

// commands returns drift/fail and drift/checks.
func (d *scriptDrift) commands() map[string]script.Cmd {
	return map[string]script.Cmd{
		"drift/fail": script.Command(script.CmdUsage{Summary: "make the drift check of KEY fail (or succeed again, with clear)", Args: "key [clear]"},
			func(_ *script.State, args ...string) (script.WaitFunc, error) {
				if len(args) < 1 || len(args) > 2 || (len(args) == 2 && args[1] != "clear") {
					return nil, script.ErrUsage
				}
				d.mu.Lock()
				defer d.mu.Unlock()
				d.fail[args[0]] = len(args) == 1
				return nil, nil
			}),
		"drift/checks": script.Command(script.CmdUsage{Summary: "wait (10s at most) until KEY was checked at least MIN times, or print how often it was", Args: "key [min]"},
			func(s *script.State, args ...string) (script.WaitFunc, error) {
				if len(args) < 1 || len(args) > 2 {
					return nil, script.ErrUsage
				}
				want := -1
				if len(args) == 2 {
					var err error
					if want, err = strconv.Atoi(args[1]); err != nil {
						return nil, err
					}
				}
				deadline := time.NewTimer(10 * time.Second)
				defer deadline.Stop()
				for {
					d.mu.Lock()
					n, changed := d.checks[args[0]], d.changed
					d.mu.Unlock()
					if n >= want {
						out := fmt.Sprintf("%s: %d checks\n", args[0], n)
						return func(*script.State) (string, string, error) { return out, "", nil }, nil
					}
					select {
					case <-changed:
					case <-deadline.C:
						return nil, fmt.Errorf("timed out waiting for %d checks of %s: %d", want, args[0], n)
					case <-s.Context().Done():
						return nil, s.Context().Err()
					}
				}
			}),
	}
}
