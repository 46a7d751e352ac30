package reconciler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/gate"
	"github.com/converge-go/converge/reconciler/internal/groupcommit"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// reconciler implements Reconciler: what Register was given and the state
// its jobs work on, declared here for the stages (loop.go runs collect.go,
// operate.go, commit.go, prune.go, report.go in order) and built of types
// that each own a file or a package below them (keys.go, stale.go,
// changes.go; packages keyqueue, executor, gate, breaker and report under
// internal/). No two files refer to each other both ways.
// Fields from feed on are owned by the reconcile job's goroutine.
type reconciler[Obj any] struct {
	opts     options
	log      *slog.Logger
	db       *statedb.DB
	objects  work.Objects[Obj] // the table, and how to copy its objects and set their status
	moduleID cell.FullModuleID
	target   target[Obj] // the user's operations

	rep reporter[Obj] // health, metrics, progress and the tables' rows

	pruneRequests chan struct{}    // a prune asked for: by Prune, from any goroutine, or owed by the last run (see loop.stopped)
	gate          *gate.Gate       // may an operation start now (Pause, a prune, a stop, the circuit breaker)
	settings      *settings        // what Configure posts to the jobs, as Pause posts to the gate
	breaker       *breaker.Breaker // nil without WithCircuitBreaker
	clock         clock            // time.Now and rand.Float64, or a test's

	feed  feed[Obj]   // the table's changes, and what reading them keeps
	keys  keys[Obj]   // what is known about each key
	group shared[Obj] // the other reconcilers of the table, while the job runs (see shared)
}

// clock is where the reconciler reads the time and draws retry jitter:
// time.Now and rand.Float64, kept as functions so that a test can replace
// them before the reconciler starts. Read-only after; safe for concurrent
// use. The zero value is not usable.
type clock struct {
	now  func() time.Time
	rand func() float64
}

// writtenBack records that cur, found where the version asked for by the
// status statusID was applied or tried, carries another status of this
// reconciler. One that asks for nothing and is older than statusID, or
// found where the version had no identity (statusID zero: nothing tells
// which is older), was written back over what the target got: it is stale
// (see staleness), and cur is new work when its change is read. So is a
// Done without identity (a literal, or decoded), whose age nothing tells.
func (r *reconciler[Obj]) writtenBack(cur Obj, statusID uint64) {
	st := r.objects.GetStatus(cur)
	switch {
	case st.IsPendingOrRefreshing(), st.ID() == 0 && st.Kind != status.KindDone, statusID != 0 && st.ID() >= statusID:
		return
	}
	if key, ok := r.objects.Primary.ObjectToKey(cur); ok {
		// Every status before statusID is stale, and st with them.
		r.keys.lifecycles.Add(keyqueue.Change[Obj]{RawKey: key, As: keyqueue.WrittenBack, Cut: max(statusID, st.ID()+1) - 1})
	}
}

// noKey logs that an object without a primary key was met where, and is
// left alone. It happens only when a user function (clone, setStatus, or
// Update on its argument) changed the fields the primary index reads.
func (r *reconciler[Obj]) noKey(where string, obj Obj) {
	r.log.Error("Reconciler met an object without a primary key; leaving it alone",
		"where", where, "error", ErrNoPrimaryKey, "object", fmt.Sprintf("%v", obj))
}

// startSpan starts a span of the reconciler's tracer, which must be set.
func (r *reconciler[Obj]) startSpan(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	s.Module, s.Name = r.moduleID.String(), r.opts.name
	return r.opts.tracer.Start(ctx, s)
}

func (r *reconciler[Obj]) jobName(base string) string {
	if r.opts.name == "" {
		return base
	}
	return base + "-" + r.opts.name
}

// logBreaker logs the circuit breaker opening (err is the failure that
// opened it) or closing.
func (r *reconciler[Obj]) logBreaker(open, startup bool, err error) {
	switch {
	case open && startup:
		r.log.Warn("Target not answering since the reconciler started: it holds operations and probes it", "error", err)
	case open:
		r.log.Error("Target failing: reconciler stops starting operations and probes it", "error", err)
	default:
		r.log.Info("Target answered: reconciler resumes")
	}
}

// shared is the reconciler's membership of its table's group commit (see
// package groupcommit) while the reconcile job runs: several reconcilers
// of one table (the names of a status.Set) write the statuses they settle
// close together in one write transaction, and those of one object version
// in one object write, instead of once each. A reconciler alone on its
// table writes by itself, as if there were no group. The reconcile job's
// goroutine owns it.
type shared[Obj any] struct {
	member *groupcommit.Member[Obj] // nil while the job does not run
	busy   bool                     // the round said Begin
	sts    []status.Status          // writeShared's buffer: the status of each update
	// landed is closed once the statuses of the last commit with the
	// group are in the table: the group's write tells its members their
	// outcome once nothing can change it, and commits after (see
	// groupcommit.Member.Landed). Until then the round's progress is owed:
	// WaitUntilReconciled must not return before the statuses can be read.
	// nil if the reconciler never wrote with the group.
	landed <-chan struct{}
	owed   bool // progress not published: landed was open at the round's report
	// over says that the last commit with the group wrote a status over a
	// changed object (see writeStatus): until it lands, the change that
	// object had (another writer's, this reconciler's status kept) reads
	// as the version just applied, to do again (see landFirst).
	over bool
}
