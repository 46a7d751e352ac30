package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/collect"
	"github.com/converge-go/converge/reconciler/internal/commit"
	"github.com/converge-go/converge/reconciler/internal/gate"
	"github.com/converge-go/converge/reconciler/internal/inforows"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/report"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// Register creates a reconciler for table and adds its jobs to
// params.JobGroup, so it starts and stops with the hive. Call it from a
// cell.Invoke (or a constructor) of the module that owns the table.
//
// clone copies an object before it is handed to Update, which may then
// modify it. setStatus returns the object with the reconciler's status
// replaced (it is given a clone and may modify it in place); getStatus reads
// that status. Passing them as functions lets one object carry the statuses
// of several reconcilers, for example in a [status.Set]; for a set, pass
// nil for both and give [WithStatusSet] instead.
//
// ops applies objects one at a time and prunes. batchOps may be nil; if
// not, it is used instead of ops for updates and deletes, and if it
// implements [BatchProcessor], ProcessBatch is called instead of
// DeleteBatch and UpdateBatch. ops may be nil if batchOps is not: the batch
// operations then serve alone, and prune with their own Prune method (of
// [Operations.Prune]'s signature) if they have one. Without one, pruning
// must be turned off with WithPruning(0), and [Reconciler.Prune] does
// nothing.
//
// Register returns an error wrapping [ErrInvalidConfig] if an argument is
// nil (ops and batchOps may not both be), if nothing can prune while
// pruning is on, or if an option is out of range. It does not block.
func Register[Obj any](
	params Params,
	table statedb.RWTable[Obj],
	clone func(Obj) Obj,
	setStatus func(Obj, status.Status) Obj,
	getStatus func(Obj) status.Status,
	ops Operations[Obj],
	batchOps BatchOperations[Obj],
	opts ...Option,
) (Reconciler[Obj], error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("nil Option: %w", ErrInvalidConfig)
		}
		opt(&o)
	}
	if err := checkArgs(params, table, clone, setStatus, getStatus, o.statusSet != nil, ops != nil || batchOps != nil); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	target := newTarget(ops, batchOps)
	if target.pruner == nil && o.pruneInterval > 0 {
		return nil, fmt.Errorf("reconciler.Register: %w: no Operations, and the BatchOperations (%T) have no Prune method to prune with; "+
			"give them one with Operations.Prune's signature, or turn pruning off with WithPruning(0)", ErrInvalidConfig, batchOps)
	}
	if o.metrics == nil {
		o.metrics = params.DefaultMetrics
	}
	if o.metrics == nil {
		o.metrics = metrics.NewUnpublishedExpVar()
	}
	log := params.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.name != "" {
		log = log.With("reconciler", o.name)
	}
	r := &reconciler[Obj]{
		opts:          o,
		log:           log,
		db:            params.DB,
		moduleID:      params.ModuleID,
		target:        target,
		rep:           reporter[Obj]{metrics: report.NewObservers(o.metrics), progress: report.NewProgress()},
		pruneRequests: make(chan struct{}, 1),
		gate:          gate.New(),
		queue:         keyqueue.New[Obj](inforows.DisplayKey),
		clock:         clock{now: time.Now, rand: rand.Float64},
		objects: work.Objects[Obj]{
			Table:     table,
			Primary:   table.PrimaryIndexer(),
			Clone:     clone,
			SetStatus: setStatus,
			GetStatus: getStatus,
		},
	}

	r.settings = newSettings(o)
	if o.breakerFailures > 0 {
		r.breaker = breaker.New(breaker.Config{
			Threshold: o.breakerFailures, AboutTarget: r.classifier(), RetryAfter: work.RetryDelay,
			ProbeMin: o.breakerBackoff, ProbeMax: o.retryMax, Gate: r.gate, OnTransit: r.logBreaker,
		})
	}

	// The feed begins now, not when the job first runs, so that no delete
	// between registration and start is missed.
	r.collect = collect.New(collect.Config[Obj]{DB: r.db, Objects: &r.objects, Queue: r.queue, Log: r.log}, r.opts.collectLimits())
	writer, id := params.Tables, metrics.Key(r.moduleID, o.name)
	if t, ok := writer.(*tables.Tables); ok && t == nil {
		writer = nil // a caller's optional *tables.Tables, not provided
	}
	if r.rep.info = inforows.New[Obj, *keyqueue.State[Obj]](writer, id); r.rep.info != nil {
		r.queue.Configure(keyqueue.Settings[Obj]{FailureChanged: r.rep.info.Changed})
	}

	if o.statusSet != nil {
		if err := o.statusSet(r); err != nil {
			return nil, err
		}
	}
	if err := r.applyPriority(); err != nil {
		return nil, err
	}
	if err := r.applyDriftCheck(); err != nil {
		return nil, err
	}
	if err := r.applyPruneGuard(); err != nil {
		return nil, err
	}
	depJobs, err := registerDependencies(r)
	if err != nil {
		return nil, err
	}
	var settled func(*work.Op[Obj])
	if r.target.drift != nil {
		settled = r.driftSettled
	}
	r.commit = commit.New(commit.Config[Obj]{
		DB: r.db, Objects: &r.objects, Queue: r.queue, Log: r.log,
		Rand:   func() float64 { return r.clock.rand() }, // a test's, set after Register
		Slices: r.rep.metrics.Commit != nil, DriftSettled: settled,
	}, r.opts.commitPolicy())
	// Last, so that a Register refused for another reason claims nothing.
	if c, ok := writer.(interface{ Claim(id string) error }); ok {
		if err := c.Claim(id); err != nil {
			return nil, fmt.Errorf("reconciler.Register: %w: give each reconciler of module %s its own WithName: %w", err, r.moduleID, ErrInvalidConfig)
		}
	}
	params.JobGroup.Add(job.OneShot(r.jobName("reconcile"), r.run))
	params.JobGroup.Add(depJobs...)
	params.JobGroup.Add(job.OneShot(r.jobName("refresh"), r.newRefresher().Run))
	return r, nil
}

func checkArgs[Obj any](
	params Params,
	table statedb.RWTable[Obj],
	clone func(Obj) Obj,
	setStatus func(Obj, status.Status) Obj,
	getStatus func(Obj) status.Status,
	inSet bool, // WithStatusSet
	haveOps bool,
) error {
	var errs []error
	missing := func(ok bool, what string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must not be nil", what))
		}
	}
	missing(params.DB != nil, "Params.DB")
	missing(params.JobGroup != nil, "Params.JobGroup")
	missing(table != nil, "table")
	missing(clone != nil, "clone function")
	if inSet {
		if setStatus != nil || getStatus != nil {
			errs = append(errs, errors.New("setStatus and getStatus must be nil with WithStatusSet, which reads and writes the status"))
		}
	} else {
		missing(setStatus != nil, "setStatus function")
		missing(getStatus != nil, "getStatus function")
	}
	if !haveOps {
		errs = append(errs, errors.New("Operations must not be nil when BatchOperations is nil"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("reconciler.Register: %w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// WaitUntilReconciled implements Reconciler.
func (r *reconciler[Obj]) WaitUntilReconciled(ctx context.Context, untilRevision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	return r.rep.progress.Wait(ctx, untilRevision)
}

// Pause implements Reconciler.
func (r *reconciler[Obj]) Pause() { r.gate.SetPaused(true) }

// Resume implements Reconciler.
func (r *reconciler[Obj]) Resume() { r.gate.SetPaused(false) }

// classifier returns what tells the circuit breaker a failure is about the
// target: not terminal, and WithCircuitBreaker's isTargetError if given,
// with its panics recovered unless WithoutPanicRecovery: a panic is logged with its
// stack and the error taken as not about the target.
func (r *reconciler[Obj]) classifier() func(error) bool {
	user := r.opts.breakerIsTarget
	if user == nil {
		return func(err error) bool { return !IsTerminal(err) }
	}
	if !r.opts.recoverPanics {
		return func(err error) bool { return !IsTerminal(err) && user(err) }
	}
	return func(err error) (about bool) {
		defer func() {
			if v := recover(); v != nil {
				_ = r.recovered("circuit breaker's isTargetError", v)
				about = false
			}
		}()
		return !IsTerminal(err) && user(err)
	}
}
