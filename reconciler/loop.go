package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/reconciler/internal/backoff"
	"github.com/converge-go/converge/reconciler/internal/executor"
	"github.com/converge-go/converge/reconciler/internal/prune"
	"github.com/converge-go/converge/reconciler/internal/refresh"
	"github.com/converge-go/converge/reconciler/internal/setup"
	"github.com/converge-go/converge/reconciler/internal/work"
	"github.com/converge-go/converge/tables"
	"github.com/converge-go/converge/tracing"
)

// loop is one run of the reconcile job: the executor, the prune schedule,
// the retry timer and whether the last round ran paused, which live as
// long as the run. Everything else it works on belongs to the reconciler
// (the change feed and the keys among it, kept across runs), whose stages
// (collect, operate, commit, prune, report) it runs in order.
type loop[Obj any] struct {
	r      *reconciler[Obj]
	exec   *executor.Executor[work.Op[Obj]]
	prune  prune.Schedule
	retry  *time.Timer // fires when the earliest retry is due (see armRetry)
	probes int         // probe rounds so far: whose turn the next probe is (see collectProbe)
	// probeTurn is set while the retry timer waits for the circuit
	// breaker's next probe: it must fire even with no room (see armRetry).
	probeTurn bool
	// reported is set once a round reported in this run: a prune's report
	// amends what the last round reported.
	reported bool
	// wasPaused is whether the last round ran paused: a round runs when
	// that changes.
	wasPaused bool
	setup     setup.Step              // WithSetup's step, before the first round (see setUp)
	refresher *refresh.Refresher[Obj] // marks the re-checks due
	// window is how far past the earliest retry the retry timer fires
	// (see armRetry): the retry minimum times the jitter, the smallest
	// of those in force since the retries waiting were timed, so that a
	// Configure raising them does not delay a retry timed before it; -1
	// while no retry waits.
	window time.Duration
}

// run is the reconcile job: it waits for something to do and runs a round,
// until ctx ends. It returns nil on a normal stop. A prune is a wake-up of
// its own, once it is due and neither Pause, a stop nor the circuit
// breaker holds it off: the loop prunes and reports the prune, and
// collects, operates and commits nothing. A wake-up of the prune
// schedule only tells it what fired; the round a wake-up would have run
// is run on the next, as what woke it is still there.
func (r *reconciler[Obj]) run(ctx context.Context, health cell.Health) error {
	if err := r.collect.Open(); err != nil {
		return fmt.Errorf("reading the changes of table %q: %w", r.objects.Table.Name(), err)
	}
	r.commit.Join() // the table's other reconcilers, to write with (see commit.Committer.Join)
	r.resetRun(health)
	window := retryWindow(r.opts) // of the retries carried over the stop
	r.applySettings()             // Configure's, while stopped
	l := &loop[Obj]{r: r, prune: newPruneSchedule(r), retry: time.NewTimer(time.Hour), refresher: r.newRefresher(), window: min(window, retryWindow(r.opts))}
	l.retry.Stop()
	r.gate.SetStopping(false)
	l.exec = newExecutor(ctx, r)
	defer l.stopped()
	if !r.startGate(ctx, &l.prune) || !r.setUp(ctx, &l.setup, &l.prune) {
		return nil
	}
	for {
		paused, pauseChanged := r.gate.State()
		watch, retryC := r.collect.Watch(), l.retry.C
		if l.exec.Room() <= 0 || paused {
			watch, retryC = nil, nil // read nothing new; commit what finishes
			if !paused && l.probeTurn {
				retryC = l.retry.C // but grant the probe (a round does) to the work held
			}
		} else if r.breaker != nil {
			if room, limited := r.breaker.Limit(r.clock.now()); limited && room == 0 {
				watch = nil // the target fails: wait for the probe's turn (retryC)
			}
		}
		if paused != l.wasPaused || (watch != nil && r.queue.Figures().Queued > 0) {
			pauseChanged = closedChan // a round now
		}
		if r.commit.Busy() {
			r.commit.Idle(watch) // a leader of the table's other reconcilers holds for it no longer
		}
		var pruneC <-chan struct{}
		if l.prune.Due() && l.reported && !paused && (r.breaker == nil || !r.breaker.State().Open) {
			pruneC = closedChan // a prune now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-pauseChanged:
		case <-watch:
		case <-retryC:
		case <-l.exec.Finished():
		case <-r.settings.postedC(): // round reconfigures
		case <-l.prune.Tables.Watch():
			l.prune.Tables.Woken() // Check sets it again if need be
		case <-pruneC:
			if ctx.Err() != nil {
				return nil
			}
			r.pruneNow(ctx, &l.prune) // 1. no operation starts meanwhile
			r.reportPrune(&l.prune)   // 2. health, the reconcilers table
			continue
		case <-r.owedC():
			r.publishOwed() // the statuses written with the table's other reconcilers are in
			continue
		case <-l.prune.InitC():
			l.prune.Initialized(l.prune.Tables.Uninitialized(r.db.ReadTxn()))
			continue
		case <-l.prune.TickC():
			l.prune.Request()
			continue
		case <-l.prune.RetryC():
			l.prune.Request()
			continue
		case <-r.pruneRequests:
			l.prune.Request()
			continue
		}
		if paused, _ = r.gate.State(); !paused && r.opts.roundLimiter != nil {
			r.waitForLimiter(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		l.round(ctx, paused)
		l.wasPaused = paused
		l.armRetry()
	}
}

// round runs the stages once, in order. While paused it collects nothing:
// it commits what finished and reports.
func (l *loop[Obj]) round(ctx context.Context, paused bool) {
	r := l.r
	if s := r.settings; s != nil && s.hasPending.Load() {
		l.reconfigure() // Configure's settings, before anything reads them
	}
	// The round's span is made only if the round did something (collected
	// or committed), dated from the round's start: most rounds wake for the
	// reconciler's own status writes, or a worker's result, and do nothing.
	var began time.Time
	if r.opts.tracer != nil {
		began = time.Now()
	}
	if r.commit.Landed() != nil {
		r.landFirst() // the table's other reconcilers' write of this one's statuses, if the round may read them
	}
	now, txn := r.clock.now(), r.db.ReadTxn()
	room := l.exec.Room()
	probe, broken := 0, false
	if r.breaker != nil {
		probe, broken = r.breaker.Limit(now)
	}
	switch {
	case paused:
		room = 0
	case broken:
		room = min(room, probe) // the target fails: one probe at most
	}
	if r.queue.Figures().RecheckDue && !paused {
		l.refresher.Mark(r.dueRechecks(txn, now.UnixNano()))
	}
	var work []work.Op[Obj]
	if broken && room == 1 {
		work = r.collect.Probe(txn, now, l.probes) // 1. one op, for the breaker's probe
		l.probes++
	} else {
		work = r.collect.Collect(txn, now, room) // 1. queued, fresh, retries, deferred
	}
	if len(work) > 0 {
		r.commit.Begin() // the table's other reconcilers may hold their write for this round's
	}
	if r.target.drift != nil {
		r.driftPrepare(work) // report-only: repair the keys whose last update failed
	}
	finished := l.exec.Operate(txn, work)                                 // 2. started at the gate; what finished
	outcome := r.commit.Commit(finished, ctx.Err() != nil, r.clock.now()) // 3. statuses written, keys settled
	r.ownWrote(outcome)
	l.prune.Tables.Check(txn)
	end := r.clock.now()
	r.report(txn, work, outcome, l.exec.Load(end), &l.prune, end, paused) // 4. progress, metrics, tables, health
	l.reported = true
	l.prune.RoundRead(len(work)) // a held prune is planned again
	if r.opts.tracer != nil && (len(work) > 0 || outcome.Committed > 0 || outcome.Failed > 0) {
		_, span := r.startSpan(ctx, tracing.Start{Kind: tracing.Round, Time: began})
		span.End(tracing.End{Collected: len(work), Committed: outcome.Committed, Failed: outcome.Failed})
	}
	// The buffers are kept for the next round: let go of their objects
	// (a round of deletes would keep the deleted objects until then).
	// Inline, finished is work itself: clear it once.
	clear(work)
	if len(finished) > 0 && (len(work) == 0 || &finished[0] != &work[0]) {
		clear(finished)
	}
}

// stopped ends a run of the loop: it stops the executor, commits what
// finished and queues what did not for the next start (the feed has moved
// past those changes), closes the feed, and marks the reconciler stopped.
func (l *loop[Obj]) stopped() {
	r := l.r
	l.retry.Stop()
	l.prune.Stop()
	if l.prune.Owed() {
		r.Prune() // the request waits in r.pruneRequests for the next start
	}
	r.gate.SetStopping(true)
	r.commit.Leave()      // no one holds for it, and what is left it writes alone
	left := l.exec.Stop() // waits for the operations under way to return
	out := r.commit.Commit(left, true, r.clock.now())
	r.ownWrote(out)
	r.awaitLanded() // before the progress below
	r.rep.committed(r.moduleID, r.opts.name, out.Figures)
	r.breaker.Reset(r.clock.now())
	lows := r.queue.Lows()
	r.rep.progress.Update(r.progressRev(lows), lows.Retry)
	r.collect.Close()
	r.reportStopped()
	if r.rep.info != nil {
		txn := r.db.ReadTxn()
		r.rep.info.Write(r.infoRow(&l.prune, tables.StateStopped, r.objects.Table.NumObjects(txn), r.queue.Figures().Retrying, 0, 0, lows.Since))
	}
}

// armRetry sets the retry timer for the earliest retry, probe of the
// circuit breaker or re-check, if one can be taken: while the executor has
// no room none could start, so the timer is left off and the next finished
// operation wakes the loop instead; but not for the probe, which a round
// grants to the work the executor holds (queued behind the open breaker,
// nothing of it finishes until then). It fires a jitter window
// (loop.window) past the earliest retry, so that retries spread by jitter
// are taken in few rounds, not one each.
func (l *loop[Obj]) armRetry() {
	l.retry.Stop()
	r := l.r
	f := r.queue.Figures()
	due, ok := f.NextDue, f.RetryDue
	if ok {
		if w := retryWindow(r.opts); l.window < 0 || w < l.window {
			l.window = w
		}
		due = backoff.Add(due, l.window)
	} else {
		l.window = -1 // no retry waits: the next are timed with the settings in force
	}
	l.probeTurn = false
	if r.breaker != nil {
		if probe, open := r.breaker.NextProbe(); open {
			switch {
			case !probe.IsZero():
				due, ok = probe.UnixNano(), true // no retry while the target fails: the probe's turn
				l.probeTurn = true
			case !r.gate.ProbeLeft():
				ok = false // the probe runs: its end wakes the loop
			} // else the probe granted waits for work: a retry falling due may take it
		}
	}
	if f.RecheckDue && (!ok || f.NextRecheck < due) {
		due, ok = f.NextRecheck, true
	}
	if !ok || (l.exec.Room() <= 0 && !l.probeTurn) {
		return
	}
	l.retry.Reset(backoff.Duration(float64(due) - float64(r.clock.now().UnixNano())))
}

// retryWindow is the jitter window of retries timed with o: the retry
// minimum times the jitter, within which the backoff's jitter spreads them
// (see armRetry).
func retryWindow(o options) time.Duration {
	return backoff.Duration(float64(o.retryMin) * o.retryJitter)
}

// resetRun readies the state of one run of the job.
func (r *reconciler[Obj]) resetRun(health cell.Health) {
	r.rep.reset(health)
	r.commit.Reset()
	r.breaker.Reset(r.clock.now())
}

// waitForLimiter paces rounds with the round limiter. A limiter
// whose Wait fails for any reason but ctx (its owner made it unusable while
// the reconciler runs) does not stop the reconciler: the round goes ahead
// unpaced and health reports the error until the limiter works again.
func (r *reconciler[Obj]) waitForLimiter(ctx context.Context) {
	err := r.opts.roundLimiter.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil && r.rep.limiterErr == nil {
		r.log.Error("Round limiter fails; rounds go on without it", "error", err)
	}
	if err != nil {
		err = errors.Join(errRoundLimiter, err)
	}
	r.rep.limiterErr = err
}

var errRoundLimiter = errors.New("round limiter")

// startGate waits, before the loop's first round, for the tables of
// WithStartAfter to be initialized, saying so in health and the
// reconcilers table, or that it is paused. It returns false if ctx ended.
// If the timeout passed first, prunes wait for the tables, and health
// says so (see prune.TableGate).
func (r *reconciler[Obj]) startGate(ctx context.Context, p *prune.Schedule) bool {
	if !r.opts.startAfter {
		return true
	}
	var timeout <-chan time.Time
	if r.opts.startTimeout > 0 {
		t := time.NewTimer(r.opts.startTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		txn := r.db.ReadTxn()
		waiting, watch := p.Tables.Uninitialized(txn)
		if len(waiting) == 0 {
			return true
		}
		paused, pauseChanged := r.gate.State()
		r.reportWaiting(txn, waiting, paused, p)
		select {
		case <-ctx.Done():
			return false
		case <-watch:
		case <-pauseChanged:
		case <-timeout:
			p.Tables.TimedOut(r.opts.startTimeout, waiting, watch)
			r.log.Warn("Reconciler started before its tables were initialized", "tables", waiting, "waited", r.opts.startTimeout)
			return true
		}
	}
}

// reconfigure applies the options accepted since the last round, at the top
// of a round that finds some posted: the executor is resized and the prune
// schedule restarted if their settings changed.
func (l *loop[Obj]) reconfigure() {
	old, ok := l.r.applySettings()
	if !ok {
		return
	}
	o := &l.r.opts
	l.exec.Resize(o.concurrency, o.roundSize)
	if o.roundLimiter == nil {
		l.r.rep.limiterErr = nil // a failing limiter dropped: health recovers
	}
	if old.pruneInterval != o.pruneInterval {
		l.prune.Restart(o.pruneInterval)
	}
}

// closedChan is a closed channel: receiving from it never blocks.
var closedChan = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()
