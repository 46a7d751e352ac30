package groupcommit

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tobj is a test object: the names of the members whose status it carries.
type tobj struct {
	ID    string
	Marks []string
}

var tobjID = statedb.Index[*tobj, string]{
	Name:       "id",
	FromObject: func(o *tobj) index.KeySet { return index.NewKeySet(index.String(o.ID)) },
	FromKey:    index.String,
	Unique:     true,
}

func (o *tobj) TableHeader() []string { return []string{"ID", "Marks"} }
func (o *tobj) TableRow() []string    { return []string{o.ID, strings.Join(o.Marks, ",")} }

func (o *tobj) with(name string) *tobj {
	c := *o
	c.Marks = append(slices.Clone(o.Marks), name)
	return &c
}

func newTable(t *testing.T) (*statedb.DB, statedb.RWTable[*tobj]) {
	db := statedb.New()
	tbl, err := statedb.NewTable(db, "objs", tobjID)
	require.NoError(t, err)
	return db, tbl
}

func insert(t *testing.T, db *statedb.DB, tbl statedb.RWTable[*tobj], ids ...string) map[string]statedb.Revision {
	wtxn := db.WriteTxn(tbl)
	for _, id := range ids {
		_, _, err := tbl.Insert(wtxn, &tobj{ID: id})
		require.NoError(t, err)
	}
	txn := wtxn.Commit()
	revs := map[string]statedb.Revision{}
	for _, id := range ids {
		_, rev, _ := tbl.Get(txn, tobjID.Query(id))
		revs[id] = rev
	}
	return revs
}

// batch is a member's Batch: one entry per object, whose status is the
// member's name in Marks. It records what the write did of each entry.
type batch struct {
	name    string
	tbl     statedb.RWTable[*tobj]
	revs    []statedb.Revision
	objs    []*tobj
	merged  []bool
	alone   []bool
	ranges  [][2]statedb.Revision
	written []*tobj
	merges  int // calls of Merge
}

func newBatch(name string, tbl statedb.RWTable[*tobj], txn statedb.ReadTxn, ids ...string) *batch {
	b := &batch{name: name, tbl: tbl}
	for _, id := range ids {
		o, rev, _ := tbl.Get(txn, tobjID.Query(id))
		c := *o
		b.revs, b.objs = append(b.revs, rev), append(b.objs, &c)
	}
	b.merged, b.alone, b.written = make([]bool, len(ids)), make([]bool, len(ids)), make([]*tobj, len(ids))
	return b
}

func (b *batch) Len() int { return len(b.revs) }
func (b *batch) Entry(i int) (statedb.Revision, *tobj, bool) {
	return b.revs[i], b.objs[i], true
}
func (b *batch) Merge(_ int, into *tobj) *tobj {
	b.merges++
	into.Marks = append(into.Marks, b.name)
	return into
}
func (b *batch) Merged(i int, written *tobj) { b.merged[i], b.written[i] = true, written }
func (b *batch) WriteAlone(wtxn statedb.WriteTxn, i int) {
	b.alone[i] = true
	if cur, _, err := b.tbl.CompareAndSwap(wtxn, b.revs[i], b.objs[i].with(b.name)); err != nil {
		_, _, _ = b.tbl.Insert(wtxn, cur.with(b.name)) // over the changed object, as a reconciler does
	}
}
func (b *batch) Wrote(lo, hi statedb.Revision) {
	b.ranges = append(b.ranges, [2]statedb.Revision{lo, hi})
}

// setHold sets the hold for one test.
func setHold(t *testing.T, d time.Duration) {
	old := hold
	hold = d
	t.Cleanup(func() { hold = old })
}

// waitHolding waits until m's group has a leader holding for a member.
func waitHolding(t *testing.T, m *Member[*tobj]) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m.g.mu.Lock()
		holding := m.g.changed != nil
		m.g.mu.Unlock()
		if holding {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for a leader to hold")
		}
		runtime.Gosched()
	}
}

// commitAsync runs m.Commit(b) and returns a channel closed when it returns.
func commitAsync(m *Member[*tobj], b Batch[*tobj]) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Commit(b)
	}()
	return done
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A leader holds for a member in a round; the entries of one revision of
// both are then written in one object write each, in one transaction,
// carrying both statuses, and each member is told the revisions its
// statuses took.
func TestEntriesOfOneRevisionAreWrittenInOneObjectWrite(t *testing.T) {
	setHold(t, time.Hour) // only the member's commit ends the hold
	db, tbl := newTable(t)
	insert(t, db, tbl, "x", "y", "z")
	a, b := Join(db, tbl), Join(db, tbl)
	defer a.Leave()
	defer b.Leave()
	require.True(t, a.Shared())

	txn := db.ReadTxn()
	before := tbl.Revision(txn)
	ba := newBatch("a", tbl, txn, "x", "y", "z")
	bb := newBatch("b", tbl, txn, "x", "y") // z is not b's

	b.Begin()                   // b is in a round
	aDone := commitAsync(a, ba) // a leads and holds for b
	waitHolding(t, a)
	b.Commit(bb)
	wait(t, b.Landed(), "b's statuses to commit") // b may return before
	wait(t, aDone, "a's commit")

	now := db.ReadTxn()
	assert.Equal(t, before+3, tbl.Revision(now), "one write per object")
	for _, id := range []string{"x", "y"} {
		o, _, _ := tbl.Get(now, tobjID.Query(id))
		assert.Equal(t, []string{"a", "b"}, o.Marks, "%s carries both statuses", id)
	}
	z, _, _ := tbl.Get(now, tobjID.Query("z"))
	assert.Equal(t, []string{"a"}, z.Marks)
	assert.Equal(t, []bool{true, true, false}, ba.merged)
	assert.Equal(t, []bool{false, false, true}, ba.alone, "z is a's alone")
	assert.Equal(t, []bool{true, true}, bb.merged)
	assert.Equal(t, []bool{false, false}, bb.alone)
	assert.Same(t, ba.written[0], bb.written[0], "both were told the object written")
	// Entries alone first, then the merged ones.
	assert.Equal(t, [][2]statedb.Revision{{before + 1, before + 3}}, ba.ranges)
	assert.Equal(t, [][2]statedb.Revision{{before + 2, before + 3}}, bb.ranges)
	x, revX, _ := tbl.Get(now, tobjID.Query("x"))
	assert.Equal(t, before+2, revX)
	assert.Same(t, x, ba.written[0])
}

// The entries of one revision meet in one object write whatever the order
// of each member's entries: in revision order (merged) or not (sorted).
func TestEntriesOfOneRevisionMeetInAnyOrder(t *testing.T) {
	for _, order := range [][2][]string{
		{{"w", "x", "z"}, {"x", "y", "z"}}, // each in revision order
		{{"z", "w", "x"}, {"y", "z", "x"}}, // neither
		{{"w", "x", "z"}, {"z", "y", "x"}}, // one
	} {
		setHold(t, time.Hour)
		db, tbl := newTable(t)
		insert(t, db, tbl, "w", "x", "y", "z")
		a, b := Join(db, tbl), Join(db, tbl)
		txn := db.ReadTxn()
		before := tbl.Revision(txn)
		ba, bb := newBatch("a", tbl, txn, order[0]...), newBatch("b", tbl, txn, order[1]...)
		b.Begin()
		aDone := commitAsync(a, ba)
		waitHolding(t, a)
		b.Commit(bb)
		wait(t, aDone, "a's commit")
		now := db.ReadTxn()
		assert.Equal(t, before+4, tbl.Revision(now), "%v: one write per object", order)
		for id, marks := range map[string][]string{"w": {"a"}, "x": {"a", "b"}, "y": {"b"}, "z": {"a", "b"}} {
			o, _, _ := tbl.Get(now, tobjID.Query(id))
			assert.ElementsMatch(t, marks, o.Marks, "%v: %s", order, id)
		}
		a.Leave()
		b.Leave()
	}
}

// A member still in its round when the hold runs out is late: the leader
// writes without it, and no leader holds for it again until it commits.
func TestAMemberLateForAHoldIsNotHeldForAgain(t *testing.T) {
	setHold(t, 20*time.Millisecond)
	db, tbl := newTable(t)
	insert(t, db, tbl, "x", "y")
	slow, fast := Join(db, tbl), Join(db, tbl)
	defer slow.Leave()
	defer fast.Leave()

	slow.Begin() // and stays in its round: a slow operation
	fast.Commit(newBatch("fast", tbl, db.ReadTxn(), "x"))
	hold = time.Hour // were the leader to hold for slow now, the test would time out
	wait(t, commitAsync(fast, newBatch("fast", tbl, db.ReadTxn(), "y")), "a commit while a late member is in its round")

	// Once slow commits, it is held for again. (A commit leaves its
	// members in a round, their next following at once: fast ends it.)
	fast.End()
	sb := newBatch("slow", tbl, db.ReadTxn(), "x")
	slow.Commit(sb)
	assert.Equal(t, []bool{true}, sb.alone)
	fast.Begin()
	slowDone := commitAsync(slow, newBatch("slow", tbl, db.ReadTxn(), "y"))
	waitHolding(t, slow)
	select {
	case <-slowDone:
		t.Fatal("the leader did not hold for a member in its round")
	default:
	}
	fast.End()
	wait(t, slowDone, "the commit once the member ended its round")
}

// A member that leaves, or ends its round, is not held for.
func TestALeaderDoesNotHoldForAMemberThatLeaves(t *testing.T) {
	setHold(t, time.Hour)
	db, tbl := newTable(t)
	insert(t, db, tbl, "x")
	a, b := Join(db, tbl), Join(db, tbl)
	defer a.Leave()
	b.Begin()
	done := commitAsync(a, newBatch("a", tbl, db.ReadTxn(), "x"))
	waitHolding(t, a)
	b.Leave()
	wait(t, done, "the commit once the member left")
	assert.False(t, a.Shared(), "alone again")
}

// An object changed since the members read it gets each member's status
// as that member writes alone, not the merged object.
func TestAChangedObjectIsWrittenByEachMember(t *testing.T) {
	setHold(t, time.Hour)
	db, tbl := newTable(t)
	insert(t, db, tbl, "x")
	a, b := Join(db, tbl), Join(db, tbl)
	defer a.Leave()
	defer b.Leave()
	ba, bb := newBatch("a", tbl, db.ReadTxn(), "x"), newBatch("b", tbl, db.ReadTxn(), "x")
	insert(t, db, tbl, "x") // a user writes x again

	b.Begin()
	done := commitAsync(a, ba)
	waitHolding(t, a)
	b.Commit(bb)
	wait(t, done, "a's commit")
	assert.Equal(t, []bool{false}, ba.merged)
	assert.Equal(t, []bool{true}, ba.alone)
	assert.Equal(t, []bool{true}, bb.alone)
	o, rev, _ := tbl.Get(db.ReadTxn(), tobjID.Query("x"))
	assert.Equal(t, []string{"a", "b"}, o.Marks, "written over by each")
	// Each member's write is its own, once: a, then b over it.
	assert.Equal(t, [][2]statedb.Revision{{rev - 1, rev - 1}}, ba.ranges, "a's own writes")
	assert.Equal(t, [][2]statedb.Revision{{rev, rev}}, bb.ranges, "b's own writes")
}

// Many members committing at once, over and over: every entry is written
// once, with every member's status, and every commit returns.
func TestManyMembersCommittingAtOnce(t *testing.T) {
	setHold(t, time.Millisecond)
	db, tbl := newTable(t)
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	names := []string{"m0", "m1", "m2", "m3"}
	const rounds = 50
	var wg sync.WaitGroup
	members := make([]*Member[*tobj], len(names))
	for i := range names {
		members[i] = Join(db, tbl)
	}
	start := make(chan struct{})
	for r := range rounds {
		insert(t, db, tbl, ids...)
		txn := db.ReadTxn()
		for i, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				members[i].Begin()
				members[i].Commit(newBatch(name, tbl, txn, ids...))
			}()
		}
		if r == 0 {
			close(start)
		}
		wg.Wait()
		now := db.ReadTxn()
		for _, id := range ids {
			o, _, _ := tbl.Get(now, tobjID.Query(id))
			got := slices.Clone(o.Marks)
			slices.Sort(got)
			require.Equal(t, names, got, "round %d: %s", r, id)
		}
	}
	for _, m := range members {
		m.Leave()
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	assert.Empty(t, registry, "the group goes with its last member")
}

// A table whose name is taken in the DB by a group of another object type
// gets no group: its member writes alone.
func TestJoinRefusesATableOfAnotherType(t *testing.T) {
	db, tbl := newTable(t)
	m := Join(db, tbl)
	defer m.Leave()
	assert.Nil(t, Join[*other](db, otherTable{}))
}

type other struct{}

type otherTable struct{ statedb.RWTable[*other] }

func (otherTable) Name() string { return "objs" }

// runBatch is a batch that merges a run at once, if ok.
type runBatch struct {
	*batch
	ok   bool
	runs int // calls of MergeRun
}

func (b *runBatch) MergeRun(into *tobj, run Run[*tobj]) (*tobj, bool) {
	b.runs++
	if !b.ok {
		return into, false
	}
	for j := range run.Len() {
		m, _ := run.Entry(j)
		into.Marks = append(into.Marks, m.(*runBatch).name)
	}
	return into, true
}

// A batch that merges a run at once (RunMerger) is asked to for each run it
// leads; one that declines has its run merged entry by entry.
func TestARunIsMergedAtOnceByABatchThatCan(t *testing.T) {
	for _, ok := range []bool{true, false} {
		setHold(t, time.Hour)
		db, tbl := newTable(t)
		insert(t, db, tbl, "x", "y")
		a, b := Join(db, tbl), Join(db, tbl)
		txn := db.ReadTxn()
		before := tbl.Revision(txn)
		ba := &runBatch{batch: newBatch("a", tbl, txn, "x", "y"), ok: ok}
		bb := &runBatch{batch: newBatch("b", tbl, txn, "x", "y"), ok: ok}

		b.Begin()
		aDone := commitAsync(a, ba) // a leads: its entries come first in each run
		waitHolding(t, a)
		b.Commit(bb)
		wait(t, b.Landed(), "b's statuses to commit")
		wait(t, aDone, "a's commit")
		a.Leave()
		b.Leave()

		now := db.ReadTxn()
		assert.Equal(t, before+2, tbl.Revision(now), "one write per object")
		for _, id := range []string{"x", "y"} {
			o, _, _ := tbl.Get(now, tobjID.Query(id))
			assert.Equal(t, []string{"a", "b"}, o.Marks, "%s carries both statuses (ok=%v)", id, ok)
		}
		assert.Equal(t, 2, ba.runs+bb.runs, "asked once per run (ok=%v)", ok)
		merges := map[bool]int{true: 0, false: 2}[ok]
		assert.Equal(t, merges, ba.merges, "a's entries merged one by one (ok=%v)", ok)
		assert.Equal(t, merges, bb.merges, "b's entries merged one by one (ok=%v)", ok)
	}
}
