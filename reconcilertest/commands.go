package reconcilertest

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"
)

// DefaultTimeout is how long the commands that wait do so unless given
// --timeout.
const DefaultTimeout = 10 * time.Second

// pollInterval is how often conditions without a watch channel (health)
// are checked.
const pollInterval = 10 * time.Millisecond

// ScriptCommands returns the reconciler/* script commands, acting on the
// reconcilers in reg. Add them to a script engine next to the hive's own
// commands (which include statedb's db/* commands):
//
//	cmds, err := h.ScriptCommands(log)
//	maps.Insert(cmds, maps.All(reconcilertest.ScriptCommands(reg)))
//
// The commands look reconcilers up in reg when they run, so reg may be
// filled in later (when the hive is populated) and refilled after a
// restart. Run "help reconciler/" in a script for their usage. Commands
// that wait block the script until their condition holds, --timeout passes
// (an error saying what was last seen) or the script's context ends; they
// do not sleep but wake on StateDB watch channels and on the target's and
// call logs' change channels, except reconciler/health and
// reconciler/metrics, which poll because cell.SimpleHealth and expvar have
// no change notification.
func ScriptCommands(reg *Registry) map[string]script.Cmd {
	cmds := map[string]script.Cmd{
		"reconciler/wait":         waitCmd(reg),
		"reconciler/wait-object":  waitObjectCmd(reg),
		"reconciler/status":       statusCmd(reg),
		"reconciler/prune":        pruneCmd(reg),
		"reconciler/pause":        pauseCmd(reg),
		"reconciler/resume":       resumeCmd(reg),
		"reconciler/health":       healthCmd(reg),
		"reconciler/metrics":      metricsCmd(reg),
		"reconciler/retries":      retriesCmd(reg),
		"reconciler/target":       targetCmd(reg),
		"reconciler/target/set":   targetSetCmd(reg),
		"reconciler/target/unset": targetUnsetCmd(reg),
		"reconciler/calls":        callsCmd(reg),
		"reconciler/fault":        faultCmd(reg),
		"reconciler/save":         saveCmd(reg),
		"reconciler/put-back":     putBackCmd(reg),
		"reconciler/setup-fault":  setupFaultCmd(reg),
		"reconciler/configure":    configureCmd(reg),
	}
	cmds["reconciler/prune-confirm"] = pruneConfirmCmd(reg)
	maps.Insert(cmds, maps.All(setsCmds(reg)))
	return cmds
}

// nameFlag adds --name, which every command has.
func nameFlag(fs *pflag.FlagSet) {
	fs.String("name", "", "the reconciler's name (default: the only one registered, or the unnamed one)")
}

// timeoutFlag adds --timeout, which the commands that wait have.
func timeoutFlag(fs *pflag.FlagSet) {
	fs.Duration("timeout", DefaultTimeout, "how long to wait before failing")
}

// lookup finds the subject selected by --name.
func lookup(s *script.State, reg *Registry) (subject, error) {
	name, err := s.Flags.GetString("name")
	if err != nil {
		return nil, err
	}
	return reg.lookup(name, s.Flags.Changed("name"))
}

// getTimeout reads --timeout, which must be positive.
func getTimeout(s *script.State) (time.Duration, error) {
	d, err := s.Flags.GetDuration("timeout")
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("--timeout must be positive, got %s", d)
	}
	return d, nil
}

// lookupTimed is lookup and getTimeout together, as most commands start:
// the reconciler --name selects and how long to wait for it.
func lookupTimed(s *script.State, reg *Registry) (subject, time.Duration, error) {
	sub, err := lookup(s, reg)
	if err != nil {
		return nil, 0, err
	}
	timeout, err := getTimeout(s)
	if err != nil {
		return nil, 0, err
	}
	return sub, timeout, nil
}

// errTimeout marks a wait that gave up.
var errTimeout = errors.New("timed out")

// watches are the channels a wait is woken by; nil entries are ignored.
type watches [2]<-chan struct{}

// waitFor calls check until it reports done, then returns nil. Between
// calls it waits for one of check's watch channels to close, or polls
// every pollInterval if it gave none. It gives up after timeout or when the
// script's context ends, with an error naming what and check's last
// description of the state. An error from check ends the wait at once.
func waitFor(s *script.State, timeout time.Duration, what string, check func() (done bool, w watches, state string, err error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var poll *time.Ticker
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		done, w, state, err := check()
		if err != nil || done {
			return err
		}
		var tick <-chan time.Time
		if w[0] == nil && w[1] == nil {
			if poll == nil {
				poll = time.NewTicker(pollInterval)
			}
			tick = poll.C
		}
		select {
		case <-w[0]:
		case <-w[1]:
		case <-tick:
		case <-deadline.C:
			return fmt.Errorf("%w after %s waiting %s: %s", errTimeout, timeout, what, state)
		case <-s.Context().Done():
			return fmt.Errorf("waiting %s: %w: %s", what, s.Context().Err(), state)
		}
	}
}
