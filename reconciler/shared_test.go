package reconciler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Several reconcilers of one table write their statuses together (see
// package reconciler/internal/groupcommit); the tests here pin what that
// must not change.

// peer is one of several named reconcilers of a fixture's table, each
// with a target of its own and its status st of an object.
type peer struct {
	name string
	tg   *target
	rec  reconciler.Reconciler[*item]
	st   func(*item) status.Status
}

// peerSpec says how newPeers registers its peers, besides their names.
type peerSpec struct {
	variant // the zero one is a worker, no batch
	// set, if not nil, gives the status set a name keeps its status in,
	// with WithStatusSet; otherwise its own setStatus writes its entry of
	// item.Statuses.
	set  func(name string) (func(*item) status.Set, func(*item, status.Set) *item)
	opts func(f *fixture, name string) []reconciler.Option // more options of name
	// slow, while true, makes the table's status index (of the first
	// name) take a millisecond per object, as an index function may.
	slow *atomic.Bool
}

// newPeers populates (does not start) a fixture whose reconciler is the
// first of names, with one reconciler per further name registered on its
// table beside it. Each retries after 1 to 10 ms and prunes on request only.
func newPeers(t *testing.T, sp peerSpec, names ...string) (*fixture, []*peer) {
	ps := make([]*peer, len(names))
	for i, name := range names {
		ps[i] = &peer{name: name, tg: newTarget()}
		ps[i].st, _ = statusOf(name)
		if sp.set != nil {
			get, _ := sp.set(name)
			ps[i].st = func(it *item) status.Status { return get(it).Get(name) }
		}
	}
	optsOf := func(f *fixture, p *peer) []reconciler.Option {
		opts := []reconciler.Option{reconciler.WithName(p.name), reconciler.WithConcurrency(max(1, sp.workers)),
			reconciler.WithRetry(time.Millisecond, 10*time.Millisecond), reconciler.WithPruning(0)}
		if sp.opts != nil {
			opts = append(opts, sp.opts(f, p.name)...)
		}
		return opts
	}
	w := &with{getStatus: ps[0].st}
	if sp.slow != nil {
		w.getStatus = func(it *item) status.Status {
			if sp.slow.Load() {
				<-time.After(time.Millisecond)
			}
			return ps[0].st(it)
		}
	}
	_, w.setStatus = statusOf(names[0])
	if sp.set != nil {
		_, w.inSet = sp.set(names[0])
	}
	if sp.batch {
		w.batch = ps[0].tg
	}
	w.setup = func(f *fixture) []reconciler.Option {
		for _, p := range ps[1:] {
			get, set := statusOf(p.name)
			opts := optsOf(f, p)
			if sp.set != nil {
				get, set = nil, nil
				opts = append(opts, reconciler.WithStatusSet(sp.set(p.name)))
			}
			var batch reconciler.BatchOperations[*item]
			if sp.batch {
				batch = p.tg
			}
			var err error
			p.rec, err = reconciler.Register(f.params, f.table, (*item).clone, set, get, p.tg, batch, opts...)
			require.NoError(t, err)
		}
		return optsOf(f, ps[0])
	}
	f := newFixture(t, ps[0].tg, w)
	ps[0].rec = f.rec
	return f, ps
}

// writeSet writes key=value pairs, each with fresh status sets (every name
// Pending), in one transaction, and returns its revision.
func (f *fixture) writeSet(kv ...string) statedb.Revision {
	var objs []*item
	for i := 0; i < len(kv); i += 2 {
		objs = append(objs, &item{ID: kv[i], Value: kv[i+1], Statuses: status.NewSet(), Other: status.NewSet()})
	}
	return f.insertAs(objs...)
}

// rewrite writes the object with id again, changed by change, as a user
// reading it in the write transaction does.
func (f *fixture) rewrite(id string, change func(*item)) statedb.Revision {
	wtxn := f.db.WriteTxn(f.table)
	o, _, found := f.table.Get(wtxn, itemID.Query(id))
	require.True(f.t, found, id)
	o = o.clone()
	change(o)
	_, _, err := f.table.Insert(wtxn, o)
	require.NoError(f.t, err)
	rev := f.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

// reached waits until p has reconciled every change up to rev, and
// returns its retry low watermark.
func (p *peer) reached(t testing.TB, rev statedb.Revision) statedb.Revision {
	t.Helper()
	_, low, err := p.rec.WaitUntilReconciled(ctxFor(t, timeout), rev)
	require.NoError(t, err, "%s: WaitUntilReconciled(%d)", p.name, rev)
	return low
}

// allDone waits until every object is Done for every peer of ps, and each
// has reconciled the table as it is then.
func allDone(t *testing.T, f *fixture, ps []*peer) {
	t.Helper()
	f.waitTable("every object Done for every peer", func(txn statedb.ReadTxn) bool {
		for o := range f.table.All(txn) {
			for _, p := range ps {
				if p.st(o).Kind != status.KindDone {
					return false
				}
			}
		}
		return true
	})
	rev := f.table.Revision(f.db.ReadTxn())
	for _, p := range ps {
		p.reached(t, rev)
	}
}

// converge is allDone, and checks that each peer's target holds the table.
func converge(t *testing.T, f *fixture, ps []*peer) {
	t.Helper()
	allDone(t, f, ps)
	for _, p := range ps {
		assert.Empty(t, p.tg.Diff(f.db.ReadTxn(), f.table), p.name)
	}
}

// setItems returns n objects prefix-00000... with an empty status set:
// Pending for every name.
func setItems(prefix string, n int) []*item {
	objs := items(prefix, n, "v")
	for _, o := range objs {
		o.Statuses = status.NewSet()
	}
	return objs
}

// allKind reports whether every object of objs has the status kind for name.
func allKind(f *fixture, txn statedb.ReadTxn, name string, kind status.Kind, objs []*item) bool {
	for _, o := range objs {
		cur, _, found := f.table.Get(txn, itemID.Query(o.ID))
		if !found || cur.Statuses.Get(name).Kind != kind {
			return false
		}
	}
	return true
}

// delay is an update hook that makes every Update take d, or until its
// context ends.
func delay(d time.Duration) func(context.Context, *item) error {
	return func(ctx context.Context, _ *item) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A reconciler of a table never waits for another's slow operation: while
// b's Update of the first object blocks, or while each of b's takes
// longer than a leader holds its write for it, a's objects become Done one
// after another, each well within a's wait, and b's wait does not pretend
// to reach what it has not. Once b goes on, both converge, and a's
// statuses are kept.
func TestAPeerSlowOrBlockedInUpdateHoldsNoOtherBack(t *testing.T) {
	for _, blocked := range []bool{true, false} {
		t.Run(fmt.Sprintf("blocked=%v", blocked), func(t *testing.T) {
			f, ps := newPeers(t, peerSpec{}, "a", "b")
			a, b := ps[0], ps[1]
			h := b.tg.hold("k000")
			if !blocked {
				h.let()
				b.tg.update = delay(15 * time.Millisecond)
			}
			f.start()
			for i := range 20 {
				rev := f.writeSet(fmt.Sprintf("k%03d", i), "v")
				if i == 0 && blocked {
					h.wait(t)
				}
				_, _, err := a.rec.WaitUntilReconciled(ctxFor(t, 3*time.Second), rev)
				require.NoError(t, err, "a's wait for write %d", i)
				o, _ := f.get(fmt.Sprintf("k%03d", i))
				require.Equal(t, status.KindDone, a.st(o).Kind, "a's status of write %d", i)
				if blocked {
					require.Equal(t, status.KindPending, b.st(o).Kind, "b's status of write %d while b blocks", i)
				}
			}
			if blocked {
				_, _, err := b.rec.WaitUntilReconciled(ctxFor(t, 100*time.Millisecond), f.table.Revision(f.db.ReadTxn()))
				require.ErrorIs(t, err, context.DeadlineExceeded, "b's wait while b blocks")
				h.let()
			}
			converge(t, f, ps)
		})
	}
}

// meetAt returns n Update functions that return for object id only once
// all n are in it: the reconcilers are all in one round for it, and their
// statuses of it go into one write.
func meetAt(id string, n int) func(context.Context, *item) error {
	var all sync.WaitGroup
	all.Add(n)
	return func(ctx context.Context, it *item) error {
		if it.ID != id {
			return nil
		}
		all.Done()
		done := make(chan struct{})
		go func() { all.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// countingSet returns a setter of item.Statuses for WithStatusSet that
// counts its calls per object.
func countingSet(mu *sync.Mutex, calls map[string]int) func(*item, status.Set) *item {
	return func(it *item, s status.Set) *item {
		mu.Lock()
		calls[it.ID]++
		mu.Unlock()
		it.Statuses = s
		return it
	}
}

// Reconcilers in one round on an object write it once for all: with their
// own setStatus, with their statuses in one set (WithStatusSet), which is
// then stored once, not once per reconciler, and with two sets of the
// object, each name finding its own status, and only its own, in its set.
// (A first object all settle comes first: on the first object after a
// start a member may miss the hold, as documented.)
func TestReconcilersInOneRoundWriteAnObjectOnce(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	getOther := func(it *item) status.Set { return it.Other }
	putOther := func(it *item, s status.Set) *item { it.Other = s; return it }
	for _, c := range []struct {
		name  string
		set   func(name string) (func(*item) status.Set, func(*item, status.Set) *item)
		names []string
		sets  [2][]string // the names in x's Statuses and in its Other
		once  bool        // the set's setter called once for x
	}{
		{name: "own setStatus", names: []string{"a", "b"}, sets: [2][]string{{"a", "b"}}},
		{name: "one set", names: []string{"a", "b", "c"}, sets: [2][]string{{"a", "b", "c"}}, once: true,
			set: func(string) (func(*item) status.Set, func(*item, status.Set) *item) {
				return getSet, countingSet(&mu, calls)
			}},
		{name: "two sets", names: []string{"a", "b", "o"}, sets: [2][]string{{"a", "b"}, {"o"}},
			set: func(name string) (func(*item) status.Set, func(*item, status.Set) *item) {
				if name == "o" {
					return getOther, putOther
				}
				return getSet, putSet
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, ps := newPeers(t, peerSpec{set: c.set}, c.names...)
			meet := meetAt("x", len(ps))
			for _, p := range ps {
				p.tg.update = meet
			}
			f.start()
			f.writeSet("w", "1")
			allDone(t, f, ps)
			inserted := f.writeSet("x", "1")
			allDone(t, f, ps)
			assert.Equal(t, inserted+1, f.table.Revision(f.db.ReadTxn()), "one write after the insert")
			x, _ := f.get("x")
			var names [2][]string
			for name := range x.Statuses.All() {
				names[0] = append(names[0], name)
			}
			for name := range x.Other.All() {
				names[1] = append(names[1], name)
			}
			assert.Equal(t, c.sets, names, "the names in each set")
			if c.once {
				mu.Lock()
				assert.Equal(t, 1, calls["x"], "the set stored once for all")
				mu.Unlock()
			}
		})
	}
}

// b's Update of k is held while a and c settle k and a user writes k
// again keeping every status (an entry of a name nobody serves, as a
// Retire of another name does); then b's status of k goes in one write
// with a's and c's of j, which a slow index keeps from committing while b,
// gone on early, reads its next changes. The user's change of k carries
// b's Pending as when b took k: b must wait for the write rather than
// apply k again (5ebcfec; chaos's overMove finds it too).
func TestAStatusWrittenOverAChangedObjectIsNotAppliedAgain(t *testing.T) {
	var slow atomic.Bool
	f, ps := newPeers(t, peerSpec{slow: &slow}, "a", "b", "c")
	a, b, c := ps[0], ps[1], ps[2]
	f.start()
	for i := range 3 { // each round finds it about two times in three
		k, j := fmt.Sprint("k", i), fmt.Sprint("j", i)
		hk := b.tg.hold(k)
		defer hk.let()
		f.writeSet(k, "1")
		hk.wait(t)
		f.waitTable("a and c Done on "+k, func(txn statedb.ReadTxn) bool {
			o, _, _ := f.table.Get(txn, itemID.Query(k))
			return a.st(o).Kind == status.KindDone && c.st(o).Kind == status.KindDone
		})
		f.rewrite(k, func(o *item) { o.Statuses = o.Statuses.Set("ghost", status.Done()) })
		ha, hc := a.tg.holdAfterApply(j, false), c.tg.holdAfterApply(j, false)
		defer ha.let()
		defer hc.let()
		f.writeSet(j, "1")
		ha.wait(t)
		hc.wait(t)
		slow.Store(true)
		hk.let()
		ha.let()
		hc.let()
		f.waitKind(j, status.KindDone)
		slow.Store(false)
		converge(t, f, ps)
		assert.Len(t, b.tg.updates(k), 1, "b's updates of %s", k)
	}
}
