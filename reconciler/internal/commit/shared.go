package commit

import (
	"slices"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/groupcommit"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
)

// Join makes c a member of its table's group, for a run of the job.
func (c *Committer[Obj]) Join() {
	c.group.member = groupcommit.Join(c.cfg.DB, c.cfg.Objects.Table)
}

// Leave ends the membership, at the end of a run.
func (c *Committer[Obj]) Leave() {
	if c.group.member != nil {
		c.group.member.Leave()
		c.group.member, c.group.busy = nil, false
	}
}

// Shares reports whether c writes with others.
func (c *Committer[Obj]) Shares() bool {
	return c.group.member != nil && c.group.member.Shared()
}

// Begin tells the group that a round with work is under way: a leader
// holds its write for this round's statuses, briefly (see
// groupcommit.Hold). A commit leaves c busy so: its next round follows at
// once, as long as the changes it watches are there.
func (c *Committer[Obj]) Begin() {
	if !c.group.busy && c.Shares() {
		c.group.member.Begin()
		c.group.busy = true
	}
}

// Busy reports whether c told the group of a round (Begin, or a commit
// with it) and has not said Idle since.
func (c *Committer[Obj]) Busy() bool { return c.group.busy }

// Idle tells the group that the loop, Busy, is about to wait, unless the
// changes it watches are ready (watch is closed-only, so looking consumes
// nothing): no leader holds for it then.
func (c *Committer[Obj]) Idle(watch <-chan struct{}) {
	select {
	case <-watch:
		return
	default:
	}
	c.group.member.End()
	c.group.busy = false
}

// Landed returns the channel closed once the statuses of the last commit
// with the group are in the table, or nil if c never wrote with it.
func (c *Committer[Obj]) Landed() <-chan struct{} { return c.group.landed }

// WroteOver reports whether the last commit with the group, not known to
// have landed, wrote a status over a changed object (see writeStatus).
func (c *Committer[Obj]) WroteOver() bool { return c.group.over }

// AwaitLanded waits until the statuses of the last commit with the group
// are in the table: a short wait, as the group's write has nothing left to
// do but its compare-and-swaps, which cannot fail, and its commit.
func (c *Committer[Obj]) AwaitLanded() {
	if c.group.landed != nil {
		<-c.group.landed
		c.group.over = false
	}
}

// writeShared prepares and writes with the group: it hands each update's
// clone and the status its outcome calls for to the group's write, which
// sets the statuses of several reconcilers on one clone (see sharedBatch),
// and adds the revisions they took to c.wrote. first reports the first
// commit with the group.
func (c *Committer[Obj]) writeShared(ops []work.Op[Obj], now time.Time) (first bool) {
	g := &c.group
	g.sts = slices.Grow(g.sts[:0], len(ops))[:len(ops)]
	b := &sharedBatch[Obj]{c: c, ops: ops, sts: g.sts, now: now}
	writes := 0
	for i := range ops {
		if o := &ops[i]; o.Ran && !o.Delete {
			b.sts[i] = outcomeStatus(o, now)
			writes++
		}
	}
	if writes > 0 {
		first = g.landed == nil
		g.member.Commit(b)
		g.busy, g.landed = true, g.member.Landed()
		g.over = false
		for i := range ops { // by index: an op is large, and a commit has a thousand
			if ops[i].Over {
				g.over = true
				break
			}
		}
	}
	clear(g.sts)
	return first
}

// sharedBatch is a commit's ops as the group's write sees them
// (groupcommit.Batch). An update's clone gets its status when it is
// written: the first of a revision's entries carries those of the others
// too, each set once. The leader calls it while the Committer waits in
// Commit.
type sharedBatch[Obj any] struct {
	c   *Committer[Obj]
	ops []work.Op[Obj]
	sts []status.Status // the status of each update, not set on its clone yet
	now time.Time
}

func (b *sharedBatch[Obj]) Len() int { return len(b.ops) }

func (b *sharedBatch[Obj]) Entry(i int) (statedb.Revision, Obj, bool) {
	o := &b.ops[i]
	return o.Rev, o.Updated, o.Ran && !o.Delete
}

func (b *sharedBatch[Obj]) Merge(i int, into Obj) Obj {
	return b.c.cfg.Objects.SetStatus(into, b.sts[i])
}

// MergeRun sets the statuses of a run's entries on into: those whose
// reconcilers keep their status in one status.Set (WithStatusSet, the
// same set found by each) with one copy of it, the others by their own
// Merge. A set whose reconcilers do not each find their own status in the
// copy (two fields holding one set value, a name given twice) is put back
// and its entries merged one by one. ok is false, into untouched, for a
// run too long for it: the group merges that one itself.
func (b *sharedBatch[Obj]) MergeRun(into Obj, run groupcommit.Run[Obj]) (Obj, bool) {
	n := run.Len()
	if n > maxRun {
		return into, false
	}
	obj := into
	var done uint64 // of the entries, by bit
	var buf [8]status.Entry
	var members [8]int
	for j := range n {
		if done&(1<<j) != 0 {
			continue
		}
		m, i := run.Entry(j)
		mb := m.(*sharedBatch[Obj]) // a member of a table has this package's batches, of Obj
		e := mb.c.cfg.Objects.Set
		if e == nil {
			obj, done = mb.Merge(i, obj), done|1<<j
			continue
		}
		set := e.Get(obj)
		entries, ms := buf[:0], members[:0]
		for k := j; k < n; k++ {
			mk, ik := run.Entry(k)
			bk := mk.(*sharedBatch[Obj])
			if ek := bk.c.cfg.Objects.Set; done&(1<<k) == 0 && ek != nil && (k == j || ek.Get(obj).Same(set)) {
				entries = append(entries, status.Entry{Name: ek.Name, Status: bk.sts[ik]})
				ms, done = append(ms, k), done|1<<k
			}
		}
		obj = e.Put(obj, set.SetAll(entries...))
		if !ownFound(obj, run, ms) {
			obj = e.Put(obj, set)
			for _, k := range ms {
				mk, ik := run.Entry(k)
				obj = mk.Merge(ik, obj)
			}
		}
	}
	return obj, true
}

// maxRun is the longest run MergeRun takes (one bit per entry): the
// reconcilers of one table that settle one version together; a longer one
// is merged entry by entry.
const maxRun = 64

// ownFound reports whether each of the run's members finds its own status
// in obj.
func ownFound[Obj any](obj Obj, run groupcommit.Run[Obj], members []int) bool {
	for _, k := range members {
		m, i := run.Entry(k)
		mb := m.(*sharedBatch[Obj])
		if e := mb.c.cfg.Objects.Set; e.Get(obj).Get(e.Name).ID() != mb.sts[i].ID() {
			return false
		}
	}
	return true
}

func (b *sharedBatch[Obj]) Merged(i int, written Obj) {
	o := &b.ops[i]
	o.Updated, o.Written, o.Over = written, true, false
}

func (b *sharedBatch[Obj]) WriteAlone(wtxn statedb.WriteTxn, i int) {
	o := &b.ops[i]
	o.Updated = b.c.cfg.Objects.SetStatus(o.Updated, b.sts[i])
	b.c.writeOp(wtxn, o, b.now)
}

func (b *sharedBatch[Obj]) Wrote(lo, hi statedb.Revision) {
	b.c.wrote = append(b.c.wrote, Range{lo, hi})
}
