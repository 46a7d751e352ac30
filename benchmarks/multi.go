package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	upstream "github.com/cilium/statedb/reconciler"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// The multi workload puts several named reconcilers on one table, their
// statuses kept in one status set per object (status.Set, or upstream's
// StatusSet), each reconciler with a target of its own, as agents do when
// two to four of them share a table. For each count of -multi-counts it
// inserts -multi-objects objects with a fresh set (Pending for every
// reconciler), 1000 per write transaction, while the reconcilers run, and
// measures until every reconciler has reconciled every insert:
//
//	obj/s        objects per second until every object is Done in every
//	             reconciler
//	B/obj        bytes allocated per object over the process, the inserter
//	             included
//	conflicts/obj  status writes whose compare-and-swap found the object
//	             changed since it was read (most often by another
//	             reconciler's status write), per object; counted by a
//	             wrapper of the table's CompareAndSwap, the same for both
//	updates/obj  Update calls per object and reconciler: above 1, work was
//	             done again
//	txns/obj     write transactions on the table per object, the
//	             inserter's included (StateDB's Metrics, see lockMeter)
//	lock held    the time write transactions held the table's lock, as a
//	             share of the run: near 1, every write waits its turn
//	lock waiters the time write transactions waited for the lock, over the
//	             run's time: how many writers wait on average
//
// and then checks that no work was lost: the table holds every object, each
// Done in every reconciler, and every target holds every object. The floor
// runs n bare loops that do the least such a reconciler must (see
// multiEnv.floor): what StateDB and the status set cost by themselves.
// With more than one reconciler the floor also runs as one loop that does
// the work of all n and commits each object once, with every status Done
// ("one commit"): what a design in which the reconcilers of a table share
// one committer could reach at best.
// Periodic pruning is off for both libraries, as in the curve's shared
// workload; everything else is each library's default.

// multiConfig sizes the multi workload.
type multiConfig struct {
	objects int   // objects inserted per run
	counts  []int // reconcilers per run, one case each
}

// multiFlags defines the multi workload's flags on fs and returns what to
// call once fs is parsed: it shrinks the sizes for -quick (unless set
// explicitly) and checks them.
func multiFlags(fs *flag.FlagSet, c *multiConfig) func(quick bool) error {
	fs.IntVar(&c.objects, "multi-objects", 1_000_000, "objects in the multi workload (several reconcilers on one table)")
	counts := fs.String("multi-counts", "1,2,4", "reconcilers sharing one status set in the multi workload, one run each")
	return func(quick bool) error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if quick && !set["multi-objects"] {
			c.objects = 20_000
		}
		if c.objects < 1 {
			return fmt.Errorf("-multi-objects must be positive, got %d", c.objects)
		}
		c.counts = c.counts[:0]
		for _, s := range splitList(*counts) {
			n, err := parseSizes(s)
			if err != nil || len(n) != 1 || n[0] > 64 {
				return fmt.Errorf("-multi-counts: bad count %q (want 1 to 64)", s)
			}
			if !slices.Contains(c.counts, n[0]) {
				c.counts = append(c.counts, n[0])
			}
		}
		if len(c.counts) == 0 {
			return errors.New("-multi-counts: no count given")
		}
		slices.Sort(c.counts)
		return nil
	}
}

func multiCaseName(n int) string { return fmt.Sprintf("multi %d", n) }

// multiOneCommitCaseName names the case of the floor that commits each
// object once for n reconcilers.
func multiOneCommitCaseName(n int) string { return fmt.Sprintf("multi %d one commit", n) }

// multiCases runs the workload once per count, for both libraries.
func multiCases(cfg config) []runCase {
	var out []runCase
	for _, n := range cfg.multi.counts {
		out = append(out, runCase{
			name: multiCaseName(n), workload: "multi", impls: []impl{implConverge, implUpstream, implFloor},
			fn: func(ctx context.Context, c config, im impl) (measurement, error) {
				return multi(ctx, c, im, n, false)
			},
		})
		if n > 1 {
			out = append(out, runCase{
				name: multiOneCommitCaseName(n), workload: "multi", impls: []impl{implFloor},
				fn: func(ctx context.Context, c config, im impl) (measurement, error) {
					return multi(ctx, c, im, n, true)
				},
			})
		}
	}
	return out
}

// lockMeter is StateDB's Metrics for the multi workload: it sums, over
// every write transaction, the time it waited for its tables' locks and the
// time it held them. The rest is not kept. Safe for concurrent use.
type lockMeter struct {
	txns, waitNs, heldNs atomic.Int64
}

func (m *lockMeter) WriteTxnTotalAcquisition(_ string, _ []string, d time.Duration) {
	m.waitNs.Add(int64(d))
}

func (m *lockMeter) WriteTxnDuration(_ string, _ []string, d time.Duration) {
	m.txns.Add(1)
	m.heldNs.Add(int64(d))
}

func (m *lockMeter) WriteTxnTableAcquisition(string, string, time.Duration) {}
func (m *lockMeter) GraveyardLowWatermark(string, statedb.Revision)         {}
func (m *lockMeter) GraveyardCleaningDuration(string, time.Duration)        {}
func (m *lockMeter) GraveyardObjectCount(string, int)                       {}
func (m *lockMeter) ObjectCount(string, int)                                {}
func (m *lockMeter) DeleteTrackerCount(string, int)                         {}
func (m *lockMeter) Revision(string, statedb.Revision)                      {}

// lockTotals is a reading of a lockMeter.
type lockTotals struct{ txns, wait, held int64 }

func (m *lockMeter) read() lockTotals {
	return lockTotals{m.txns.Load(), m.waitNs.Load(), m.heldNs.Load()}
}

// casCounter is the table as the reconcilers see it: every call goes to the
// table, and compare-and-swaps that fail because the object changed are
// counted.
type casCounter[Obj any] struct {
	statedb.RWTable[Obj]
	conflicts atomic.Int64
}

func (t *casCounter[Obj]) CompareAndSwap(txn statedb.WriteTxn, rev statedb.Revision, obj Obj) (Obj, bool, error) {
	old, found, err := t.RWTable.CompareAndSwap(txn, rev, obj)
	if errors.Is(err, statedb.ErrRevisionNotEqual) {
		t.conflicts.Add(1)
	}
	return old, found, err
}

// multiTarget is one reconciler's target: which objects it holds, by id,
// and how many Update calls it got. full is closed once it has held every
// id.
type multiTarget struct {
	present []atomic.Bool
	held    atomic.Int64 // ids that were ever present
	updates atomic.Int64
	full    chan struct{}
}

func newMultiTarget(objects int) *multiTarget {
	return &multiTarget{present: make([]atomic.Bool, objects), full: make(chan struct{})}
}

// Update and the rest implement the single-object operations of both
// libraries (their method sets are identical).
func (t *multiTarget) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *setObject) error {
	t.updates.Add(1)
	if o.id >= uint64(len(t.present)) {
		return fmt.Errorf("object %d outside the target's %d ids", o.id, len(t.present))
	}
	if !t.present[o.id].Swap(true) && t.held.Add(1) == int64(len(t.present)) {
		close(t.full)
	}
	return nil
}

func (t *multiTarget) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *setObject) error {
	if o.id < uint64(len(t.present)) {
		t.present[o.id].Store(false)
	}
	return nil
}

func (t *multiTarget) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*setObject, statedb.Revision]) error {
	return nil
}

// multiReconciler is one of the run's reconcilers: its name in the status
// set, its target, and a wait until it has reconciled a revision.
type multiReconciler struct {
	name   string
	target *multiTarget
	wait   func(context.Context, statedb.Revision) error
}

// multiEnv is a started hive with one table of setObjects and n reconcilers
// of one library on it, each in its own module.
type multiEnv struct {
	im        impl
	oneCommit bool // the floor: one loop for every reconciler (floorOneCommit)
	h         *hive.Hive
	db        *statedb.DB
	tbl       *casCounter[*setObject]
	recs      []*multiReconciler
	locks     lockMeter
}

func startMulti(ctx context.Context, im impl, n, objects int, oneCommit bool) (*multiEnv, error) {
	if oneCommit && im != implFloor {
		return nil, fmt.Errorf("the multi workload's one-commit run is the floor's, not %s's", im)
	}
	e := &multiEnv{im: im, oneCommit: oneCommit}
	cells := []cell.Cell{
		cell.SimpleHealthCell, statedb.Cell, job.Cell,
		cell.Provide(func() statedb.Metrics { return &e.locks }),
		cell.Invoke(func(db *statedb.DB) error {
			tbl, err := statedb.NewTable(db, "objects", setIDIndex)
			e.db, e.tbl = db, &casCounter[*setObject]{RWTable: tbl}
			return err
		}),
	}
	for i := range n {
		rec := &multiReconciler{name: fmt.Sprintf("r%d", i), target: newMultiTarget(objects)}
		e.recs = append(e.recs, rec)
		cells = append(cells, cell.Module("bench-"+rec.name, "Benchmark reconciler "+rec.name,
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, up upstream.Params, jobs job.Group) error {
				return e.register(rec, p, up, jobs)
			}),
		))
	}
	e.h = hive.New(cells...)
	if err := e.h.Start(quietLog, ctx); err != nil {
		return nil, fmt.Errorf("starting %s hive: %w", im, err)
	}
	return e, nil
}

func (e *multiEnv) register(rec *multiReconciler, p reconciler.Params, up upstream.Params, jobs job.Group) error {
	name := rec.name
	switch e.im {
	case implConverge:
		r, err := reconciler.Register(p, e.tbl, (*setObject).clone, nil, nil, rec.target, nil,
			reconciler.WithName(name), reconciler.WithPruning(0),
			reconciler.WithStatusSet(func(o *setObject) status.Set { return o.conv },
				func(o *setObject, s status.Set) *setObject { o.conv = s; return o }))
		if err != nil {
			return err
		}
		rec.wait = func(ctx context.Context, rev statedb.Revision) error {
			_, _, err := r.WaitUntilReconciled(ctx, rev)
			return err
		}
	case implUpstream:
		r, err := upstream.Register(up, e.tbl, (*setObject).clone,
			func(o *setObject, s upstream.Status) *setObject { o.up = o.up.Set(name, s); return o },
			func(o *setObject) upstream.Status { return o.up.Get(name) },
			rec.target, nil, upstream.WithoutPruning())
		if err != nil {
			return err
		}
		rec.wait = func(ctx context.Context, rev statedb.Revision) error {
			_, _, err := r.WaitUntilReconciled(ctx, rev)
			return err
		}
	case implFloor:
		switch {
		case !e.oneCommit:
			jobs.Add(job.OneShot("floor", func(ctx context.Context, _ cell.Health) error { return e.floor(ctx, rec) }))
		case rec == e.recs[0]:
			jobs.Add(job.OneShot("floor-one-commit", func(ctx context.Context, _ cell.Health) error { return e.floorOneCommit(ctx) }))
		}
		rec.wait = func(context.Context, statedb.Revision) error { return nil } // waitAllDone scans
	default:
		return fmt.Errorf("the multi workload has no %s run", e.im)
	}
	return nil
}

// floor is the least one of several reconcilers sharing a status set can
// do: read the changes, and write each object pending for rec back as Done
// for rec, 1000 per write transaction, with a compare-and-swap; if another
// wrote the object meanwhile and it is still pending for rec with the same
// status, write over it. Each object it marks is put in rec's target
// directly: it calls no operation, keeps no retries, no metrics, no health.
func (e *multiEnv) floor(ctx context.Context, rec *multiReconciler) error {
	wtxn := e.db.WriteTxn(e.tbl)
	changes, err := e.tbl.Changes(wtxn)
	wtxn.Commit()
	if err != nil {
		return err
	}
	defer changes.Close()
	type item struct {
		obj *setObject
		rev statedb.Revision
	}
	batch := make([]item, 0, 1000)
	done := func(o *setObject) *setObject {
		c := *o
		c.conv = c.conv.Set(rec.name, status.Done())
		return &c
	}
	flush := func() {
		if len(batch) == 0 {
			return
		}
		for _, it := range batch {
			_ = rec.target.Update(ctx, nil, it.rev, it.obj)
		}
		wtxn := e.db.WriteTxn(e.tbl)
		for _, it := range batch {
			cur, found, err := e.tbl.CompareAndSwap(wtxn, it.rev, done(it.obj))
			if errors.Is(err, statedb.ErrRevisionNotEqual) && found && cur.conv.Get(rec.name).ID() == it.obj.conv.Get(rec.name).ID() {
				e.tbl.Insert(wtxn, done(cur))
			}
		}
		wtxn.Commit()
		clear(batch)
		batch = batch[:0]
	}
	for {
		changed, watch := changes.Next(e.db.ReadTxn())
		for c, rev := range changed {
			if c.Deleted || c.Object.conv.Get(rec.name).Kind != status.KindPending {
				continue
			}
			batch = append(batch, item{c.Object, rev})
			if len(batch) == cap(batch) {
				flush()
			}
		}
		flush()
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		}
	}
}

// floorOneCommit is the floor of a design in which the reconcilers of a
// table share one committer: one loop reads the changes as each floor loop
// does, puts each object pending for any reconciler in that reconciler's
// target, and writes it back once, Done for all of them (one copy of the
// set, status.Set.SetAll), 1000 objects per write transaction. It is e.floor with the work of every reconciler in
// one loop; the inserter writes only new objects, so its compare-and-swaps
// do not conflict, and if one did, the object's newer change is read next.
func (e *multiEnv) floorOneCommit(ctx context.Context) error {
	wtxn := e.db.WriteTxn(e.tbl)
	changes, err := e.tbl.Changes(wtxn)
	wtxn.Commit()
	if err != nil {
		return err
	}
	defer changes.Close()
	type item struct {
		obj *setObject // with every status Done
		rev statedb.Revision
	}
	batch := make([]item, 0, 1000)
	dones := make([]status.Entry, 0, len(e.recs))
	flush := func() {
		if len(batch) == 0 {
			return
		}
		wtxn := e.db.WriteTxn(e.tbl)
		for _, it := range batch {
			_, _, _ = e.tbl.CompareAndSwap(wtxn, it.rev, it.obj)
		}
		wtxn.Commit()
		clear(batch)
		batch = batch[:0]
	}
	for {
		changed, watch := changes.Next(e.db.ReadTxn())
		for c, rev := range changed {
			if c.Deleted {
				continue
			}
			done := dones[:0] // one copy of the set for every name (status.Set.SetAll)
			for _, rec := range e.recs {
				if c.Object.conv.Get(rec.name).Kind != status.KindPending {
					continue
				}
				_ = rec.target.Update(ctx, nil, rev, c.Object)
				done = append(done, status.Entry{Name: rec.name, Status: status.Done()})
			}
			if len(done) == 0 {
				continue
			}
			o := *c.Object
			o.conv = o.conv.SetAll(done...)
			batch = append(batch, item{&o, rev})
			if len(batch) == cap(batch) {
				flush()
			}
		}
		flush()
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		}
	}
}

// multi runs n reconcilers of im on one table: see multiConfig. With
// oneCommit (the floor only) one loop does the work of all n.
func multi(ctx context.Context, cfg config, im impl, n int, oneCommit bool) (measurement, error) {
	m := newMeasurement()
	objects := cfg.multi.objects
	settle()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	e, err := startMulti(ctx, im, n, objects, oneCommit)
	if err != nil {
		return m, err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = e.h.Stop(quietLog, sctx)
	}()
	settle()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	locks0 := e.locks.read()
	t0 := time.Now()
	for id := 0; id < objects; {
		wtxn := e.db.WriteTxn(e.tbl)
		for end := min(id+cfg.txnSize, objects); id < end; id++ {
			o := &setObject{id: uint64(id)}
			if im == implUpstream {
				o.up = upstream.NewStatusSet()
			} else {
				o.conv = status.NewSet() // the floor's too
			}
			e.tbl.Insert(wtxn, o)
		}
		wtxn.Commit()
	}
	end, err := e.waitAllDone(ctx, objects)
	if err != nil {
		return m, err
	}
	d := end.Sub(t0)
	runtime.ReadMemStats(&after)
	locks := e.locks.read()
	nf := float64(objects)
	m.set("obj/s", nf/d.Seconds())
	m.set("B/obj", float64(after.TotalAlloc-before.TotalAlloc)/nf)
	m.set("allocs/obj", float64(after.Mallocs-before.Mallocs)/nf)
	m.set("conflicts/obj", float64(e.tbl.conflicts.Load())/nf)
	m.set("txns/obj", float64(locks.txns-locks0.txns)/nf)
	m.set("lock held", float64(locks.held-locks0.held)/float64(d))
	m.set("lock waiters", float64(locks.wait-locks0.wait)/float64(d))
	var updates int64
	for _, rec := range e.recs {
		updates += rec.target.updates.Load()
	}
	m.set("updates/obj", float64(updates)/nf/float64(n))
	return m, e.check(objects)
}

// waitAllDone waits until every object is Done in every reconciler and
// returns when it saw them so, the same way for both libraries.
// Upstream's WaitUntilReconciled cannot tell: a reconciler that has read
// past an insert may not have read the object yet, when another's status
// write came after the insert and its read stopped short of that write
// (converge's waits for such an object). So it waits until every target
// has held every object, for every reconciler to have read up to then,
// and then looks: it scans the table from the first object not seen Done,
// waits for that object to change if it is not, and goes on. The time
// returned is that of the snapshot in which the last scan found all Done.
func (e *multiEnv) waitAllDone(ctx context.Context, objects int) (time.Time, error) {
	for _, rec := range e.recs {
		select {
		case <-rec.target.full:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: %d of %d objects in the target of %q: %w", e.im, rec.target.held.Load(), objects, rec.name, ctx.Err())
		}
	}
	rev := e.tbl.Revision(e.db.ReadTxn())
	for _, rec := range e.recs {
		if err := rec.wait(ctx, rev); err != nil {
			return time.Time{}, fmt.Errorf("%s %s: %w", e.im, rec.name, err)
		}
	}
	from := uint64(0)
	for {
		at, txn := time.Now(), e.db.ReadTxn()
		var watch <-chan struct{}
		for o := range e.tbl.LowerBound(txn, setIDIndex.Query(from)) {
			if !e.allDone(o) {
				from = o.id
				_, _, watch, _ = e.tbl.GetWatch(txn, setIDIndex.Query(o.id))
				break
			}
		}
		if watch == nil {
			return at, nil
		}
		select {
		case <-watch:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: waiting for object %d to be Done in every reconciler: %w", e.im, from, ctx.Err())
		}
	}
}

// allDone reports whether o is Done in every reconciler.
func (e *multiEnv) allDone(o *setObject) bool {
	for _, rec := range e.recs {
		if !e.done(o, rec.name) {
			return false
		}
	}
	return true
}

func (e *multiEnv) done(o *setObject, name string) bool {
	if e.im == implUpstream {
		return o.up.Get(name).Kind == upstream.StatusKindDone
	}
	return o.conv.Get(name).Kind == status.KindDone
}

// check returns an error unless the table holds objects objects, each
// Done in every reconciler, and every target holds every object.
func (e *multiEnv) check(objects int) error {
	txn := e.db.ReadTxn()
	if got := e.tbl.NumObjects(txn); got != objects {
		return fmt.Errorf("%s: table holds %d objects, want %d", e.im, got, objects)
	}
	for o := range e.tbl.All(txn) {
		for _, rec := range e.recs {
			if !e.done(o, rec.name) {
				return fmt.Errorf("%s: object %d not Done for %q: converge %s, upstream %s", e.im, o.id, rec.name, o.conv, o.up)
			}
		}
	}
	for _, rec := range e.recs {
		for id := range rec.target.present {
			if !rec.target.present[id].Load() {
				return fmt.Errorf("%s: object %d missing from the target of %q", e.im, id, rec.name)
			}
		}
	}
	return nil
}

// printMulti prints the multi workload's table: for each count and library
// the medians, the ratio of converge to upstream and of each count to one
// reconciler, paired run by run. Every run checked that nothing was lost
// (a run that lost something ends the program with its error), so the
// last column says how many runs passed.
func printMulti(w io.Writer, o options, res results) {
	c := o.cfg.multi
	if len(c.counts) == 0 || res[multiCaseName(c.counts[0])] == nil {
		return
	}
	fmt.Fprintf(w, "\nSeveral reconcilers on one table (%s objects inserted %d per txn, one status set, one target each, no-op targets; medians over runs).\n", count(c.objects), o.cfg.txnSize)
	fmt.Fprintln(w, "obj/s: until every object is Done in every reconciler; B/obj: allocated, the inserter included; conflicts/obj: status compare-and-swaps")
	fmt.Fprintln(w, "that found the object changed; updates/obj: Update calls per object and reconciler; txns/1k: write transactions on the table per 1000 objects,")
	fmt.Fprintln(w, "the inserter's included; lock held: share of the run a write transaction held the table's lock; waiters: write transactions waiting for it,")
	fmt.Fprintln(w, "on average over the run; ratios are paired run by run (median, min–max).")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "reconcilers\timpl\tobj/s\tvs %d\tB/obj\tconflicts/obj\tupdates/obj\ttxns/1k\tlock held\twaiters\tall Done, all in targets\t\n", c.counts[0])
	for _, n := range c.counts {
		cs := multiCaseName(n)
		for _, r := range []struct {
			cs, label string
			im        impl
		}{{cs, "converge", implConverge}, {cs, "upstream", implUpstream}, {cs, "floor", implFloor}, {multiOneCommitCaseName(n), "floor, one commit", implFloor}} {
			runs := len(res[r.cs][r.im]["obj/s"])
			if runs == 0 {
				continue
			}
			scale := "(reference)"
			if n != c.counts[0] {
				st := res.ratioStats(ratioDef{conv: sample{r.cs, r.im, "obj/s"}, ref: sample{multiCaseName(c.counts[0]), r.im, "obj/s"}})
				scale = fmt.Sprintf("%s (%s)", fmtRatio(st.median), st)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.0f B\t%.3f\t%.3f\t%.1f\t%.2f\t%.2f\tyes, %d of %d runs\t\n", n, r.label,
				fmtValue(unitRate, res.median(r.cs, r.im, "obj/s")), scale,
				res.median(r.cs, r.im, "B/obj"), res.median(r.cs, r.im, "conflicts/obj"), res.median(r.cs, r.im, "updates/obj"),
				1000*res.median(r.cs, r.im, "txns/obj"), res.median(r.cs, r.im, "lock held"), res.median(r.cs, r.im, "lock waiters"), runs, runs)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, n := range c.counts {
		cs := multiCaseName(n)
		for _, d := range []ratioDef{
			{conv: sample{cs, implConverge, "obj/s"}, ref: sample{cs, implUpstream, "obj/s"}},
			{conv: sample{cs, implConverge, "B/obj"}, ref: sample{cs, implUpstream, "B/obj"}},
			{conv: sample{cs, implConverge, "obj/s"}, ref: sample{cs, implFloor, "obj/s"}},
			{conv: sample{multiOneCommitCaseName(n), implFloor, "obj/s"}, ref: sample{cs, implFloor, "obj/s"}},
		} {
			st := res.ratioStats(d)
			if st.n == 0 || math.IsNaN(st.median) {
				continue
			}
			conv := d.conv.im.String()
			if d.conv.c != d.ref.c {
				conv += " one commit"
			}
			fmt.Fprintf(w, "  %d reconciler(s), %s/%s %s: %s (%s)\n", n, conv, d.ref.im, d.conv.metric, fmtRatio(st.median), st)
		}
	}
}
