// Package groupcommit lets the reconcilers of one StateDB table write
// their statuses together: the statuses that several of them settle close
// together go into one write transaction, and those of one object version
// into one object write.
//
// Members of a table meet in a [Group], found by the DB and the table's
// name ([Join]). A member that has statuses to write hands them over with
// [Member.Commit], which returns once their outcome is known. The first
// member to commit leads: it holds, at most [Hold], for the members that
// are in a round (between [Member.Begin] and their own Commit, or
// [Member.End]; a commit leaves its members in a round, as their next
// follows), then takes every submission waiting, merges per object version
// (the members waiting merge a share each), and writes them in one
// transaction; the others wait for that write as they would for the
// table's lock, but only until nothing can change its outcome: they may
// go on before it committed ([Member.Landed]). A member that was still in its round
// when a hold ran out is late: no leader waits for it again until it
// commits, so a member blocked in a slow operation costs the others one
// hold, not one per round. Submissions that arrive while a write is under
// way are led by the first of them once it ends.
//
// A member blocked in Commit is quiescent: the leader (and the members
// helping it merge) call its [Batch] methods on their own goroutines. The package knows nothing of the
// reconciler; it is fed through Batch.
package groupcommit

import (
	"cmp"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/statedb"
)

// Hold is the longest a leader waits for members in a round before it
// writes. Members woken by the same changes finish their rounds within
// a few milliseconds of each other, but four of them sharing two busy
// CPUs can be kept from running longer: with 2 ms a quarter of the
// holds ran out (the benchmarks' multi workload, busy machine), each
// costing about a round of objects written twice; with 10 ms one in
// twenty. A member late once is not held for again until it commits.
const Hold = 10 * time.Millisecond

// hold is Hold, but for tests.
var hold = Hold

// Batch is one member's statuses for one commit, entries 0 to Len()-1.
// Its methods are called by the leader while the member waits in Commit.
type Batch[Obj any] interface {
	Len() int
	// Entry returns the revision entry i applied and the member's object
	// to write, not in the table, its status not set yet; ok is false for
	// an entry with nothing to write.
	Entry(i int) (rev statedb.Revision, obj Obj, ok bool)
	// Merge sets entry i's status on into, in place, and returns it: the
	// object of an entry of the same revision (entry i's own, or another
	// member's).
	Merge(i int, into Obj) Obj
	// Merged records that entry i was written by a shared object write,
	// written: the object was as applied, and written carries entry i's
	// status.
	Merged(i int, written Obj)
	// WriteAlone writes entry i in wtxn as the member writes by itself.
	WriteAlone(wtxn statedb.WriteTxn, i int)
	// Wrote records that the member's statuses took the revisions lo to
	// hi, both included; calls come in increasing order.
	Wrote(lo, hi statedb.Revision)
}

// RunMerger is a Batch that may merge the entries of one revision (a run,
// of several members) at once, rather than one Merge each. ok false leaves
// into as it was given, and the run to Merge.
type RunMerger[Obj any] interface {
	MergeRun(into Obj, run Run[Obj]) (merged Obj, ok bool)
}

// Run is the entries of one revision of a write, for a RunMerger, entries
// 0 to Len()-1, the first the RunMerger's own.
type Run[Obj any] struct {
	g    *Group[Obj]
	refs []ref
}

func (r Run[Obj]) Len() int { return len(r.refs) }

// Entry returns entry j: its batch and its index there.
func (r Run[Obj]) Entry(j int) (Batch[Obj], int) {
	return r.g.subs[r.refs[j].sub].batch, int(r.refs[j].item)
}

// Group is the members of one table. Make one with Join.
type Group[Obj any] struct {
	key   groupKey
	db    *statedb.DB
	table statedb.RWTable[Obj]
	size  atomic.Int32 // members

	mu      sync.Mutex
	members []*Member[Obj]
	leading bool // a leader holds or writes
	pending []*submission[Obj]
	changed chan struct{} // closed when a member begins, ends or commits while a leader holds; nil otherwise

	// The leader's, reused.
	taken   []*submission[Obj]
	subs    []*submission[Obj] // of the write under way
	refs    []ref
	merged  []ref  // refs' twin, swapped with it by orderedRefs
	heads   []span // orderedRefs'
	runs    []run[Obj]
	merging sync.WaitGroup // helpers merging
	timer   *time.Timer
}

// Member is one member of a group. Its methods are called by one goroutine.
type Member[Obj any] struct {
	g      *Group[Obj]
	landed <-chan struct{} // closed once the last write of m's entries committed (see Landed)
	busy   bool            // in a round: a leader may hold for it (under g.mu)
	late   bool            // was busy when a hold ran out: not held for until it commits (under g.mu)
	sub    submission[Obj]
}

type submission[Obj any] struct {
	m     *Member[Obj]
	batch Batch[Obj]
	done  chan message // what the leader asks of a waiting member
	// the revisions of the current write, merged before Wrote
	lo, hi statedb.Revision
	// The batch's entries with something to write, listed by the member
	// before it submits, on its own goroutine; ordered if by revision.
	entries []entry
	ordered bool
}

// entry is a batch's entry item to write, of revision rev.
type entry struct {
	rev  statedb.Revision
	item int32
}

// list lists b's entries to write in s.entries.
func (s *submission[Obj]) list(b Batch[Obj]) {
	s.batch, s.entries, s.ordered = b, s.entries[:0], true
	for i := range b.Len() {
		if rev, _, ok := b.Entry(i); ok {
			if n := len(s.entries); n > 0 && s.entries[n-1].rev > rev {
				s.ordered = false
			}
			s.entries = append(s.entries, entry{rev, int32(i)})
		}
	}
}

type ref struct {
	rev  statedb.Revision
	sub  int32
	item int32
}

type groupKey struct {
	db    *statedb.DB
	table string
}

var (
	registryMu sync.Mutex
	registry   = map[groupKey]any{}
)

// Join adds a member to the group of table in db, making the group if it
// has none. It returns nil if the table's group holds objects of another
// type (a table wrapped under its name): that member then writes alone.
func Join[Obj any](db *statedb.DB, table statedb.RWTable[Obj]) *Member[Obj] {
	key := groupKey{db, table.Name()}
	registryMu.Lock()
	defer registryMu.Unlock()
	var g *Group[Obj]
	if found, ok := registry[key]; ok {
		if g, ok = found.(*Group[Obj]); !ok {
			return nil
		}
	} else {
		g = &Group[Obj]{key: key, db: db, table: table}
		registry[key] = g
	}
	m := &Member[Obj]{g: g, sub: submission[Obj]{done: make(chan message, 1)}}
	m.sub.m = m
	g.mu.Lock()
	g.members = append(g.members, m)
	g.size.Store(int32(len(g.members)))
	g.mu.Unlock()
	return m
}

// Leave removes m from its group; the group goes when its last member
// does. m must not be used after.
func (m *Member[Obj]) Leave() {
	g := m.g
	registryMu.Lock()
	defer registryMu.Unlock()
	g.mu.Lock()
	g.members = slices.DeleteFunc(g.members, func(x *Member[Obj]) bool { return x == m })
	g.size.Store(int32(len(g.members)))
	g.notify()
	empty := len(g.members) == 0
	g.mu.Unlock()
	if empty && registry[g.key] == any(g) {
		delete(registry, g.key)
	}
}

// Shared reports whether m has company: with none, Commit gains nothing
// and the member writes by itself.
func (m *Member[Obj]) Shared() bool { return m.g.size.Load() > 1 }

// Begin says that m is in a round that will commit or end soon: a leader
// holds for it, up to Hold.
func (m *Member[Obj]) Begin() {
	g := m.g
	g.mu.Lock()
	m.busy = true
	g.notify()
	g.mu.Unlock()
}

// End says that m's round is over: no leader holds for it.
func (m *Member[Obj]) End() {
	g := m.g
	g.mu.Lock()
	if m.busy {
		m.busy = false
		g.notify()
	}
	g.mu.Unlock()
}

// notify wakes a holding leader. g.mu must be held.
func (g *Group[Obj]) notify() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// message is what a leader tells a member waiting in Commit.
type message struct {
	kind   int // written, lead or merge
	lo, hi int // merge: the groups of g.runs to merge
}

const (
	written = iota // its entries are written: return
	lead           // lead what is pending
	merge          // merge the objects of groups lo to hi, then wait on
)

// Commit writes b's entries, with those of the other members waiting, and
// returns once they are written. It ends m's round (see End).
func (m *Member[Obj]) Commit(b Batch[Obj]) {
	g, s := m.g, &m.sub
	s.list(b)
	g.mu.Lock()
	m.busy, m.late = false, false
	g.pending = append(g.pending, s)
	g.notify()
	if g.leading {
		g.mu.Unlock()
		for {
			msg := <-s.done
			switch msg.kind {
			case written:
				return
			case merge:
				g.mergeRuns(msg.lo, msg.hi)
				g.merging.Done()
				continue
			}
			break // lead
		}
		g.mu.Lock()
	}
	g.leading = true
	g.holdForMembers()
	g.taken, g.pending = g.pending, g.taken[:0]
	g.mu.Unlock()

	g.write(s, g.taken) // releases every member taken

	g.mu.Lock()
	clear(g.taken)
	g.taken = g.taken[:0]
	if len(g.pending) > 0 {
		g.pending[0].done <- message{kind: lead} // it leads what came meanwhile
	} else {
		g.leading = false
	}
	g.mu.Unlock()
}

// release tells the members of subs but self that their entries are
// written, and will have committed once landed is closed. g.mu must be
// held. A member released may submit again at once, reusing its
// submission: the write must not look at subs after.
func (g *Group[Obj]) release(self *submission[Obj], subs []*submission[Obj], landed <-chan struct{}) {
	for _, t := range subs {
		t.m.busy = true // its next round follows at once, unless it ends (see End)
		t.m.landed = landed
		t.batch = nil
		if t != self {
			t.done <- message{kind: written}
		}
	}
}

// Landed returns a channel closed once the statuses of m's last Commit are
// committed: Commit may return before, once nothing can change what is
// written (see write). Call it after Commit, on m's goroutine.
func (m *Member[Obj]) Landed() <-chan struct{} {
	if m.landed == nil {
		return closedChan
	}
	return m.landed
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// holdForMembers waits, up to Hold, until no member that is not late is in a round.
// Those still in one when it runs out are late. g.mu must be held; it is
// released while waiting.
func (g *Group[Obj]) holdForMembers() {
	var deadline time.Time
	for g.holdFor() {
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(hold)
		}
		left := deadline.Sub(now)
		if left <= 0 {
			for _, m := range g.members {
				if m.busy {
					m.late = true
				}
			}
			return
		}
		ch := make(chan struct{})
		g.changed = ch
		g.mu.Unlock()
		if g.timer == nil {
			g.timer = time.NewTimer(left)
		} else {
			g.timer.Reset(left)
		}
		select {
		case <-ch:
		case <-g.timer.C:
		}
		g.timer.Stop()
		g.mu.Lock()
		if g.changed == ch {
			g.changed = nil
		}
	}
}

// holdFor reports whether a member the leader holds for is in a round.
func (g *Group[Obj]) holdFor() bool {
	for _, m := range g.members {
		if m.busy && !m.late {
			return true
		}
	}
	return false
}

// write writes the submissions in one write transaction: the entries of
// one revision, of several members (a run), in one compare-and-swap of
// the first one's object carrying every member's status; if that finds
// the object changed, or an entry is alone, each is written as its member
// writes. The runs' objects are merged before the transaction, in parallel
// by the leader (self) and the members waiting, each on objects of its
// own.
func (g *Group[Obj]) write(self *submission[Obj], subs []*submission[Obj]) {
	refs := g.orderedRefs(subs)
	g.refs, g.subs = refs, subs
	runs := g.runs[:0]
	for lo := 0; lo < len(refs); {
		hi := lo + 1
		for hi < len(refs) && refs[hi].rev == refs[lo].rev {
			hi++
		}
		runs = append(runs, run[Obj]{lo: int32(lo), hi: int32(hi)})
		lo = hi
	}
	g.runs = runs

	// Merge: a share of the runs to each helper, the leader's last.
	helpers := min(len(subs), runtime.GOMAXPROCS(0), max(1, len(refs)/minMergeShare))
	from := 0
	if helpers > 1 {
		share := (len(runs) + helpers - 1) / helpers
		g.merging.Add(helpers - 1)
		n := 0
		for _, t := range subs {
			if t == self || n == helpers-1 {
				continue
			}
			t.done <- message{kind: merge, lo: from, hi: min(from+share, len(runs))}
			from = min(from+share, len(runs))
			n++
		}
	}
	g.mergeRuns(from, len(runs))
	if helpers > 1 {
		g.merging.Wait()
	}

	wtxn := g.db.WriteTxn(g.table)
	// The entries alone first: they may write over an object of another
	// run. Then, if every merged run's object is as its entries applied
	// (the transaction holds the table: nothing else can change it), their
	// compare-and-swaps cannot fail and each takes the next revision, so
	// the members learn their outcome, and go on, before they are done.
	merged := 0
	for j := range runs {
		if runs[j].hi-runs[j].lo == 1 {
			g.writeRun(wtxn, &runs[j])
		} else {
			merged++
		}
	}
	early := merged > 0 && g.unchanged(wtxn)
	if early {
		at := g.table.Revision(wtxn)
		for j := range runs {
			if rn := &runs[j]; rn.hi-rn.lo > 1 {
				at++
				for _, r := range refs[rn.lo:rn.hi] {
					s := subs[r.sub]
					s.batch.Merged(int(r.item), rn.obj)
					s.took(at, at)
				}
			}
		}
	}
	g.flushWrote(subs) // before a member goes on early
	landed := closedChan
	if early {
		landed = make(chan struct{})
		g.mu.Lock()
		g.release(self, subs, landed)
		g.mu.Unlock()
	}
	for j := range runs {
		if rn := &runs[j]; rn.hi-rn.lo > 1 {
			if early {
				// Checked by unchanged: it cannot fail.
				_, _, _ = g.table.CompareAndSwap(wtxn, refs[rn.lo].rev, rn.obj)
			} else {
				g.writeRun(wtxn, rn)
			}
		}
	}
	g.flushWrote(subs) // the merged runs written one by one, if not early
	wtxn.Commit()
	if early {
		close(landed)
	} else {
		g.mu.Lock()
		g.release(self, subs, closedChan)
		g.mu.Unlock()
	}
	clear(refs)
	clear(runs)
	g.refs, g.runs, g.subs = refs[:0], runs[:0], nil
}

// orderedRefs returns the entries of subs to write, ordered by revision,
// then submission, then entry. A member's entries come in the order its
// round read the changes, by revision but for the few it retried or took
// from its queue: each submission's ordered entries (see entries) are
// merged, and only if one is out of order are they sorted.
func (g *Group[Obj]) orderedRefs(subs []*submission[Obj]) []ref {
	refs, heads := g.refs[:0], g.heads[:0]
	ordered := true
	for si, s := range subs {
		s.lo, s.hi = 0, 0
		ordered = ordered && s.ordered
		start := len(refs)
		for _, e := range s.entries {
			refs = append(refs, ref{rev: e.rev, sub: int32(si), item: e.item})
		}
		if len(refs) > start {
			heads = append(heads, span{int32(start), int32(len(refs))})
		}
	}
	g.heads = heads[:0]
	switch {
	case !ordered:
		slices.SortFunc(refs, compareRefs)
		return refs
	case len(heads) <= 1:
		return refs
	}
	// Merge the submissions' spans into merged, then swap the buffers.
	merged := slices.Grow(g.merged[:0], len(refs))
	for len(heads) > 0 {
		least := 0
		for h := 1; h < len(heads); h++ {
			if refs[heads[h].lo].rev < refs[heads[least].lo].rev {
				least = h // ties go to the lower submission, as heads are in its order
			}
		}
		hd := &heads[least]
		merged = append(merged, refs[hd.lo])
		if hd.lo++; hd.lo == hd.hi {
			heads = slices.Delete(heads, least, least+1)
		}
	}
	g.merged = refs[:0]
	return merged
}

// span is the entries lo to hi-1 of a write's refs.
type span struct{ lo, hi int32 }

func compareRefs(a, b ref) int {
	if c := cmp.Compare(a.rev, b.rev); c != 0 {
		return c
	}
	if c := cmp.Compare(a.sub, b.sub); c != 0 {
		return c
	}
	return cmp.Compare(a.item, b.item)
}

// flushWrote hands each submission's revisions gathered so far (see took)
// to its batch, once.
func (g *Group[Obj]) flushWrote(subs []*submission[Obj]) {
	for _, s := range subs {
		if s.hi > 0 {
			s.batch.Wrote(s.lo, s.hi)
			s.lo, s.hi = 0, 0
		}
	}
}

// minMergeShare is the fewest entries worth handing a helper to merge.
const minMergeShare = 256

// run is the entries of one revision: refs[lo:hi] of a write, and their
// object merged (for more than one).
type run[Obj any] struct {
	lo, hi int32
	obj    Obj
}

// mergeRuns merges the objects of runs lo to hi (see write): they are
// distinct objects, so helpers may merge runs of their own at once.
func (g *Group[Obj]) mergeRuns(lo, hi int) {
	for j := lo; j < hi; j++ {
		rn := &g.runs[j]
		refs := g.refs[rn.lo:rn.hi]
		if len(refs) < 2 {
			continue
		}
		first := g.subs[refs[0].sub].batch
		_, obj, _ := first.Entry(int(refs[0].item))
		if m, ok := first.(RunMerger[Obj]); ok {
			if merged, ok := m.MergeRun(obj, Run[Obj]{g, refs}); ok {
				rn.obj = merged
				continue
			}
		}
		for _, r := range refs {
			obj = g.subs[r.sub].batch.Merge(int(r.item), obj)
		}
		rn.obj = obj
	}
}

// unchanged reports whether the object of every merged run is in wtxn at
// the revision its entries applied, and has a primary key.
func (g *Group[Obj]) unchanged(wtxn statedb.WriteTxn) bool {
	primary := g.table.PrimaryIndexer()
	for j := range g.runs {
		rn := &g.runs[j]
		if rn.hi-rn.lo < 2 {
			continue
		}
		q, ok := primary.QueryFromObject(rn.obj)
		if !ok {
			return false
		}
		if _, rev, found := g.table.Get(wtxn, q); !found || rev != g.refs[rn.lo].rev {
			return false
		}
	}
	return true
}

// writeRun writes the entries of one run (see write).
func (g *Group[Obj]) writeRun(wtxn statedb.WriteTxn, rn *run[Obj]) {
	refs, subs := g.refs[rn.lo:rn.hi], g.subs
	if len(refs) > 1 {
		if _, found, err := g.table.CompareAndSwap(wtxn, refs[0].rev, rn.obj); err == nil && found {
			at := g.table.Revision(wtxn)
			for _, r := range refs {
				s := subs[r.sub]
				s.batch.Merged(int(r.item), rn.obj)
				s.took(at, at)
			}
			return
		}
		// The object changed since, or lost its key: each member decides.
	}
	for _, r := range refs {
		s := subs[r.sub]
		before := g.table.Revision(wtxn)
		s.batch.WriteAlone(wtxn, int(r.item))
		if after := g.table.Revision(wtxn); after > before {
			s.took(before+1, after)
		}
	}
}

// took records that s's statuses took the revisions lo to hi, handing the
// range gathered so far to its batch when lo does not follow it.
func (s *submission[Obj]) took(lo, hi statedb.Revision) {
	switch {
	case s.hi == 0:
		s.lo, s.hi = lo, hi
	case s.hi+1 == lo:
		s.hi = hi
	default:
		s.batch.Wrote(s.lo, s.hi)
		s.lo, s.hi = lo, hi
	}
}
