package reconciler

import (
	"slices"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/groupcommit"
	"github.com/converge-go/converge/status"
)

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
	batch  sharedBatch[Obj]
	// landed is closed once the statuses of the last commit with the
	// group are in the table: the group's write tells its members their
	// outcome once nothing can change it, and commits after (see
	// groupcommit.Member.Landed). Until then the round's progress is owed:
	// WaitUntilReconciled must not return before the statuses can be read.
	// nil if the reconciler never wrote with the group.
	landed <-chan struct{}
	owed   bool // progress not published: landed was open at the round's report
}

// join makes the reconciler a member of its table's group, for a run of
// the job.
func (r *reconciler[Obj]) join() {
	r.group.member = groupcommit.Join(r.db, r.objects.table)
	r.group.batch.r = r
}

// leave ends the membership, at the end of a run.
func (r *reconciler[Obj]) leave() {
	if r.group.member != nil {
		r.group.member.Leave()
		r.group.member, r.group.busy = nil, false
	}
}

// shares reports whether the reconciler writes with others.
func (r *reconciler[Obj]) shares() bool {
	return r.group.member != nil && r.group.member.Shared()
}

// beginRound tells the group that a round with work is under way: a
// leader holds its write for this round's statuses, briefly (see
// groupcommit.Hold). A commit leaves the reconciler busy so: its next
// round follows at once, as long as the changes it watches are there.
func (r *reconciler[Obj]) beginRound() {
	if !r.group.busy && r.shares() {
		r.group.member.Begin()
		r.group.busy = true
	}
}

// idle tells the group that the loop is about to wait, unless the changes
// it watches are ready (watch is closed-only, so looking consumes nothing):
// no leader holds for it then.
func (r *reconciler[Obj]) idle(watch <-chan struct{}) {
	if !r.group.busy {
		return
	}
	select {
	case <-watch:
		return
	default:
	}
	r.group.member.End()
	r.group.busy = false
}

// writeShared is prepare and write with the group: it hands each
// update's clone and the status its outcome calls for to the group's
// write, which sets the statuses of several reconcilers on one clone (see
// sharedBatch), and records the revisions they took as the loop's own (see
// ownWrites).
func (r *reconciler[Obj]) writeShared(ops []op[Obj], now time.Time) {
	b := &r.group.batch
	b.ops, b.now, b.sts = ops, now, slices.Grow(b.sts[:0], len(ops))[:len(ops)]
	writes := 0
	for i := range ops {
		if o := &ops[i]; o.ran && !o.Delete {
			b.sts[i] = outcomeStatus(o, now)
			writes++
		}
	}
	if writes > 0 {
		if r.group.landed == nil {
			// Writing with others, half its changes are its own writes:
			// the feed passes over them unread (see skipQuiet). A lone
			// reconciler reads as before.
			r.feed.changes.PassOverOwn(r.feed.own.has)
		}
		r.group.member.Commit(b)
		r.group.busy, r.group.landed = true, r.group.member.Landed()
	}
	clear(b.sts)
	b.ops = nil
}

// sharedBatch is a commit's ops as the group's write sees them
// (groupcommit.Batch). An update's clone gets its status when it is
// written: the first of a revision's entries carries those of the others
// too, each set once. The leader calls it while the reconciler waits in
// Commit.
type sharedBatch[Obj any] struct {
	r   *reconciler[Obj]
	ops []op[Obj]
	sts []status.Status // the status of each update, not set on its clone yet
	now time.Time
}

func (b *sharedBatch[Obj]) Len() int { return len(b.ops) }

func (b *sharedBatch[Obj]) Entry(i int) (statedb.Revision, Obj, bool) {
	o := &b.ops[i]
	return o.Rev, o.updated, o.ran && !o.Delete
}

func (b *sharedBatch[Obj]) Merge(i int, into Obj) Obj {
	return b.r.objects.setStatus(into, b.sts[i])
}

func (b *sharedBatch[Obj]) Merged(i int, written Obj) {
	o := &b.ops[i]
	o.updated, o.written, o.over = written, true, false
}

func (b *sharedBatch[Obj]) WriteAlone(wtxn statedb.WriteTxn, i int) {
	o := &b.ops[i]
	o.updated = b.r.objects.setStatus(o.updated, b.sts[i])
	b.r.writeOp(wtxn, o, b.now)
}

func (b *sharedBatch[Obj]) Wrote(lo, hi statedb.Revision) {
	b.r.feed.wrote(revRange{lo, hi})
}

// progressOwed reports whether the statuses of the last commit with the
// group are still to land, and if so owes the round's progress.
func (r *reconciler[Obj]) progressOwed() bool {
	select {
	case <-r.group.landed:
		r.group.owed = false
		return false
	default:
		r.group.owed = true
		return true
	}
}

// owedC is the loop's wake-up for progress owed: landed while owed, else
// nil.
func (r *reconciler[Obj]) owedC() <-chan struct{} {
	if r.group.owed {
		return r.group.landed
	}
	return nil
}

// publishOwed publishes the progress owed, the statuses having landed.
func (r *reconciler[Obj]) publishOwed() {
	r.group.owed = false
	lows := r.keys.lifecycles.Lows()
	r.rep.progress.Update(r.progressRev(lows), lows.Retry)
}

// awaitLanded waits until the statuses of the last commit with the group
// are in the table: a short wait, as the group's write has nothing left
// to do but its compare-and-swaps, which cannot fail, and its commit.
func (r *reconciler[Obj]) awaitLanded() {
	if r.group.landed != nil {
		<-r.group.landed
		r.group.owed = false
	}
}

// landFirst waits for the statuses of the last commit with the group to
// land if the round may read any of them: a round that reads only fresh
// changes does not (those statuses come as changes of their own, later),
// but one that takes a tracked key (a retry, queued work, a re-check),
// deferred changes or a stale status looks objects up in the table, and
// must find its own writes there.
func (r *reconciler[Obj]) landFirst() {
	f := r.keys.lifecycles.Figures()
	if f.Tracked || f.Deferred > 0 || f.Rechecks > 0 || f.Stale || r.keys.stales.any() {
		r.awaitLanded()
	}
}
