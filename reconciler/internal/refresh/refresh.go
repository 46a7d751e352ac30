// Package refresh is the reconciler's refresh job (WithRefreshing): it
// marks Refreshing the Done objects whose status is older than the
// refresh interval, so that the reconcile job, which reads only the
// table's changes, takes them again. The same marking serves the re-checks
// the reconcile job finds due (RecheckAfter). See [Refresher].
//
// It writes to the reconciled table and nowhere else, each mark a
// compare-and-swap over the object as it was read, so that a write made
// meanwhile is never undone. It knows nothing of the reconcile job.
package refresh

import (
	"context"
	"fmt"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// batch is how many objects one write transaction marks.
const batch = 1000

// Settings is what the job reads of the options, as Configure posts them.
type Settings struct {
	Interval time.Duration // 0: refreshing is off
	Limiter  *rate.Limiter // paces the marks; nil: none
	RetryMax time.Duration // a failing limiter's sweep comes again after at most this
}

// Candidate is an object to mark, at the revision it was read at.
type Candidate[Obj any] struct {
	Obj Obj
	Rev statedb.Revision
}

// Config is what New needs. Marked and Span may be nil; the rest is
// required.
type Config[Obj any] struct {
	DB    *statedb.DB
	Table statedb.RWTable[Obj] // the reconciled table, whose objects are marked

	// Status reads the reconciler's status of an object; WithStatus
	// returns a copy of it carrying st (the object read is shared).
	Status     func(Obj) status.Status
	WithStatus func(obj Obj, st status.Status) Obj
	// NoKey is told of a marked copy StateDB did not store: WithStatus
	// left it without a primary key.
	NoKey func(Obj)
	Now   func() time.Time
	// Marked is told how many objects a write transaction marked, if any.
	Marked func(n int)

	// Settings returns the settings in force and a channel that receives
	// when they change.
	Settings func() (Settings, <-chan struct{})
	// Paused returns whether sweeps are held, and a channel closed when
	// that changes (gate.Gate's State).
	Paused func() (bool, <-chan struct{})
	// Span starts the span of a sweep; nil, or a nil span, traces none.
	Span func(ctx context.Context) (context.Context, tracing.Span)
	// Swept is told the time each sweep ended.
	Swept func(at time.Time)
	// Failed is told of a limiter that fails, to log it.
	Failed func(err error)
}

// Refresher marks objects Refreshing: Run is the refresh job, Mark the
// marking it shares with the re-checks. Make one with New; the zero value
// is not usable. Mark may be called from any goroutine, Run from one at a
// time.
type Refresher[Obj any] struct {
	cfg Config[Obj]
}

// New returns the refresher of cfg.
func New[Obj any](cfg Config[Obj]) *Refresher[Obj] { return &Refresher[Obj]{cfg: cfg} }

// Run is the refresh job: it sweeps every refresh interval, and at once
// when the settings change, until ctx ends; it returns nil then. While
// paused it waits for Resume, health saying so. Each run begins at the
// table's first revision.
func (f *Refresher[Obj]) Run(ctx context.Context, health cell.Health) error {
	c := &f.cfg
	var last statedb.Revision
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		set, changed := c.Settings()
		if set.Interval <= 0 {
			// The job runs anyway, so that the health tree has the same
			// children as the StateDB reconciler's, whose refresh is on by
			// default: scripts and dashboards read it by job name.
			// Configure may turn it on.
			health.OK("Refreshing is off")
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				timer.Reset(0)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-changed: // Configure: sweep now, with the new settings
			timer.Reset(0)
			continue
		}
		if !f.waitWhilePaused(ctx, health) {
			return nil
		}
		sweepCtx, span := ctx, tracing.Span(nil)
		if c.Span != nil {
			sweepCtx, span = c.Span(ctx)
		}
		wait, marked, err := f.sweep(sweepCtx, &last, set)
		if span != nil {
			span.End(tracing.End{Err: err, Marked: marked})
		}
		if ctx.Err() != nil {
			return nil
		}
		c.Swept(c.Now())
		timer.Reset(wait)
		if err != nil {
			// The limiter was made unusable while running: the sweep
			// stopped where it was and goes on at the next one.
			c.Failed(err)
			health.Degraded(fmt.Sprintf("Refresh limiter failing; next refresh in %s", wait.Round(time.Millisecond)), err)
			continue
		}
		health.OK(fmt.Sprintf("Next refresh in %s", wait.Round(time.Millisecond)))
	}
}

// waitWhilePaused returns once sweeps are not held (true), or ctx ended
// (false).
func (f *Refresher[Obj]) waitWhilePaused(ctx context.Context, health cell.Health) bool {
	for {
		paused, changed := f.cfg.Paused()
		if !paused {
			return true
		}
		health.OK("Paused")
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// sweep walks the objects in revision order from last+1, marking the
// stale Done ones Refreshing, and returns when to sweep next. Objects are
// visited in the order they were last written, so the walk stops at the
// first one that is not yet stale. It returns how many it marked, and an
// error if the limiter's Wait failed for another reason than ctx ending.
func (f *Refresher[Obj]) sweep(ctx context.Context, last *statedb.Revision, set Settings) (wait time.Duration, marked int, err error) {
	c := &f.cfg
	interval := set.Interval
	wait = interval
	now := c.Now()
	var cands []Candidate[Obj]
	txn := c.DB.ReadTxn()
	for obj, rev := range c.Table.LowerBound(txn, statedb.ByRevision[Obj](*last+1)) {
		st := c.Status(obj)
		if age := now.Sub(st.UpdatedAt); age < interval {
			wait = interval - age
			break
		}
		*last = rev
		if st.Kind != status.KindDone {
			continue
		}
		if lim := set.Limiter; lim != nil && !lim.Allow() {
			marked += f.Mark(cands)
			cands = cands[:0]
			if err := lim.Wait(ctx); err != nil {
				*last = rev - 1 // this object is still to be marked
				if ctx.Err() != nil {
					return wait, marked, nil
				}
				return min(wait, set.RetryMax), marked, fmt.Errorf("refresh limiter: %w", err)
			}
		}
		cands = append(cands, Candidate[Obj]{obj, rev})
		if len(cands) == batch {
			marked += f.Mark(cands)
			cands = cands[:0]
		}
	}
	return wait, marked + f.Mark(cands), nil
}

// Mark sets the candidates that have not changed since they were read to
// Refreshing, in one write transaction, and returns how many.
func (f *Refresher[Obj]) Mark(cands []Candidate[Obj]) int {
	if len(cands) == 0 {
		return 0
	}
	c := &f.cfg
	now := c.Now()
	wtxn := c.DB.WriteTxn(c.Table)
	marked := 0
	for _, cand := range cands {
		obj := c.WithStatus(cand.Obj, status.RefreshingAt(now))
		switch _, had, err := c.Table.CompareAndSwap(wtxn, cand.Rev, obj); {
		case err == nil && had:
			marked++
		case err == nil: // StateDB stored nothing: obj has no primary key
			c.NoKey(obj)
		}
	}
	wtxn.Commit()
	if marked > 0 && c.Marked != nil {
		c.Marked(marked)
	}
	return marked
}
