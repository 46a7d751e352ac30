package reconcilertest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/hive"
	"github.com/cilium/hive/script"
)

// Restarter lets a script restart the program under test with hive's own
// commands: after "hive stop" (or "hive/stop"), the next "hive start" (or
// "hive/start") starts a new hive built by newHive rather than the stopped
// one. The new hive has a new, empty StateDB and new reconcilers, as after
// a process restart, while whatever lives outside the hive (a [Target],
// a [FaultyOps], a [Registry]) is kept, as a real target system would be.
// The script then repopulates the table, marks it initialized, and the
// first prune removes what is no longer wanted.
//
// Without a Restarter, hive v1.0.4's "hive stop" and "hive start" run the
// stop and start hooks of the same objects: the database and its tables
// survive and the same reconcilers start again, which is the other restart
// a script may want (see the package documentation); the commands of this
// package work with both.
//
// The commands of every hive built are those of the first: the command
// map returned by ScriptCommands forwards each call to the current hive's
// command of the same name. Methods are safe for concurrent use; none
// blocks except Stop and the hive commands, which take as long as the
// hive's hooks. Use [NewRestarter]; the zero Restarter is not usable.
type Restarter struct {
	log     *slog.Logger
	newHive func() *hive.Hive

	mu       sync.Mutex
	cur      *hive.Hive
	cmds     map[string]script.Cmd
	stopped  bool
	restarts int
}

// NewRestarter builds the first hive with newHive and populates it (which
// runs its constructors and invokes, so reconcilers are registered and added
// to a Registry before the script starts). log is given to the hives. It
// returns an error if populating fails.
func NewRestarter(log *slog.Logger, newHive func() *hive.Hive) (*Restarter, error) {
	r := &Restarter{log: log, newHive: newHive}
	if err := r.build(); err != nil {
		return nil, err
	}
	return r, nil
}

// build must be called with mu held, or before r is shared.
func (r *Restarter) build() error {
	h := r.newHive()
	cmds, err := h.ScriptCommands(r.log)
	if err != nil {
		return fmt.Errorf("reconcilertest.Restarter: %w", err)
	}
	r.cur, r.cmds, r.stopped = h, cmds, false
	return nil
}

// Hive returns the current hive.
func (r *Restarter) Hive() *hive.Hive {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Restarts returns how many times a new hive was built for "hive start".
func (r *Restarter) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

// Stop stops the current hive, for a test's cleanup. Stopping a hive that
// is already stopped, or was never started, does nothing.
func (r *Restarter) Stop(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	return r.cur.Stop(r.log, ctx)
}

// ScriptCommands returns the first hive's script commands (hive, hive/start,
// hive/stop and those the hive provides, such as statedb's db/*), each
// forwarding to the current hive. Add them to the script engine instead
// of the hive's own.
func (r *Restarter) ScriptCommands() map[string]script.Cmd {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]script.Cmd, len(r.cmds))
	for name, cmd := range r.cmds {
		out[name] = &forwardCmd{r: r, name: name, usage: *cmd.Usage()}
	}
	return out
}

// command returns the current hive's command name, first building a new
// hive if this starts a stopped one.
func (r *Restarter) command(name string, args []string) (script.Cmd, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped && isHiveCmd(name, args, "start") {
		if err := r.build(); err != nil {
			return nil, err
		}
		r.restarts++
	}
	cmd, ok := r.cmds[name]
	if !ok {
		return nil, fmt.Errorf("the restarted hive has no command %q", name)
	}
	return cmd, nil
}

func (r *Restarter) markStopped() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
}

// isHiveCmd reports whether name and args are "hive VERB" or "hive/VERB".
func isHiveCmd(name string, args []string, verb string) bool {
	return name == "hive/"+verb || (name == "hive" && len(args) > 0 && args[0] == verb)
}

// forwardCmd runs the current hive's command of its name.
type forwardCmd struct {
	r     *Restarter
	name  string
	usage script.CmdUsage
}

func (c *forwardCmd) Usage() *script.CmdUsage { return &c.usage }

func (c *forwardCmd) Run(s *script.State, args ...string) (script.WaitFunc, error) {
	cmd, err := c.r.command(c.name, args)
	if err != nil {
		return nil, err
	}
	wait, err := cmd.Run(s, args...)
	if err == nil && isHiveCmd(c.name, args, "stop") {
		c.r.markStopped()
	}
	return wait, err
}
