package reconciler

import (
	"strings"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/breaker"
	"github.com/converge-go/converge/reconciler/internal/commit"
	"github.com/converge-go/converge/reconciler/internal/executor"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/prune"
	"github.com/converge-go/converge/reconciler/internal/report"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tables"
)

// report is the last stage of a round: it counts the figures of the
// commit c, and publishes progress for WaitUntilReconciled, metrics, the
// reconciler's rows in the tables of Params.Tables, and health.
func (r *reconciler[Obj]) report(txn statedb.ReadTxn, ops []work.Op[Obj], c commit.Outcome, load executor.Load, p *prune.Schedule, now time.Time, paused bool) {
	r.rep.committed(r.moduleID, r.opts.name, c.Figures)
	lc := r.queue
	f, lows := lc.Figures(), lc.Lows() // read once: the round is over
	inFlight := f.Active
	failing := f.Retrying
	if c.Committed > 0 || failing != r.rep.reported.failing {
		r.rep.metrics.ReconciliationErrors(r.moduleID, r.opts.name, c.Failed, failing)
	}
	if r.rep.metrics.Queue != nil && (failing != r.rep.reported.failing || inFlight != r.rep.reported.inFlight) {
		r.rep.metrics.Queue.QueueLength(r.moduleID, r.opts.name, failing, inFlight)
	}
	r.rep.reported.failing, r.rep.reported.inFlight = failing, inFlight

	var brk breaker.State
	if r.breaker != nil {
		brk = r.breaker.State()
	}
	var oldest time.Time
	if r.rep.metrics.Round != nil || r.rep.info != nil {
		oldest = lows.Since
	}
	if r.rep.metrics.Round != nil {
		var age time.Duration
		if !oldest.IsZero() {
			age = now.Sub(oldest)
		}
		retries := 0
		for i := range ops {
			if s := ops[i].S; s != nil && s.View().Attempts > 0 {
				retries++
			}
		}
		r.rep.metrics.Round.Round(r.moduleID, r.opts.name, metrics.RoundStats{
			Adds:           len(ops),
			Retries:        retries,
			Depth:          load.Waiting + f.Queued + f.Parked,
			Retrying:       failing,
			InFlight:       inFlight,
			OldestPending:  age,
			UnfinishedWork: load.Unfinished,
			LongestRunning: load.Longest,
			Workers:        r.opts.concurrency,
			BusyWorkers:    load.Busy,
			BreakerOpen:    brk.Open,
			BreakerOpened:  brk.Openings,
		})
	}

	pruneErr, heldErr := p.Errs()
	state := r.rep.health.Update(report.HealthState{
		GateErr:      p.Tables.Err(),
		Paused:       paused,
		Failing:      failing,
		RetryVersion: lc.Figures().Version,
		PruneErr:     pruneErr,
		LimiterErr:   r.rep.limiterErr,
		BreakerErr:   brk.Err,
		PruneHeld:    heldErr,
	}, func() int { return r.objects.Table.NumObjects(txn) }, lc.Errors)

	if r.rep.info != nil {
		info := r.infoRow(p, state, r.objects.Table.NumObjects(txn), failing, inFlight, load.Busy, oldest)
		if brk.Open {
			info.TargetFailingSince, info.TargetError = brk.Since, brk.Err.Error()
		}
		r.rep.info.Write(info)
	}

	// Progress last, so that a WaitUntilReconciled that returns sees the
	// round's figures published; and only once the statuses are in the
	// table (see commit.Committer.Landed).
	if r.commit.Landed() != nil && r.progressOwed() {
		return
	}
	r.rep.progress.Update(r.progressRev(lows), lows.Retry)
}

// reportPrune is the report of a prune: health, with the prune's outcome,
// and the reconciler's row of the reconcilers table as the last round
// wrote it (see loop.reported) with the prune's figures and the state
// health reports. The prune reported its metrics; the rest is the next
// round's to report.
func (r *reconciler[Obj]) reportPrune(p *prune.Schedule) {
	lc := r.queue
	f := lc.Figures()
	paused, _ := r.gate.State()
	var breakerErr error
	if r.breaker != nil {
		breakerErr = r.breaker.State().Err
	}
	pruneErr, heldErr := p.Errs()
	state := r.rep.health.Update(report.HealthState{
		GateErr:      p.Tables.Err(),
		Paused:       paused,
		Failing:      f.Retrying,
		RetryVersion: f.Version,
		PruneErr:     pruneErr,
		LimiterErr:   r.rep.limiterErr,
		BreakerErr:   breakerErr,
		PruneHeld:    heldErr,
	}, func() int { return r.objects.Table.NumObjects(r.db.ReadTxn()) }, lc.Errors)
	if r.rep.info != nil {
		row := r.rep.info.Last()
		row.State, row.DriftRepaired = state, uint64(r.rep.totals.RefreshRepaired+p.Repaired())
		p.Info(&row)
		r.rep.info.WriteRow(row) // the failures' rows wait for the next round's report
	}
}

// reportWaiting says, while the loop waits for the tables of
// WithStartAfter (waiting) to be initialized, that it does, or that it is
// paused, in health and the reconcilers table. The first round reports
// anew.
func (r *reconciler[Obj]) reportWaiting(txn statedb.ReadTxn, waiting []string, paused bool, p *prune.Schedule) {
	msg, state := "Waiting for tables to be initialized: "+strings.Join(waiting, ", "), tables.StateWaiting
	if paused {
		msg, state = "Paused", tables.StatePaused // as when running: Paused says all
	}
	r.rep.health.OK(msg)
	if r.rep.info != nil {
		lc := r.queue
		r.rep.info.Write(r.infoRow(p, state, r.objects.Table.NumObjects(txn), lc.Figures().Retrying, 0, 0, lc.Lows().Since))
	}
}

// reportStopped tells the metrics that nothing runs or waits to run any
// more: the loop stopped. Failing objects still count.
func (r *reconciler[Obj]) reportStopped() {
	failing := r.queue.Figures().Retrying
	if r.rep.metrics.Queue != nil {
		r.rep.metrics.Queue.QueueLength(r.moduleID, r.opts.name, failing, 0)
	}
	if r.rep.metrics.Round != nil {
		r.rep.metrics.Round.Round(r.moduleID, r.opts.name, metrics.RoundStats{Retrying: failing, Workers: r.opts.concurrency, BreakerOpened: r.breaker.State().Openings})
	}
	r.rep.reported.failing, r.rep.reported.inFlight = failing, 0
}

// progressRev returns the revision up to which every change read is
// done (see collect.Collector.Progress).
func (r *reconciler[Obj]) progressRev(lows keyqueue.Lows) statedb.Revision {
	return r.collect.Progress(lows)
}

// infoRow returns the reconciler's row of the reconcilers table.
func (r *reconciler[Obj]) infoRow(p *prune.Schedule, state tables.State, objects, failing, inFlight, busy int, oldest time.Time) tables.Info {
	t := &r.rep.totals
	info := tables.Info{
		Module:               r.moduleID.String(),
		Name:                 r.opts.name,
		State:                state,
		Objects:              objects,
		Succeeded:            t.Succeeded,
		Failed:               t.Failed,
		FailuresSinceSuccess: t.SinceSuccess,
		LastError:            t.LastErr,
		LastErrorAt:          t.LastErrAt,
		Retrying:             failing,
		InFlight:             inFlight,
		Workers:              r.opts.concurrency,
		BusyWorkers:          busy,
		OldestPending:        oldest,
		DriftRepaired:        uint64(t.RefreshRepaired + p.Repaired()),
	}
	if r.breaker != nil {
		info.BreakerOpenings = r.breaker.State().Openings
	}
	if r.target.drift != nil {
		info.DriftDetected = r.target.drift.Rows().Detected()
	}
	p.Info(&info)
	return info
}

// progressOwed reports whether the statuses of the last commit with the
// group are still to land, and if so owes the round's progress.
func (r *reconciler[Obj]) progressOwed() bool {
	select {
	case <-r.commit.Landed():
		r.rep.owed = false
		return false
	default:
		r.rep.owed = true
		return true
	}
}

// owedC is the loop's wake-up for progress owed: landed while owed, else
// nil.
func (r *reconciler[Obj]) owedC() <-chan struct{} {
	if r.rep.owed {
		return r.commit.Landed()
	}
	return nil
}

// publishOwed publishes the progress owed, the statuses having landed.
func (r *reconciler[Obj]) publishOwed() {
	r.rep.owed = false
	lows := r.queue.Lows()
	r.rep.progress.Update(r.progressRev(lows), lows.Retry)
}
