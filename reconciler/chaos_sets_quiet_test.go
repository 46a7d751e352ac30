package reconciler_test

// The quiet waits of a "-sets" run (chaos_sets_test.go), aimed at progress
// owed and never published (issue 49). The names' statuses of one object
// version go into one write (reconciler/internal/groupcommit), and a round
// whose statuses went so owes its progress, the revision
// WaitUntilReconciled waits on, until that write lands. A prune waits for
// the write first (awaitLanded), and must publish what is owed: before
// 677e9d3 it cleared it, and a name that had read its own statuses before
// the write landed, then pruned, stayed at its old progress until a next
// round, which a quiet table never brings.
//
// quietMove, before one step in chaosQuietOdds, first waits for what the
// steps before left, then calms every running name's target (no failures,
// slow calls or re-checks: the names settle the write in one round each,
// their statuses written together), turns the commit hook on
// (chaosQuietHook: slow, and asking every name for a prune from inside
// each commit of the table, as a user's hook may), writes new values of
// one or two keys, and waits, writing nothing more, with each name's own
// WaitUntilReconciled: for the write, then for the table's revision with
// the names' status writes. quietAfterStart waits so after every restart
// (in place, a new generation, or one in which names leave and join),
// whose first rounds meet the prune a start asks for. Both draw from an
// RNG of their own, so that the rest of a seed's schedule stays as it was.
//
// A wait may legitimately not finish while the reconcilers are paused, a
// target is down (an outage, or keys failing as if it were), a breaker is
// open, an operation is held or a setup fails; and it finds nothing while
// the table is not initialized (no prune runs): the moves are not made
// then. A wait cut short by its deadline fails only if nothing is left for
// that name to do: no object's status of the name Pending or Refreshing,
// and none of its operations or prunes running. The failure names the
// name, the revision it reached and the one it waited for.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/internal/ident"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

const (
	// chaosQuietOdds: one step in chaosQuietOdds of a "-sets" run with
	// manual prunes is a quiet move.
	chaosQuietOdds = 3
	// chaosQuietDeadline bounds each name's wait: it returns within
	// milliseconds unless progress is stuck, which a bug leaves so for
	// good.
	chaosQuietDeadline = 3 * time.Second
)

// newQuietRNG is the RNG of the quiet moves of seed.
func newQuietRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x901e7)) }

// quietMove is, in a "-sets" run with manual prunes, before one step in
// chaosQuietOdds, the quiet move (see the top of the file).
func (r *chaosRun) quietMove() {
	s := r.sets
	if s == nil || !r.manualPrune || s.quiet.IntN(chaosQuietOdds) != 0 {
		return
	}
	if why := r.unquiet(); why != "" {
		r.logf("no quiet move: %s", why)
		return
	}
	// What the steps before left: a name whose progress is owed waits for
	// good here.
	r.quietWait(r.gen.table.Revision(r.gen.db.ReadTxn()), "the quiet wait after the steps before")
	seen := map[string]bool{}
	var changes []chaosChange
	var words []string
	for n := 1 + s.quiet.IntN(2); n > 0; n-- {
		k := fmt.Sprintf("k%02d", s.quiet.IntN(chaosKeys))
		if seen[k] {
			continue
		}
		seen[k] = true
		s.quietValues++
		v := fmt.Sprintf("q%d.%d", r.gens, s.quietValues) // r.value() would draw from the run's RNG
		changes, words = append(changes, chaosChange{key: k, value: v}), append(words, k+"="+v)
	}
	s.hook.on(r.gen.recs)
	defer s.hook.off()
	defer r.calm()()
	// write draws, for a set, whether the new object keeps the old one's
	// entries: from the quiet RNG here.
	main := r.rng
	r.rng = s.quiet
	rev := r.write(changes...)
	r.rng = main
	r.logf("@%d set %s, for a quiet wait, the commit hook slow and asking for prunes", rev, strings.Join(words, " "))
	r.quietWait(rev, fmt.Sprintf("the quiet wait for @%d", rev))
	r.quietWait(r.gen.table.Revision(r.gen.db.ReadTxn()), fmt.Sprintf("the quiet wait after @%d, for the names' status writes", rev))
}

// quietAfterStart is, in a "-sets" run, after a restart: a quiet wait
// for the table's revision, over the first rounds of the new run and the
// prune its start asks for (WithPruning), or a request made before the
// stop.
func (r *chaosRun) quietAfterStart(what string) {
	if r.sets == nil {
		return
	}
	if why := r.unquiet(); why != "" {
		r.logf("no quiet wait after the %s: %s", what, why)
		return
	}
	rev := r.gen.table.Revision(r.gen.db.ReadTxn())
	r.quietWait(rev, fmt.Sprintf("the quiet wait after the %s", what))
}

// calm makes every running name's target answer at once and succeed (no
// failures, slow calls or re-checks drawn), so that the names settle the
// move's write in one round each, their statuses written together, and
// returns what restores the target's ways.
func (r *chaosRun) calm() (restore func()) {
	var undo []func()
	for _, rec := range r.recs {
		c := rec.target
		c.with(func() {
			failProb, slowProb, recheckProb := c.failProb, c.slowProb, c.recheckProb
			c.failProb, c.slowProb, c.recheckProb = 0, 0, 0
			undo = append(undo, func() {
				c.with(func() { c.failProb, c.slowProb, c.recheckProb = failProb, slowProb, recheckProb })
			})
		})
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// unquiet returns why a wait may legitimately not finish now, or "".
func (r *chaosRun) unquiet() string {
	if r.gen.paused {
		return "paused"
	}
	if r.initIn > 0 {
		return "the table is not initialized: no prune runs"
	}
	for i, rec := range r.recs {
		why := ""
		rec.target.with(func() {
			switch {
			case rec.target.down:
				why = "its target is down"
			case rec.target.downKeys != nil:
				why = "keys fail as if its target were down"
			case len(rec.target.holds) > 0:
				why = "an operation is held"
			case r.gen.ops[i].setupFails > 0:
				why = "its setup fails"
			}
		})
		if why == "" && r.breakerOpen(rec) {
			why = "its breaker is open"
		}
		if why != "" {
			return rec.label() + why
		}
	}
	return ""
}

// breakerOpen reports whether rec's health says its breaker is open.
func (r *chaosRun) breakerOpen(rec *chaosRec) bool { return r.healthSays(rec, "target failing") }

// healthSays reports whether rec's health, its status or its error,
// holds text.
func (r *chaosRun) healthSays(rec *chaosRec, text string) bool {
	h := r.gen.health.GetChild(rec.healthName())
	if h == nil {
		return false
	}
	h.Lock()
	defer h.Unlock()
	return strings.Contains(h.Status, text) || (h.Error != nil && strings.Contains(h.Error.Error(), text))
}

// quietWait waits, writing nothing, with each running name's own
// WaitUntilReconciled for rev under chaosQuietDeadline, and fails the test
// if one does not return though nothing is left for that name to do.
func (r *chaosRun) quietWait(rev statedb.Revision, what string) {
	g, cut := r.gen, ident.Last()
	for i, rec := range r.recs {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), chaosQuietDeadline)
		reached, low, err := g.recs[i].WaitUntilReconciled(ctx, rev)
		cancel()
		took := time.Since(start).Round(time.Millisecond)
		r.logf("%squiet wait for @%d: reached @%d, retry low @%d, in %s, err=%v", rec.label(), rev, reached, low, took, err)
		if err == nil && reached >= rev {
			r.checkNonePending(i, rev, cut)
			continue
		}
		if why := r.leftToDo(i); why != "" {
			r.logf("%squiet wait cut short, legitimately: %s", rec.label(), why)
			continue
		}
		r.t.Fatalf("seed %d: %s: %sWaitUntilReconciled(@%d) did not return within %s (reached @%d, retry low @%d, %v), the table quiet since; "+
			"yet nothing is left for %s to do: no object's status of %s is Pending or Refreshing, none of its operations or prunes runs, it is not paused, "+
			"and its target is up: the progress of its last round, written with the other names, was not published\n%s",
			r.seed, what, rec.label(), rev, chaosQuietDeadline, reached, low, err, rec.name, rec.name, r.violations())
	}
}

// leftToDo returns what reconciler i still has to do that a wait waits for,
// or "" if nothing: an object whose status of it is Pending or Refreshing,
// an operation or a prune running, or a state unquiet reports.
func (r *chaosRun) leftToDo(i int) string {
	rec, g := r.recs[i], r.gen
	if why := r.unquiet(); why != "" {
		return why
	}
	var open []string
	for obj := range g.table.All(g.db.ReadTxn()) {
		if st := rec.getStatus(obj); st.Kind == status.KindPending || st.Kind == status.KindRefreshing {
			open = append(open, fmt.Sprintf("%s=%s is %s", obj.ID, obj.Value, st.Kind))
		}
	}
	var running int
	var pruning bool
	rec.target.with(func() { running, pruning = g.ops[i].running, g.ops[i].pruneRunning })
	if running > 0 || pruning {
		open = append(open, fmt.Sprintf("%d operation(s) running (prune: %v)", running, pruning))
	}
	return strings.Join(open, ", ")
}

// chaosQuietHook is the commit hook of a "-sets" run's hive: while on
// (during a quiet move), each commit of the items table waits a while,
// asks every running name for a prune, and waits a while again, as a
// user's hook that does some work and wants prunes to follow changes
// promptly may. It runs on the goroutine that commits, once the write is
// in the table and its watchers are woken: for the names' statuses
// written together (reconciler/internal/groupcommit), before they learn
// that it landed, so that a name may have read its own statuses and gone
// back to wait when the request comes.
type chaosQuietHook struct {
	recs atomic.Pointer[[]reconciler.Reconciler[*item]] // nil while off
	mu   sync.Mutex
	rng  *rand.Rand // the delays: drawn as commits come, as faults are
}

func newQuietHook(seed uint64) *chaosQuietHook {
	return &chaosQuietHook{rng: rand.New(rand.NewPCG(seed, 0x400c))}
}

func (h *chaosQuietHook) on(recs []reconciler.Reconciler[*item]) { h.recs.Store(&recs) }
func (h *chaosQuietHook) off()                                   { h.recs.Store(nil) }

func (h *chaosQuietHook) hook(_ statedb.ReadTxn, tables []string) {
	recs := h.recs.Load()
	if recs == nil || !slices.Contains(tables, "items") {
		return
	}
	h.mu.Lock()
	before := time.Duration(h.rng.Int64N(int64(2 * time.Millisecond)))
	after := time.Millisecond + time.Duration(h.rng.Int64N(int64(2*time.Millisecond)))
	h.mu.Unlock()
	<-time.After(before) // the hook's own work: any length is a valid schedule
	for _, rc := range *recs {
		rc.Prune()
	}
	<-time.After(after)
}

// commitHookCell registers, in a "-sets" run, chaosQuietHook.
func (r *chaosRun) commitHookCell() cell.Cell {
	if r.sets == nil {
		return cell.Group()
	}
	return cell.Provide(func() statedb.CommitHookOut { return statedb.CommitHookOut{CommitHook: r.sets.hook.hook} })
}
