package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	upstream "github.com/cilium/statedb/reconciler"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// setup describes one run's hive. Zero values mean each library's default.
type setup struct {
	impl        impl
	batch       bool          // give the reconciler BatchOperations
	concurrency int           // converge only: WithConcurrency(n) if n > 0
	statusIndex bool          // add the library's status index (for waitAllDone)
	retryMin    time.Duration // WithRetry(retryMin, retryMax) if set
	retryMax    time.Duration
	refresh     time.Duration // WithRefreshing(refresh, unlimited) if set
	noPrune     bool          // periodic pruning off

	objects      int           // ids are 0..objects-1 (sizes failOnce bookkeeping)
	preload      int           // objects inserted as long-Done before the reconciler starts
	updateDelay  time.Duration // each Update sleeps this long
	failOnce     bool          // first Update of each object fails
	failBelow    int           // every Update of an object with a lower id fails
	preloadAs    preloadKind   // status of the preloaded objects
	metrics      metricsVariant
	tables       bool // include tables.Cell (converge only)
	deps         bool // a "deps" table, and WithDependency on it (converge only)
	updateTarget int  // ops.reached closes after this many updates
	heapAtReady  bool // start env.heap when the preload is done, before the jobs

	outage           *outageTarget // if set, the operations instead of ops (outage.go)
	breaker          int           // converge only: WithCircuitBreaker(breaker, retryMin, nil) if > 0
	priorityLowEvery int           // converge only, if set: WithPriority, low for one object in this many
	driftChecks      *driftCounter // converge only, if set: WithDriftCheck, every object in sync (drift.go)
}

// env is a started hive with one table and (unless implNone) something
// reconciling it.
type env struct {
	s     setup
	h     *hive.Hive
	db    *statedb.DB
	tbl   statedb.RWTable[*object]
	deps  statedb.RWTable[*object] // with setup.deps
	ops   *ops
	conv  reconciler.Reconciler[*object]
	up    upstream.Reconciler[*object]
	ready time.Time    // when the preload finished, just before the jobs started
	heap  *heapSampler // with setup.heapAtReady: started at ready
}

var quietLog = slog.New(slog.DiscardHandler)

func (s setup) convOptions() []reconciler.Option {
	var o []reconciler.Option
	if s.concurrency > 0 {
		o = append(o, reconciler.WithConcurrency(s.concurrency))
	}
	if s.retryMin > 0 {
		o = append(o, reconciler.WithRetry(s.retryMin, s.retryMax))
	}
	if s.refresh > 0 {
		o = append(o, reconciler.WithRefreshing(s.refresh, rate.NewLimiter(rate.Inf, 1)))
	}
	if s.noPrune {
		o = append(o, reconciler.WithPruning(0))
	}
	if m := s.metrics.new(); m != nil {
		o = append(o, reconciler.WithMetrics(m))
	}
	if s.priorityLowEvery > 0 {
		o = append(o, prioritized(s.priorityLowEvery))
	}
	if s.breaker > 0 {
		o = append(o, reconciler.WithCircuitBreaker(s.breaker, s.retryMin, nil))
	}
	if s.driftChecks != nil {
		o = append(o, s.driftChecks.option())
	}
	return o
}

func (s setup) upOptions() []upstream.Option {
	var o []upstream.Option
	if s.retryMin > 0 {
		o = append(o, upstream.WithRetry(s.retryMin, s.retryMax))
	}
	if s.refresh > 0 {
		o = append(o, upstream.WithRefreshing(s.refresh, rate.NewLimiter(rate.Inf, 1)))
	}
	if s.noPrune {
		o = append(o, upstream.WithoutPruning())
	}
	return o
}

// start builds and starts a hive for s: statedb, jobs, and a module with the
// table and the reconciler (or the floor loop).
func start(ctx context.Context, s setup) (*env, error) {
	e := &env{s: s, ops: newOps(s)}
	var secondary []statedb.Indexer[*object]
	if s.statusIndex {
		switch s.impl {
		case implUpstream:
			secondary = append(secondary, upStatusIndex)
		default:
			secondary = append(secondary, convStatusIndex)
		}
	}
	cells := []cell.Cell{cell.SimpleHealthCell, statedb.Cell, job.Cell}
	if s.tables {
		cells = append(cells, tables.Cell)
	}
	e.h = hive.New(append(cells,
		cell.Module("bench", "Benchmark table and reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, lc cell.Lifecycle) error {
				tbl, err := statedb.NewTable(db, "objects", idIndex, secondary...)
				if err != nil {
					return err
				}
				e.db, e.tbl = db, tbl
				if s.deps {
					if e.deps, err = statedb.NewTable(db, "deps", idIndex); err != nil {
						return err
					}
				}
				// Appended before the reconciler's jobs, so it runs first.
				lc.Append(cell.Hook{OnStart: func(cell.HookContext) error {
					e.preload()
					if s.heapAtReady {
						settle()
						e.heap = startHeapSampler()
					}
					e.ready = time.Now()
					return nil
				}})
				return nil
			}),
			cell.Invoke(func(p reconciler.Params, up upstream.Params, jobs job.Group) error {
				return e.register(p, up, jobs)
			}),
		))...,
	)
	if err := e.h.Start(quietLog, ctx); err != nil {
		return nil, fmt.Errorf("starting %s hive: %w", s.impl, err)
	}
	return e, nil
}

func (e *env) register(p reconciler.Params, up upstream.Params, jobs job.Group) error {
	var err error
	switch e.s.impl {
	case implConverge:
		var ops reconciler.Operations[*object] = e.ops
		var batch reconciler.BatchOperations[*object]
		switch {
		case e.s.outage != nil && e.s.batch:
			ops, batch = e.s.outage, convOutageBatch{e.s.outage}
		case e.s.outage != nil:
			ops = e.s.outage
		case e.s.batch:
			batch = convBatch{e.ops}
		}
		opts := e.s.convOptions()
		if e.s.deps {
			opts = append(opts, e.depsOption())
		}
		e.conv, err = reconciler.Register(p, e.tbl, (*object).clone, convSet, convGet, ops, batch, opts...)
	case implUpstream:
		var ops upstream.Operations[*object] = e.ops
		var batch upstream.BatchOperations[*object]
		switch {
		case e.s.outage != nil && e.s.batch:
			ops, batch = e.s.outage, upOutageBatch{e.s.outage}
		case e.s.outage != nil:
			ops = e.s.outage
		case e.s.batch:
			batch = upBatch{e.ops}
		}
		e.up, err = upstream.Register(up, e.tbl, (*object).clone, upSet, upGet, ops, batch, e.s.upOptions()...)
	case implFloor:
		jobs.Add(job.OneShot("floor", e.floor))
	}
	return err
}

// floor is the least work a StateDB reconciler can do, done the fastest
// way we know: it holds one write transaction while it reads the changes,
// writes each pending object back as Done with a compare-and-swap as it
// reads it, and commits every 1000 objects and when the changes run out.
// It calls no operation, keeps no retries, no metrics, no health. (Until
// 2026-11-26 the floor read the changes first and then wrote them, 1000
// per write transaction; the figures of earlier runs are against that
// one, about 15% slower.)
func (e *env) floor(ctx context.Context, _ cell.Health) error {
	wtxn := e.db.WriteTxn(e.tbl)
	changes, err := e.tbl.Changes(wtxn)
	wtxn.Commit()
	if err != nil {
		return err
	}
	defer changes.Close()
	for {
		wtxn := e.db.WriteTxn(e.tbl)
		changed, watch := changes.Next(wtxn)
		n := 0
		for c, rev := range changed {
			if c.Deleted || c.Object.conv.Kind != status.KindPending {
				continue
			}
			o := *c.Object
			o.conv = status.Done()
			e.tbl.CompareAndSwap(wtxn, rev, &o)
			if n++; n == 1000 {
				wtxn.Commit()
				wtxn, n = e.db.WriteTxn(e.tbl), 0
			}
		}
		wtxn.Commit()
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		}
	}
}

// preloadKind is the status of the objects preloaded before the reconciler
// starts.
type preloadKind int

const (
	preloadOldDone     preloadKind = iota // Done an hour ago
	preloadPending                        // a backlog, as after a restart
	preloadRefreshing                     // marked by a refresh sweep just now
	preloadDone                           // Done just now, as a restart restores it
	preloadSomePending                    // Done just now, one in a hundred Pending
)

// preload inserts s.preload objects with the status s.preloadAs, in write
// transactions of 1000, before the reconciler starts.
func (e *env) preload() {
	const txnSize = 1000
	old := time.Now().Add(-time.Hour)
	for id := 0; id < e.s.preload; {
		wtxn := e.db.WriteTxn(e.tbl)
		for end := min(id+txnSize, e.s.preload); id < end; id++ {
			o := &object{id: uint64(id)}
			switch {
			case e.s.preloadAs == preloadPending, e.s.preloadAs == preloadSomePending && id%100 == 0:
				o = e.pending(uint64(id))
			case e.s.impl == implUpstream && e.s.preloadAs == preloadRefreshing:
				o.up = upstream.StatusRefreshing()
			case e.s.preloadAs == preloadRefreshing:
				o.conv = status.Refreshing()
			case e.s.impl == implUpstream:
				o.up = upstream.StatusDone()
				if e.s.preloadAs == preloadOldDone {
					o.up.UpdatedAt = old
				}
			default:
				o.conv = status.Done()
				if e.s.preloadAs == preloadOldDone {
					o.conv.UpdatedAt = old
				}
			}
			e.tbl.Insert(wtxn, o)
		}
		wtxn.Commit()
	}
}

func (e *env) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.h.Stop(quietLog, ctx)
}

// pending returns a new object asking the run's reconciler for work.
func (e *env) pending(id uint64) *object {
	o := &object{id: id}
	if e.s.impl == implUpstream {
		o.up = upstream.StatusPending()
	} else {
		o.conv = status.Pending()
	}
	return o
}

func (e *env) isDone(o *object) bool {
	if e.s.impl == implUpstream {
		return o.up.Kind == upstream.StatusKindDone
	}
	return o.conv.Kind == status.KindDone
}

// insert writes pending objects with ids [from, to) in write transactions
// of txnSize.
// deleteAll deletes objects 0..n-1 in transactions of txnSize.
func (e *env) deleteAll(n, txnSize int) {
	for id := 0; id < n; {
		wtxn := e.db.WriteTxn(e.tbl)
		for end := min(id+txnSize, n); id < end; id++ {
			e.tbl.Delete(wtxn, &object{id: uint64(id)})
		}
		wtxn.Commit()
	}
}

func (e *env) insert(from, to, txnSize int) {
	for id := from; id < to; {
		wtxn := e.db.WriteTxn(e.tbl)
		for end := min(id+txnSize, to); id < end; id++ {
			e.tbl.Insert(wtxn, e.pending(uint64(id)))
		}
		wtxn.Commit()
	}
}
