package reconciler

import (
	"fmt"
	"runtime/debug"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
)

// defaultPriorityShare is the share of each round that WithPriority keeps
// for arrival order when given a share of zero.
const defaultPriorityShare = 1.0 / 8

// WithPriority lets priority say which fresh changes (new versions and
// deletes) are applied first: those of higher priority, and among equal
// priorities the first read. A delete's priority is that of the deleted
// object. The priority is read once per change, when it is read (a version
// when its write is read, a delete when it is read), however often the
// change is requeued: held by the circuit breaker, cut short by Pause or
// a stop. A newer version is read anew. priority runs on the
// reconciler's goroutine and must not block; a panic is recovered (unless
// [WithoutPanicRecovery]), logged, and counts as priority 0.
//
// share is the part of each round's room for fresh changes that goes to
// those that have waited longest, whatever their priority, so that a
// steady stream of urgent changes never starves the others: a change with
// n changes read or written before it still waiting is applied once the
// rounds since it was written have had (n+1)/share room between them
// (room taken in arrival order is counted over successive rounds, so a
// share of a round of one object is a whole round now and then). With
// rounds of R objects that is within about (n+1)/(share·R) rounds,
// whatever is written after it: ⌈(n+1)/125⌉ rounds with the default round
// size and share while no retry is due. A share of 0 means the default,
// 1/8; a share of 1
// applies changes in the order they were read, as without priorities.
//
// To choose among them, the reconciler reads up to four rounds of changes
// ahead (four times the round size, see [WithRoundLimits]) and keeps them
// queued, one small record per object, so memory stays bounded however
// many changes wait in the table. Retries, refresh marks and the backlog
// of objects found at start keep their reserve of each round (an eighth
// while there are any); priority orders only the fresh changes.
//
// A reordering reaches only as far as that read-ahead: under a sustained
// overload most changes wait unread, in the order they were written. With
// the option, every fresh change is tracked as a retry is, which costs a
// round about half as much again per object (BenchmarkRoundPriority).
//
// Priorities are off by default: changes are then applied in the order
// they are read, and none of this is paid for. Obj must be the
// reconciled table's object type; Register refuses the option with
// [ErrInvalidConfig] otherwise, if priority is nil, or if share is not in
// [0, 1].
func WithPriority[Obj any](priority func(Obj) int, share float64) Option {
	return func(o *options) {
		o.by = "WithPriority"
		o.priorityShare = share
		o.priority = func(r any) error {
			rr, ok := r.(*reconciler[Obj])
			switch {
			case !ok:
				return fmt.Errorf("reconciler.Register: WithPriority's function is not of the reconciled table's object type: %w", ErrInvalidConfig)
			case priority == nil:
				return fmt.Errorf("reconciler.Register: WithPriority needs a priority function: %w", ErrInvalidConfig)
			}
			rr.setPriority(priority)
			return nil
		}
	}
}

// applyPriority applies WithPriority, if given, once the reconciler is
// built.
func (r *reconciler[Obj]) applyPriority() error {
	if r.opts.priority == nil {
		return nil
	}
	return r.opts.priority(r)
}

// setPriority turns priorities on with priority, guarded against panics.
func (r *reconciler[Obj]) setPriority(priority func(Obj) int) {
	share := r.opts.priorityShare
	if share == 0 {
		share = defaultPriorityShare
	}
	if r.opts.recoverPanics {
		priority = r.recoveredPriority(priority)
	}
	r.queue.Configure(keyqueue.Settings[Obj]{Priority: priority, Share: share})
}

// recoveredPriority returns priority with its panics recovered: an object
// whose priority panics has priority 0. The first panic is logged, then
// one in every priorityPanicLogEvery.
func (r *reconciler[Obj]) recoveredPriority(priority func(Obj) int) func(Obj) int {
	panics := 0
	return func(obj Obj) (p int) {
		defer func() {
			if v := recover(); v != nil {
				if panics%priorityPanicLogEvery == 0 {
					r.log.Error("Priority function panicked; the object takes priority 0",
						"error", fmt.Errorf("%w: %v", ErrPanic, v), "panics", panics+1, "stack", string(debug.Stack()))
				}
				panics++
				p = 0
			}
		}()
		return priority(obj)
	}
}

// priorityPanicLogEvery spaces the logs of a priority function that keeps
// panicking.
const priorityPanicLogEvery = 1000
