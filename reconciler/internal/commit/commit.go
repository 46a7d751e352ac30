// Package commit is the commit stage of a reconciler's round: it writes
// the status each operation's outcome calls for back to the table, with a
// compare-and-swap each, and settles each operation's key in the key
// queue. See [Committer].
package commit

import (
	"fmt"
	"time"

	"github.com/converge-go/converge/reconciler/internal/work"
)

// Commit prepares each update's status, writes them in one write
// transaction (see writeStatus), and settles each op in its key's
// lifecycle. Ops that never started go back to the queue, and so do
// failures of ops cut short by a stop (cut): that is no outcome. An update
// failing its last attempt (Policy.MaxAttempts) fails for good, unless the
// batch operation lost its entry or the circuit breaker spared it: those
// are no failures of its own.
func (c *Committer[Obj]) Commit(ops []work.Op[Obj], cut bool, now time.Time) (out Outcome) {
	if len(ops) == 0 {
		return out
	}
	last := c.policy.MaxAttempts
	for i := range ops {
		o := &ops[i]
		switch {
		case cut && o.Err != nil:
			o.Ran = false
		case last > 0 && o.Err != nil && !o.Delete && !o.Spared && !work.IsTerminal(o.Err) && o.Err != work.ErrEntryLost && max(o.Attempt, 1) >= last:
			o.Err = work.Terminal(fmt.Errorf("gave up after %d attempts: %w", max(o.Attempt, 1), o.Err))
		}
	}
	c.wrote = c.wrote[:0]
	switch {
	case c.Shares():
		out.Shared = c.writeShared(ops, now) // with the table's other reconcilers
	case c.prepare(ops, now) > 0:
		c.write(ops, now)
	}
	c.settle(ops, now, &out)
	out.Wrote = c.wrote
	return out
}
