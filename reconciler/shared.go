package reconciler

import "github.com/converge-go/converge/reconciler/internal/commit"

// awaitLanded waits until the statuses of the last commit with the table's
// other reconcilers are in the table (see commit.Committer.AwaitLanded),
// and publishes the progress owed, if any: the loop's wake-up for it
// (owedC) is gone once it returns, and a prune, which calls it, publishes
// none.
func (r *reconciler[Obj]) awaitLanded() {
	r.commit.AwaitLanded()
	if r.rep.owed {
		r.publishOwed()
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
	f := r.queue.Figures()
	if r.commit.WroteOver() || f.Tracked || f.Deferred > 0 || f.Rechecks > 0 || f.Stale || r.collect.RemembersPrunes() {
		r.awaitLanded()
	}
}

// ownWrites records what commit out wrote as the loop's own (see
// ownWrites): their changes the feed passes over, and, writing with
// others, half its changes being its own writes, it passes over them
// unread (see skipQuiet) from the first commit with the group on. A lone
// reconciler reads as before.
func (r *reconciler[Obj]) ownWrote(out commit.Outcome) {
	for _, w := range out.Wrote {
		r.collect.Wrote(w.Lo, w.Hi)
	}
	if out.Shared {
		r.collect.PassOverOwn()
	}
}
