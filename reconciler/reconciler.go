package reconciler

import (
	"log/slog"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/collect"
	"github.com/converge-go/converge/reconciler/internal/commit"
	"github.com/converge-go/converge/reconciler/internal/gate"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
)

// reconciler implements Reconciler: what Register was given and the state
// its jobs work on, declared here for the stages (loop.go runs collect.go,
// operate.go, package commit, prune.go, report.go in order) and built of types
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

	collect *collect.Collector[Obj] // the collect stage: the table's changes, and what reading them keeps
	queue   *keyqueue.Queue[Obj]    // what is known about each key
	commit  *commit.Committer[Obj]  // the commit stage: statuses written, keys settled, the table's group commit
}

// clock is where the reconciler reads the time and draws retry jitter:
// time.Now and rand.Float64, kept as functions so that a test can replace
// them before the reconciler starts. Read-only after; safe for concurrent
// use. The zero value is not usable.
type clock struct {
	now  func() time.Time
	rand func() float64
}

// noKey logs that an object without a primary key was met where (see
// work.LogNoKey).
func (r *reconciler[Obj]) noKey(where string, obj Obj) { work.LogNoKey(r.log, where, obj) }

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
