package reconciler_test

// The refresh and wait moves of a "-sets" run (chaos_sets_test.go), drawn
// from an RNG of their own so that the rest of a seed's schedule stays as
// it was: refreshName refreshes one running name with sets.Table.Refresh
// (the whole table, or a few keys through queries) and waits with
// Marked.Wait under a deadline; waitNames waits with sets.Table.Wait,
// DoneOrError, over every running name for a snapshot.
//
// Both are checked against the status books of chaosSets: from (each
// status identity a name's setStatus wrote, to those it replaced) and
// written (what each was). Nothing but the reconcilers writes the table
// while a move waits, so the test's model holds still: a refresh's result
// counts no object deleted; each object it counts Failed carries an Error
// status its name wrote after the mark (descending from the identity the
// mark gave it), with that error; no more are counted Done than marked
// objects not failed with a Done so descending; once Wait returns nil the
// counts add up to Marked.Len, which is the number of objects the
// Refresh's set function wrote. A Table.Wait that returns nil, or an
// error wrapping ErrObjectFailed, has every object of the snapshot, for
// every name, Done (Done or Error) as of the snapshot or through a status
// that name wrote since.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// chaosSetsMoveOdds: one step in chaosSetsMoveOdds of a "-sets" run is a
// refresh or a wait.
const chaosSetsMoveOdds = 10

// setsMove is, in a "-sets" run, before one step in chaosSetsMoveOdds: a
// refresh of one running name (two moves in three) or a wait over every
// running name. The step follows as it would without it.
func (r *chaosRun) setsMove() {
	s := r.sets
	if s == nil || s.rng.IntN(chaosSetsMoveOdds) != 0 {
		return
	}
	if s.over.IntN(4) == 0 {
		r.setsWhileTheTableIsHeld()
		return
	}
	if s.rng.IntN(3) == 0 {
		r.waitNames()
	} else {
		r.refreshName()
	}
}

// deadline draws the deadline of a refresh's or a wait's wait: short,
// as the run may be paused or down, and the chaos test must stay quick.
func (s *chaosSets) deadline() time.Duration {
	return time.Duration(10+s.rng.IntN(90)) * time.Millisecond
}

// children returns, for name, the status identities its setStatus wrote
// in place of each identity; mu must be held.
func (s *chaosSets) children(name string) map[uint64][]uint64 {
	children := map[uint64][]uint64{}
	for id, prevs := range s.from[name] {
		for _, p := range prevs {
			children[p] = append(children[p], id)
		}
	}
	return children
}

// descendants returns the status identities of children (see children)
// that descend from root, root excluded, with what each was; mu must be
// held.
func (s *chaosSets) descendants(children map[uint64][]uint64, root uint64) map[uint64]status.Status {
	out := map[uint64]status.Status{}
	for todo := []uint64{root}; len(todo) > 0; todo = todo[1:] {
		for _, c := range children[todo[0]] {
			if _, seen := out[c]; !seen && c != root {
				out[c] = s.wroteAs[c]
				todo = append(todo, c)
			}
		}
	}
	return out
}

// setsTable returns the sets.Table of the generation's table; set, if not
// nil, is called with each object a write of it gives a new set.
func (r *chaosRun) setsTable(set func(*item)) *sets.Table[*item] {
	t, err := sets.Of(r.gen.db, r.gen.table, (*item).clone,
		func(o *item) status.Set { return o.Statuses },
		func(o *item, st status.Set) *item {
			if o.Statuses = st; set != nil {
				set(o)
			}
			return o
		})
	if err != nil {
		r.t.Fatalf("seed %d: sets.Of: %v", r.seed, err)
	}
	return t
}

// refreshName refreshes one running name, of the whole table or of a few
// keys, waits for it with a deadline and checks the result.
func (r *chaosRun) refreshName() {
	s := r.sets
	rec := r.recs[s.rng.IntN(len(r.recs))]
	var queries []statedb.Query[*item]
	var keys []string
	if s.rng.IntN(2) == 0 {
		for n := 1 + s.rng.IntN(4); n > 0; n-- {
			k := fmt.Sprintf("k%02d", s.rng.IntN(chaosKeys))
			keys, queries = append(keys, k), append(queries, itemID.Query(k))
		}
	}
	// Each mark is booked as the test's write of the name's status (the
	// status the name's statuses must now descend from), and as one the
	// test marked Refreshing (recheckBook), before its transaction commits.
	marks := map[string]uint64{}
	t := r.setsTable(func(o *item) {
		id := o.Statuses.Get(rec.name).ID()
		rec.target.with(func() { rec.target.rc.testMarked[id] = true })
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.last[rec.name] == nil {
			s.last[rec.name], s.wrote[rec.name] = map[string]uint64{}, map[string]map[uint64]bool{}
		}
		if s.wrote[rec.name][o.ID] == nil {
			s.wrote[rec.name][o.ID] = map[uint64]bool{}
		}
		s.wrote[rec.name][o.ID][id], s.last[rec.name][o.ID] = true, id
		s.wroteAs[id] = o.Statuses.Get(rec.name)
		marks[o.ID] = id
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	m, err := t.Refresh(ctx, rec.name, queries...)
	cancel()
	what := "every object"
	if len(keys) > 0 {
		what = strings.Join(keys, " ")
	}
	if err != nil {
		r.t.Fatalf("seed %d: %sRefresh of %s: %v", r.seed, rec.label(), what, err)
	}
	d := s.deadline()
	ctx, cancel = context.WithTimeout(context.Background(), d)
	res, err := m.Wait(ctx)
	cancel()
	r.logf("%sRefresh of %s marked %d; Wait (%s): done %d, failed %d, deleted %d, err=%v", rec.label(), what, m.Len(), d, res.Done, len(res.Failed), res.Deleted, err)
	if err != nil && !errors.Is(err, sets.ErrNotSettled) {
		r.t.Fatalf("seed %d: %sMarked.Wait: %v", r.seed, rec.label(), err)
	}
	if problems := r.refreshProblems(rec, m, marks, res, err == nil); len(problems) > 0 {
		r.t.Fatalf("seed %d: %sRefresh of %s, then Marked.Wait: %s\n%s", r.seed, rec.label(), what, strings.Join(problems, "; "), r.violations())
	}
}

// refreshProblems checks what Marked.Wait returned (settled: with a nil
// error) against the marks and the books.
func (r *chaosRun) refreshProblems(rec *chaosRec, m *sets.Marked[*item], marks map[string]uint64, res sets.Result, settled bool) (problems []string) {
	s := r.sets
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(marks) != m.Len() {
		problems = append(problems, fmt.Sprintf("Marked.Len is %d, but Refresh wrote %d object(s)", m.Len(), len(marks)))
	}
	if res.Deleted > 0 {
		problems = append(problems, fmt.Sprintf("%d object(s) counted deleted, but nothing was deleted", res.Deleted))
	}
	if sum := res.Done + len(res.Failed) + res.Deleted; sum > m.Len() || settled && sum != m.Len() {
		problems = append(problems, fmt.Sprintf("done %d + failed %d + deleted %d of %d marked (settled: %v)", res.Done, len(res.Failed), res.Deleted, m.Len(), settled))
	}
	children := s.children(rec.name)
	failed := map[string]bool{}
	for _, f := range res.Failed {
		mark, ok := marks[f.Key]
		failed[f.Key] = true
		switch desc := s.descendants(children, mark); {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s counted failed, but not marked", f.Key))
		case f.Name != rec.name || f.Status.Kind != status.KindError || f.Status.Error == "":
			problems = append(problems, fmt.Sprintf("%s counted failed as %s", f.Key, f))
		case desc[f.Status.ID()].Kind != status.KindError:
			problems = append(problems, fmt.Sprintf("%s counted failed with %s (id %d), which %s did not write after the mark (id %d)", f.Key, f, f.Status.ID(), rec.name, mark))
		case desc[f.Status.ID()].Error != f.Status.Error:
			problems = append(problems, fmt.Sprintf("%s counted failed with %q, but %s wrote %q", f.Key, f.Status.Error, rec.name, desc[f.Status.ID()].Error))
		}
	}
	doneAfter := 0 // marked objects not failed with a Done written after the mark
	for key, mark := range marks {
		if failed[key] {
			continue
		}
		for _, st := range s.descendants(children, mark) {
			if st.Kind == status.KindDone {
				doneAfter++
				break
			}
		}
	}
	if res.Done > doneAfter {
		problems = append(problems, fmt.Sprintf("%d object(s) counted Done, but %s wrote Done after the mark for %d of the %d marked", res.Done, rec.name, doneAfter, len(marks)))
	}
	return problems
}

// waitNames waits with sets.Table.Wait, DoneOrError, for a snapshot over
// every running name, with a deadline, and checks what it returned.
func (r *chaosRun) waitNames() {
	s, g := r.sets, r.gen
	var names []string
	for _, rec := range r.recs {
		names = append(names, rec.name)
	}
	txn := g.db.ReadTxn()
	d := s.deadline()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	err := r.setsTable(nil).Wait(ctx, names, sets.DoneOrError(), sets.Snapshot(txn))
	cancel()
	r.logf("Wait for %s @%d (%s, DoneOrError): err=%v", strings.Join(names, ""), g.table.Revision(txn), d, err)
	var want []status.Kind
	switch {
	case err == nil:
		want = []status.Kind{status.KindDone}
	case errors.Is(err, reconciler.ErrObjectFailed) && !errors.Is(err, sets.ErrNotSettled):
		want = []status.Kind{status.KindDone, status.KindError}
	case errors.Is(err, sets.ErrNotSettled) && errors.Is(err, context.DeadlineExceeded):
		return
	default:
		r.t.Fatalf("seed %d: Table.Wait for %v: %v", r.seed, names, err)
	}
	var problems []string
	s.mu.Lock()
	children := map[string]map[uint64][]uint64{}
	for _, rec := range r.recs {
		children[rec.name] = s.children(rec.name)
	}
	for obj := range g.table.All(txn) {
		for _, rec := range r.recs {
			st := rec.getStatus(obj)
			if st.ID() == 0 || slices.Contains(want, st.Kind) {
				continue
			}
			ok := false
			for _, later := range s.descendants(children[rec.name], st.ID()) {
				if ok = slices.Contains(want, later.Kind); ok {
					break
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s%s=%s was %s (id %d) and %s wrote no %v since", rec.label(), obj.ID, obj.Value, st, st.ID(), rec.name, want))
			}
		}
	}
	s.mu.Unlock()
	if len(problems) > 0 {
		r.t.Fatalf("seed %d: Table.Wait for %v returned %v, yet: %s\n%s", r.seed, names, err, strings.Join(problems, "; "), r.violations())
	}
}

// newSetsRNG is the RNG of the refresh and wait moves of seed.
func newSetsRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5e7a17)) }

// setsWhileTheTableIsHeld holds the table's write transaction, as a user's
// long restore may, while a wait across names, a refresh of one name or a
// retire of a name nobody serves runs with a short ctx: it must return
// with ctx's error before the writer lets go ("It stops when ctx ends";
// before 162709d it waited for the writer, and Refresh and Retire then
// returned nil).
func (r *chaosRun) setsWhileTheTableIsHeld() {
	s := r.sets
	t := r.setsTable(nil)
	var names []string
	for _, rec := range r.recs {
		names = append(names, rec.name)
	}
	call := []struct {
		what string
		fn   func(context.Context) (int, error) // how many objects it wrote
	}{
		{"Wait", func(ctx context.Context) (int, error) { return 0, t.Wait(ctx, names) }},
		{"Refresh", func(ctx context.Context) (int, error) {
			m, err := t.Refresh(ctx, r.recs[0].name)
			return m.Len(), err
		}},
		{"Retire", func(ctx context.Context) (int, error) { return t.Retire(ctx, chaosGhost) }},
	}[s.over.IntN(3)]
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	held := r.gen.db.WriteTxn(r.gen.table)
	type result struct {
		n   int
		err error
	}
	got := make(chan result, 1)
	go func() { n, err := call.fn(ctx); got <- result{n, err} }()
	select {
	case res := <-got:
		held.Abort()
		// Nothing to write (no object names the ghost) needs no lock.
		if !errors.Is(res.err, context.DeadlineExceeded) && (res.err != nil || res.n > 0) {
			r.t.Fatalf("seed %d: %s while the table was held: %d written, %v; want ctx's error", r.seed, call.what, res.n, res.err)
		}
		r.logf("%s while the table was held: %d, %v", call.what, res.n, res.err)
	case <-time.After(5 * time.Second):
		held.Abort()
		res := <-got
		r.t.Fatalf("seed %d: %s returned only once the writer let go of the table, its ctx long over (then: %d, %v)", r.seed, call.what, res.n, res.err)
	}
}
