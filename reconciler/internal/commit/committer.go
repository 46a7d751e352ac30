package commit

import (
	"log/slog"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/groupcommit"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/report"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

// Committer is a reconciler's commit stage. Commit writes the statuses of
// a round's operations in one write transaction, or with the table's
// other reconcilers while it is a member of their group (see Join), and
// settles each operation in its key's lifecycle; it returns what it wrote
// and what it counted. It owns the figures of the last commit, the rate
// limit of the failure logs and the membership of the group. Make one
// with New; the zero value is not usable. A Committer is not safe for
// concurrent use: the reconcile job's goroutine owns it.
type Committer[Obj any] struct {
	cfg     Config[Obj]
	policy  Policy
	fig     report.Figures // of the last commit; its slices are reused
	failLog report.FailLog
	wrote   []Range // Commit's buffer for Outcome.Wrote
	group   group[Obj]
}

// Config is what a Committer works with, set once by New.
type Config[Obj any] struct {
	DB      *statedb.DB
	Objects *work.Objects[Obj]
	Queue   *keyqueue.Queue[Obj] // the keys' lifecycles, which Commit settles
	Log     *slog.Logger
	Rand    func() float64 // retry jitter, in [0, 1)
	// Slices says that the figures keep each operation's durations (the
	// commit metrics want them).
	Slices bool
	// DriftSettled, if set, records the drift check's outcome of an op
	// that ran (WithDriftCheck), before the op is counted.
	DriftSettled func(*work.Op[Obj])
}

// Policy is what Configure may change of how outcomes are settled: the
// last attempt (0: none), the retry backoff, and the operation timeout,
// which tells a timeout apart in the figures.
type Policy struct {
	MaxAttempts        int
	RetryMin, RetryMax time.Duration
	RetryJitter        float64
	OperationTimeout   time.Duration
}

// Range is the revisions Lo to Hi, both included, that a commit's
// statuses took.
type Range struct{ Lo, Hi statedb.Revision }

// Outcome is what a Commit did.
type Outcome struct {
	Committed, Failed int
	// Wrote is the revisions the statuses took, in increasing order:
	// the reconciler's own writes. It is valid until the next Commit.
	Wrote []Range
	// Figures is for the reporter to count; nil if the commit had no ops.
	// It is valid until the next Commit.
	Figures *report.Figures
	// Shared says that this was the first commit whose statuses were
	// written with the table's other reconcilers.
	Shared bool
}

// New returns a Committer working with cfg, settling by p.
func New[Obj any](cfg Config[Obj], p Policy) *Committer[Obj] {
	return &Committer[Obj]{cfg: cfg, policy: p}
}

// SetPolicy changes the policy from the next Commit on.
func (c *Committer[Obj]) SetPolicy(p Policy) { c.policy = p }

// Reset readies c for a run of the reconcile job: the figures and the
// failure logs' rate limit start anew.
func (c *Committer[Obj]) Reset() { c.fig, c.failLog = report.Figures{}, report.FailLog{} }

// group is a Committer's membership of its table's group commit (see
// package groupcommit) while the reconcile job runs: several reconcilers
// of one table (the names of a status.Set) write the statuses they settle
// close together in one write transaction, and those of one object version
// in one object write, instead of once each. A reconciler alone on its
// table writes by itself, as if there were no group.
type group[Obj any] struct {
	member *groupcommit.Member[Obj] // nil while the job does not run
	busy   bool                     // the round said Begin
	sts    []status.Status          // writeShared's buffer: the status of each update
	// landed is closed once the statuses of the last commit with the
	// group are in the table: the group's write tells its members their
	// outcome once nothing can change it, and commits after (see
	// groupcommit.Member.Landed). nil if the Committer never wrote with
	// the group.
	landed <-chan struct{}
	// over says that the last commit with the group wrote a status over a
	// changed object (see writeStatus): until it lands, the change that
	// object had (another writer's, this reconciler's status kept) reads
	// as the version just applied, to do again.
	over bool
}
