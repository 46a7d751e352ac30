package reconciler

import (
	"github.com/converge-go/converge/reconciler/internal/groupcommit"
)

// join makes the reconciler a member of its table's group, for a run of
// the job.
func (r *reconciler[Obj]) join() {
	r.group.member = groupcommit.Join(r.db, r.objects.Table)
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

// idle tells the group that the loop, busy with it (group.busy), is about
// to wait, unless the changes it watches are ready (watch is closed-only,
// so looking consumes nothing): no leader holds for it then.
func (r *reconciler[Obj]) idle(watch <-chan struct{}) {
	select {
	case <-watch:
		return
	default:
	}
	r.group.member.End()
	r.group.busy = false
}

// awaitLanded waits until the statuses of the last commit with the group
// are in the table: a short wait, as the group's write has nothing left
// to do but its compare-and-swaps, which cannot fail, and its commit. It
// publishes the progress owed, if any: the loop's wake-up for it (owedC)
// is gone once it returns, and a prune, which calls it, publishes none.
func (r *reconciler[Obj]) awaitLanded() {
	if r.group.landed != nil {
		<-r.group.landed
		r.group.over = false
		if r.group.owed {
			r.publishOwed()
		}
	}
}

// landFirst waits for the statuses of the last commit with the group to
// land if the round may read any of them: a round that reads only fresh
// changes does not (those statuses come as changes of their own, later),
// but one that takes a tracked key (a retry, queued work, a re-check),
// deferred changes or a stale status looks objects up in the table, and
// must find its own writes there. So does one after a commit that wrote
// over a changed object: that object's change, read before the write
// lands, carries this reconciler's status as it was when the version was
// taken, and would be applied again.
func (r *reconciler[Obj]) landFirst() {
	f := r.keys.lifecycles.Figures()
	if r.group.over || f.Tracked || f.Deferred > 0 || f.Rechecks > 0 || f.Stale || r.keys.stales.any() {
		r.awaitLanded()
	}
}
