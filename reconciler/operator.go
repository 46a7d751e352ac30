package reconciler

//lint:file-ignore U1000 staticcheck (v0.6, v0.7) misses that methods of a generic type are used through a generic interface (operator); go vet and the tests cover them.

import (
	"context"
	"time"

	"github.com/cilium/statedb"
)

// operator is the "operate" stage of a round: it applies the work collected
// in the round and returns the operations whose outcome is known, for
// commit. There are two: inline, which runs the work on the loop's
// goroutine (WithConcurrency(1)), and workerPool, which hands it to worker
// goroutines and returns whatever they have finished since the last round.
// Every method is called from the loop's goroutine.
type operator[Obj any] interface {
	operate(ctx context.Context, txn statedb.ReadTxn, work []op[Obj]) (done []op[Obj])

	// superseded reports whether a newer version of o's object waits to be
	// applied after o, so that a failure of o need not be retried.
	superseded(o *op[Obj]) bool

	// dropParked forgets what is parked behind o: its version is no longer
	// in the table.
	dropParked(o *op[Obj])

	// reapplies reports whether o's version is parked to be applied again
	// (a prune may have undone it): its own outcome is then not recorded.
	reapplies(o *op[Obj]) bool

	// pruning is called before a prune runs with txn.
	pruning(txn statedb.ReadTxn)

	// release is called with done once it is committed.
	release(done []op[Obj])

	// room is how many operations a round may collect now; hasRoom is
	// room() > 0.
	room() int
	hasRoom() bool

	// finished is signalled when operations finish outside operate; nil
	// for inline.
	finished() <-chan struct{}

	// pending describes the operations collected but not yet committed,
	// as of now.
	pending(now time.Time) pendingWork

	// stop waits for operations in flight to return and returns every op
	// handed to operate that it has not returned from operate yet.
	stop() (unfinished []op[Obj])
}

// pendingWork describes the operations collected and not yet committed.
type pendingWork struct {
	n     int // operations collected, not committed
	depth int // of those, not started: queued for a worker or parked
	// lowChange is the lowest revision of a change among them (a change
	// the reconciler has not finished), zero if none. Retries are counted
	// by the retry queue instead.
	lowChange statedb.Revision
	// oldestSince is the earliest time at which one of their objects was
	// asked to be reconciled, zero if none.
	oldestSince time.Time
	// unfinished is the total, and longest the longest, time the
	// operations running now have been running.
	unfinished, longest time.Duration
}

var (
	_ operator[int] = (*inline[int])(nil)
	_ operator[int] = (*workerPool[int])(nil)
)

func newOperator[Obj any](ctx context.Context, r *reconciler[Obj]) operator[Obj] {
	if r.opts.concurrency > 1 {
		return newWorkerPool(ctx, r)
	}
	return &inline[Obj]{exec: executor[Obj]{r: r}, roundSize: r.opts.roundSize}
}

// inline runs the operations of a round one after another on the loop's
// goroutine, in revision order.
type inline[Obj any] struct {
	exec      executor[Obj]
	roundSize int
}

func (in *inline[Obj]) operate(ctx context.Context, txn statedb.ReadTxn, work []op[Obj]) []op[Obj] {
	in.exec.run(ctx, txn, work)
	return work
}

func (*inline[Obj]) superseded(*op[Obj]) bool { return false }
func (*inline[Obj]) release([]op[Obj])        {}
func (*inline[Obj]) dropParked(*op[Obj])      {}
func (*inline[Obj]) pruning(statedb.ReadTxn)  {}
func (*inline[Obj]) reapplies(*op[Obj]) bool  { return false }
func (in *inline[Obj]) room() int             { return in.roundSize }
func (*inline[Obj]) hasRoom() bool            { return true }
func (*inline[Obj]) finished() <-chan struct{} {
	return nil
}
func (*inline[Obj]) pending(time.Time) pendingWork { return pendingWork{} }
func (*inline[Obj]) stop() []op[Obj]               { return nil }
