package reconciler_test

// Several reconcilers on one status.Set under chaos (the "-sets"
// configurations): each seed draws 2 to 4 names of a pool of five, each
// name its own target, some failing often, some slow. At a restart
// (namesRestart) a name may leave for good, another join, or both: the new
// generation's hive has no reconciler of the name that left, and carries
// the old table's objects as they were, statuses included (Done for the
// names that stay), to be retired of the leaving name's entry while the
// others run; a joining name finds every object without an entry for it.
// A name that left may join again later: its target is whatever it was
// when it left, its entries are gone, so it applies every object again and
// its prune removes its orphans.
//
// The checks: right after a retire, no object keeps the retired name's
// entry, and none does at the end (setsProblems) while it stays away; the
// joining name's first wait promises what any wait does (reconciled); at
// the end every name's status of every object descends, through that
// name's own status writes, from the test's last write of the object
// (statusProblems): a status another name wrote, or one for an older
// version, is caught; a Done is of the version that name's target last
// applied; and WaitForReconciliation over an index of the whole set
// returns (setsWait). Between steps, refreshes of one name and waits across
// names (sets.Table.Refresh and Wait) are checked as they return
// (chaos_sets_wait_test.go), and each name's own WaitUntilReconciled must
// return on a quiet table after a write its statuses shared with the other
// names' and after every restart (chaos_sets_quiet_test.go).

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/statedb"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// chaosSetNames is the pool of names of a "-sets" run; 2 to 4 run at once.
var chaosSetNames = []string{"a", "b", "c", "d", "e"}

const (
	chaosSetsMin, chaosSetsMax = 2, 4
	chaosNamesRestarts         = 3 // restarts that change names, besides chaosMaxRestarts
)

// chaosSets is what a "-sets" run knows of its names. The books (mu) are
// written by the setStatus of each name's reconcilers and by the test.
type chaosSets struct {
	pool     []*chaosRec     // every name of the run, in pool order; r.recs are those running
	left     map[string]bool // names retired and not back
	restarts int
	index    statedb.Index[*item, status.Kind] // over every entry of the set (setKind)
	rng      *rand.Rand                        // the refresh and wait moves (chaos_sets_wait_test.go)

	quiet       *rand.Rand      // the quiet moves (chaos_sets_quiet_test.go)
	quietValues int             // values they wrote
	hook        *chaosQuietHook // the hive's commit hook

	over       *rand.Rand     // the over moves (chaos_sets_over_test.go)
	overValues int            // values they wrote
	slow       chaosSlowIndex // the set index's delay, while they turn it on

	// What the next generation starts with (namesRestart).
	carry      []*item
	carryDeps  []*chaosDep
	carryStale map[string]bool

	mu sync.Mutex
	// from: per name, each status identity its setStatus wrote, to the
	// identities the name's status had on the objects it was given (a
	// task's status is set again on each newer object of its version).
	from map[string]map[uint64][]uint64
	// wroteAs: each status identity a setStatus or a refresh wrote, as
	// written.
	wroteAs map[uint64]status.Status
	// wrote: per name and key, the identities the test wrote in this
	// generation; last: the one of its last write.
	wrote map[string]map[string]map[uint64]bool
	last  map[string]map[string]uint64
}

// drawNames makes, in a "-sets" run, the pool of names with targets of
// their own (a and b are those of cfg.set), and runs 2 to 4 of them; each
// name fails and is slow as drawn for it. It must follow the settings of
// every target, which it copies to the names it adds.
func (r *chaosRun) drawNames() {
	if !r.cfg.sets {
		return
	}
	rng := rand.New(rand.NewPCG(r.seed, 0x5e75))
	s := &chaosSets{left: map[string]bool{}, from: map[string]map[uint64][]uint64{}, carryStale: map[string]bool{},
		rng: newSetsRNG(r.seed), quiet: newQuietRNG(r.seed), hook: newQuietHook(r.seed), over: newOverRNG(r.seed), wroteAs: map[uint64]status.Status{}}
	s.index = convergeindex.NewNamedStatusIndex("status-set", s.slow.kind)
	r.sets = s
	first := r.recs[0].target
	for i, name := range chaosSetNames {
		var rec *chaosRec
		if i < len(r.recs) {
			rec = r.recs[i]
		} else {
			get, _ := statusOf(name)
			rec = &chaosRec{name: name, target: newChaosTarget(r.seed+uint64(i)<<32, 0, 0), getStatus: get}
			rec.target.rc.refreshing, rec.target.recheckProb = first.rc.refreshing, first.recheckProb
			rec.target.drift = &driftBook{mode: r.driftMode, verdict: map[string]driftSeen{}}
		}
		rec.setStatus = s.recording(name)
		failProb := []float64{first.failProb, 0.02, 0.6}[rng.IntN(3)]
		slowProb := []float64{0, 0.3, 0.9}[rng.IntN(3)]
		rec.target.with(func() { rec.target.failProb, rec.target.slowProb = failProb, slowProb })
		s.from[name] = map[uint64][]uint64{}
		s.pool = append(s.pool, rec)
	}
	n := chaosSetsMin + rng.IntN(chaosSetsMax-chaosSetsMin+1)
	r.recs = slices.Clone(s.pool[:n])
	// A third of the seeds register every name with WithStatusSet, a third
	// some (those whose draw says so), a third none: a write of one
	// version then merges every name's status with one copy of the set,
	// falls back to each name's own setStatus, or does only that.
	inSet := rand.New(rand.NewPCG(r.seed, 0x5e75e7))
	mode := inSet.IntN(3)
	for _, rec := range s.pool {
		if mode == 2 || (mode == 1 && inSet.IntN(2) == 0) {
			rec.inSet = s.recordingSet()
		}
	}
	r.logf("names %s of %s", s.describe(r.recs), strings.Join(chaosSetNames, ""))
}

func (s *chaosSets) describe(recs []*chaosRec) string {
	var words []string
	for _, rec := range recs {
		words = append(words, fmt.Sprintf("%s(fail=%.2f slow=%.1f%s)", rec.name, rec.target.failProb, rec.target.slowProb,
			map[bool]string{true: " in set"}[rec.inSet != nil]))
	}
	return strings.Join(words, " ")
}

// recordingSet returns a set function for WithStatusSet, booking each
// identity it writes, of every name it changes (a write with the group sets
// several at once).
func (s *chaosSets) recordingSet() func(*item, status.Set) *item {
	return func(it *item, set status.Set) *item {
		for name, st := range set.All() {
			if old, id := it.Statuses.Get(name).ID(), st.ID(); id != 0 && id != old {
				s.mu.Lock()
				if s.from[name] == nil {
					s.from[name] = map[uint64][]uint64{}
				}
				if !slices.Contains(s.from[name][id], old) {
					s.from[name][id] = append(s.from[name][id], old)
				}
				s.wroteAs[id] = st
				s.mu.Unlock()
			}
		}
		it.Statuses = set
		return it
	}
}

// recording returns name's setStatus, booking each identity it writes.
func (s *chaosSets) recording(name string) func(*item, status.Status) *item {
	get, set := statusOf(name)
	return func(it *item, st status.Status) *item {
		if old, id := get(it).ID(), st.ID(); id != 0 && id != old {
			s.mu.Lock()
			if !slices.Contains(s.from[name][id], old) {
				s.from[name][id] = append(s.from[name][id], old)
			}
			s.wroteAs[id] = st
			s.mu.Unlock()
		}
		return set(it, st)
	}
}

// setKind is the kind of a whole set: Pending if any entry is, else
// Refreshing if any is, else Error if any is, else Done (an empty set too).
func setKind(it *item) status.Status {
	k := status.KindDone
	for _, st := range it.Statuses.All() {
		switch {
		case st.Kind == status.KindPending:
			return status.Status{Kind: status.KindPending}
		case st.Kind == status.KindRefreshing:
			k = status.KindRefreshing
		case st.Kind == status.KindError && k == status.KindDone:
			k = status.KindError
		}
	}
	return status.Status{Kind: k}
}

// retireName removes name's entry from every object of table with
// sets.Table.Retire, and returns how many it changed.
func retireName(ctx context.Context, db *statedb.DB, table statedb.RWTable[*item], name string) (int, error) {
	t, err := sets.Of(db, table, (*item).clone,
		func(o *item) status.Set { return o.Statuses },
		func(o *item, s status.Set) *item { o.Statuses = s; return o })
	if err != nil {
		return 0, err
	}
	return t.Retire(ctx, name)
}

// setsIndexers is the index over the whole set, in a "-sets" run.
func (r *chaosRun) setsIndexers() []statedb.Indexer[*item] {
	if r.sets == nil {
		return nil
	}
	return []statedb.Indexer[*item]{r.sets.index}
}

// setsStarted starts the books of a new generation and writes into its
// table (a fresh one) what namesRestart carried: the dependencies first,
// then the objects as they were.
func (r *chaosRun) setsStarted() {
	s := r.sets
	if s == nil {
		return
	}
	s.mu.Lock()
	s.wrote, s.last = map[string]map[string]map[uint64]bool{}, map[string]map[string]uint64{}
	s.mu.Unlock()
	if len(s.carryDeps) > 0 {
		wtxn := r.gen.db.WriteTxn(r.gen.deps)
		for _, d := range s.carryDeps {
			_, _, err := r.gen.deps.Insert(wtxn, d)
			if err != nil {
				wtxn.Abort()
				r.t.Fatalf("seed %d: carrying dependency %s: %v", r.seed, d.ID, err)
			}
			for _, rec := range r.recs {
				rec.target.with(func() { rec.target.rc.depWrites[d.ID]++ })
			}
		}
		wtxn.Commit()
	}
	if len(s.carry) > 0 {
		changes := make([]chaosChange, len(s.carry))
		for i, obj := range s.carry {
			changes[i] = chaosChange{key: obj.ID, obj: obj}
		}
		r.logf("@%d carried %d objects (%s) and %d dependencies", r.write(changes...), len(s.carry), r.statuses(s.carry[0]), len(s.carryDeps))
		for _, obj := range s.carry {
			r.depStale[obj.ID] = s.carryStale[obj.ID] // the same objects: as stale as they were
		}
	}
	s.carry, s.carryDeps = nil, nil
}

// setsWrote books, for each running name, the status the test wrote for
// each key of changes in wtxn (a key deleted: none).
func (r *chaosRun) setsWrote(wtxn statedb.ReadTxn, changes []chaosChange) {
	s := r.sets
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range changes {
		obj, _, found := r.gen.table.Get(wtxn, itemID.Query(ch.key))
		for _, rec := range r.recs {
			if s.last[rec.name] == nil {
				s.last[rec.name], s.wrote[rec.name] = map[string]uint64{}, map[string]map[uint64]bool{}
			}
			if !found {
				delete(s.last[rec.name], ch.key)
				continue
			}
			id := rec.getStatus(obj).ID()
			if s.wrote[rec.name][ch.key] == nil {
				s.wrote[rec.name][ch.key] = map[uint64]bool{}
			}
			s.wrote[rec.name][ch.key][id], s.last[rec.name][ch.key] = true, id
		}
	}
}

// namesRestart is, in a "-sets" run, two restarts in three (up to
// chaosNamesRestarts of them, which use up no other): a new generation in
// which a name leaves, one joins, or both, over the old table's objects as
// they were. It reports whether it restarted.
func (r *chaosRun) namesRestart() bool {
	s := r.sets
	if s == nil || s.restarts >= chaosNamesRestarts || r.rng.IntN(3) == 0 {
		return false
	}
	var away []*chaosRec
	for _, rec := range s.pool {
		if !slices.Contains(r.recs, rec) {
			away = append(away, rec)
		}
	}
	canLeave, canJoin := len(r.recs) > chaosSetsMin, len(r.recs) < chaosSetsMax && len(away) > 0
	if !canLeave && !canJoin {
		return false
	}
	s.restarts++
	r.restarts--          // not one of chaosMaxRestarts
	move := r.rng.IntN(3) // 0 leave, 1 join, 2 both
	switch {
	case !canJoin:
		move = 0
	case !canLeave:
		move = 1
	}
	var leaving, joining *chaosRec
	if move != 1 {
		leaving = r.recs[r.rng.IntN(len(r.recs))]
	}
	if move != 0 {
		joining = away[r.rng.IntN(len(away))]
	}
	r.checkTable()
	txn := r.gen.db.ReadTxn()
	s.carry, s.carryDeps = nil, nil
	for obj := range r.gen.table.All(txn) {
		obj = obj.clone()
		if r.driftMode == driftReport && isPoison(obj.Value) {
			// A mark of a dependency over a terminal Error is a
			// Refreshing: a new run's report-only check finds the poison
			// value drifted and leaves it Done (the run before knew its
			// update failed). Carried as Pending for every name instead.
			obj.Statuses = obj.Statuses.Pending()
		}
		s.carry = append(s.carry, obj)
		s.carryStale[obj.ID] = r.depStale[obj.ID]
	}
	for d := range r.gen.deps.All(txn) {
		c := *d
		s.carryDeps = append(s.carryDeps, &c)
	}
	desired := r.describeNames(leaving, joining)
	r.stopGen()
	var recs []*chaosRec
	for _, rec := range s.pool { // pool order: a name keeps its place
		if rec != leaving && (rec == joining || slices.Contains(r.recs, rec)) {
			recs = append(recs, rec)
		}
	}
	if joining != nil {
		delete(s.left, joining.name)
		other := r.recs[0].target
		var down bool
		var ask time.Duration
		other.with(func() { down, ask = other.down, other.downAsk })
		joining.target.with(func() { joining.target.down, joining.target.downAsk, joining.target.downKeys = down, ask, nil })
	}
	r.recs = recs
	r.startGen(nil)
	r.logf("restart as generation %d: %s; running %s", r.gens, desired, s.describe(r.recs))
	if leaving != nil {
		s.left[leaving.name] = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := retireName(ctx, r.gen.db, r.gen.table, leaving.name)
		cancel()
		if err != nil {
			r.t.Fatalf("seed %d: retiring %s: %v", r.seed, leaving.name, err)
		}
		r.logf("retired %s from %d object(s)", leaving.name, n)
		if problem := r.retiredProblem(); problem != "" {
			r.t.Fatalf("seed %d: right after the retire of %s: %s", r.seed, leaving.name, problem)
		}
	}
	if joining != nil {
		r.reconciled(slices.Index(r.recs, joining), time.Duration(5+r.rng.IntN(50))*time.Millisecond)
	}
	r.quietAfterStart("restart as generation " + fmt.Sprint(r.gens)) // chaos_sets_quiet_test.go
	return true
}

func (r *chaosRun) describeNames(leaving, joining *chaosRec) string {
	var words []string
	if leaving != nil {
		words = append(words, leaving.name+" leaves")
	}
	if joining != nil {
		words = append(words, fmt.Sprintf("%s joins (again: %v)", joining.name, r.sets.left[joining.name]))
	}
	return strings.Join(words, ", ")
}

// retiredProblem returns the objects that keep an entry of a retired name.
func (r *chaosRun) retiredProblem() string {
	var kept []string
	for obj := range r.gen.table.All(r.gen.db.ReadTxn()) {
		for name := range obj.Statuses.All() {
			if r.sets.left[name] {
				kept = append(kept, fmt.Sprintf("%s=%s keeps %s's entry (%s)", obj.ID, obj.Value, name, obj.Statuses.Get(name)))
			}
		}
	}
	return strings.Join(kept, ", ")
}

// setsProblems is, in a "-sets" run, what converged adds: no entry of a
// retired name, and every running name's statuses its own (statusProblems).
func (r *chaosRun) setsProblems() (problems []string) {
	if r.sets == nil {
		return nil
	}
	if problem := r.retiredProblem(); problem != "" {
		problems = append(problems, problem)
	}
	return append(problems, r.statusProblems()...)
}

// statusProblems checks every running name's status of every object: it
// must descend, through that name's own status writes, from the test's
// last write of the object (a status written for another name, or for an
// older version, does not); a Done must descend from the version the
// name's target last applied, if it applied one in this generation (with
// drift checks off: an in-sync verdict writes Done without applying).
func (r *chaosRun) statusProblems() (problems []string) {
	s, g := r.sets, r.gen
	txn := g.db.ReadTxn()
	for i, rec := range r.recs {
		var applied map[string]uint64
		rec.target.with(func() { applied = maps.Clone(g.ops[i].lastApplied) })
		s.mu.Lock()
		for obj := range g.table.All(txn) {
			st := rec.getStatus(obj)
			last, ok := s.last[rec.name][obj.ID]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s%s=%s: the test wrote no status of it in this generation", rec.label(), obj.ID, obj.Value))
				continue
			}
			// The statuses st descends from, back to the test's writes, and
			// past one the name's setStatus wrote again over later statuses:
			// a retry of a drift check that failed writes the Refreshing it
			// checked back, identity and all, and a refresh's mark (booked
			// as the test's) is such a Refreshing (chaos_sets_wait_test.go).
			seen, roots, todo := map[uint64]bool{st.ID(): true}, []uint64{}, []uint64{st.ID()}
			for len(todo) > 0 {
				id := todo[0]
				if todo = todo[1:]; s.wrote[rec.name][obj.ID][id] {
					roots = append(roots, id)
				}
				for _, prev := range s.from[rec.name][id] {
					if !seen[prev] {
						seen[prev] = true
						todo = append(todo, prev)
					}
				}
			}
			switch {
			case !seen[last] && s.ownPutBack(rec.name, obj.ID, last, seen):
				// The test put back this name's own status of the same
				// version (a delete and a put back read as one change):
				// st settles that version as last did.
			case len(roots) == 0:
				problems = append(problems, fmt.Sprintf("%s%s=%s is %s (id %d), which neither the test nor %s's setStatus wrote (through %d statuses): another name's write?",
					rec.label(), obj.ID, obj.Value, st, st.ID(), rec.name, len(seen)))
			case !seen[last]:
				problems = append(problems, fmt.Sprintf("%s%s=%s is %s (id %d), of the test's writes of ids %v; its last write is id %d: a status of an older version",
					rec.label(), obj.ID, obj.Value, st, st.ID(), roots, last))
			case st.Kind == status.KindDone && !s.wrote[rec.name][obj.ID][st.ID()] && r.driftMode == driftOff && applied[obj.ID] != 0 && !seen[applied[obj.ID]] &&
				// A Done written over a changed object is set on that
				// object, which carries the status the task was for, while
				// the target was given the version with a fresh Pending (an
				// Error adopted, a status put back): a sibling of st's.
				!slices.ContainsFunc(s.from[rec.name][applied[obj.ID]], func(id uint64) bool { return seen[id] }):
				problems = append(problems, fmt.Sprintf("%s%s=%s is Done (id %d, of the test's writes of ids %v), but its target last applied the version of id %d",
					rec.label(), obj.ID, obj.Value, st.ID(), roots, applied[obj.ID]))
			}
		}
		s.mu.Unlock()
	}
	return problems
}

// ownPutBack reports whether last, the test's last status write of name
// on the object id, put back a status name's own setStatus wrote (an Error
// of a failed attempt, say) of a version seen holds: the object deleted
// and put back as it was, before the reconciler read the delete, which
// StateDB's change iterator then never shows. The version's retry, or
// its attempt in flight, then settles it with a status that descends from
// the version's test write, not from last, its sibling. Called with mu
// held.
func (s *chaosSets) ownPutBack(name, id string, last uint64, seen map[uint64]bool) bool {
	parents := s.from[name][last]
	if len(parents) == 0 {
		return false // the test made last: a new version
	}
	todo, visited := slices.Clone(parents), map[uint64]bool{}
	for len(todo) > 0 {
		prev := todo[0]
		todo = todo[1:]
		if visited[prev] {
			continue
		}
		visited[prev] = true
		if s.wrote[name][id][prev] {
			if !seen[prev] {
				return false // last descends from a version st does not
			}
			continue
		}
		todo = append(todo, s.from[name][prev]...)
	}
	return true
}

// setsWait waits, in a "-sets" run without WithRefreshing (which marks
// every name's statuses in turn), with WaitForReconciliation over the
// index of the whole set: it must return once every name settled.
func (r *chaosRun) setsWait(ctx context.Context) {
	if r.sets == nil || r.refresh {
		return
	}
	err := reconciler.WaitForReconciliation(ctx, r.gen.db, r.gen.table, r.sets.index)
	if err != nil {
		r.t.Fatalf("seed %d: WaitForReconciliation over the whole set: %v; %s", r.seed, err, r.retiredProblem())
	}
}
