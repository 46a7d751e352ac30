package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
)

// report is the last stage of a round: it publishes progress for
// WaitUntilReconciled, metrics, the reconciler's rows in the tables of
// TablesCell, and health.
func (l *loop[Obj]) report(txn statedb.ReadTxn, work []op[Obj], c commitOutcome, now time.Time, paused bool) {
	r, lc := l.r, l.r.keys
	load := l.exec.load(now)
	inFlight := len(lc.active)
	failing := lc.retrying
	if c.committed > 0 || failing != l.reported.failing {
		r.metrics.ReconciliationErrors(r.moduleID, r.opts.name, c.failed, failing)
	}
	if r.metrics.queue != nil && (failing != l.reported.failing || inFlight != l.reported.inFlight) {
		r.metrics.queue.QueueLength(r.moduleID, r.opts.name, failing, inFlight)
	}
	l.reported.failing, l.reported.inFlight = failing, inFlight

	var oldest time.Time
	if r.metrics.round != nil || r.info != nil {
		oldest = lc.oldestSince()
	}
	if r.metrics.round != nil {
		var age time.Duration
		if !oldest.IsZero() {
			age = now.Sub(oldest)
		}
		r.metrics.round.Round(r.moduleID, r.opts.name, metrics.RoundStats{
			Adds:           len(work),
			Retries:        retries(work),
			Depth:          load.waiting + len(lc.queued) + lc.parked,
			Retrying:       failing,
			InFlight:       inFlight,
			OldestPending:  age,
			UnfinishedWork: load.unfinished,
			LongestRunning: load.longest,
		})
	}

	l.checkGate(txn)
	state := l.health.update(healthState{
		gateErr:      l.gateErr,
		paused:       paused,
		failing:      failing,
		retryVersion: lc.version,
		pruneErr:     l.prune.lastErr,
		limiterErr:   l.limiterErr,
	}, func() int { return r.table.NumObjects(txn) }, lc.errors)

	if r.info != nil {
		r.info.write(r.db, l.info(state, r.table.NumObjects(txn), failing, inFlight, oldest), lc.changes())
	}

	// Progress last, so that a WaitUntilReconciled that returns sees the
	// round's figures published.
	r.progress.update(l.progressRev(), lc.retryLowWatermark())
}

// retries counts the retries among work.
func retries[Obj any](work []op[Obj]) (n int) {
	for i := range work {
		if s := work[i].s; s != nil && s.attempts > 0 {
			n++
		}
	}
	return n
}

// progressRev returns the revision up to which every change read is
// done: all but those queued or running (their successors included), or
// deferred. Retries are told apart by the retry low watermark.
func (l *loop[Obj]) progressRev() statedb.Revision {
	r := l.r
	rev := r.lastRev
	lower := func(low statedb.Revision) {
		if low != 0 && low-1 < rev {
			rev = low - 1
		}
	}
	for _, s := range r.keys.active {
		if s.attempts == 0 {
			lower(s.task.rev)
		}
		if s.hasNext {
			lower(s.next.rev)
		}
	}
	lower(r.deferred.lowRev())
	return rev
}

// oldestSince returns the earliest time at which an object still to be
// reconciled (queued, running or waiting for a retry) was asked to be, or
// the zero time.
func (lc *lifecycles[Obj]) oldestSince() time.Time {
	var oldest time.Time
	for _, s := range lc.active {
		oldest = earliest(oldest, s.task.since)
		if s.hasNext {
			oldest = earliest(oldest, s.next.since)
		}
	}
	if !lc.heapOldestOK && len(lc.heap) > 0 {
		lc.heapOldest = lc.heap[0].s.task.since
		for _, e := range lc.heap {
			lc.heapOldest = earliest(lc.heapOldest, e.s.task.since)
		}
		lc.heapOldestOK = true
	}
	if len(lc.heap) > 0 {
		oldest = earliest(oldest, lc.heapOldest)
	}
	return oldest
}

// info returns the reconciler's row of the reconcilers table.
func (l *loop[Obj]) info(state State, objects, failing, inFlight int, oldest time.Time) Info {
	r, t, p := l.r, &l.totals, &l.prune
	info := Info{
		Module:               r.moduleID.String(),
		Name:                 r.opts.name,
		State:                state,
		Objects:              objects,
		Succeeded:            t.succeeded,
		Failed:               t.failed,
		FailuresSinceSuccess: t.sinceSuccess,
		LastError:            t.lastErr,
		LastErrorAt:          t.lastErrAt,
		Retrying:             failing,
		InFlight:             inFlight,
		OldestPending:        oldest,
		LastPrune:            p.last.at,
		LastPruneDuration:    p.last.duration,
		DriftRepaired:        uint64(t.refreshRepaired + p.repaired),
	}
	if p.lastErr != nil {
		info.LastPruneError = p.lastErr.Error()
	}
	return info
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// progress publishes how far the reconciler has got, for
// WaitUntilReconciled. The loop updates it; any goroutine may wait on it.
type progress struct {
	mu       sync.Mutex
	revision statedb.Revision
	low      statedb.Revision
	changed  chan struct{} // closed and replaced on every change
}

func newProgress() *progress {
	return &progress{changed: make(chan struct{})}
}

// update records that every change up to revision is done and that the
// lowest revision waiting for a retry is low. The revision never goes back.
func (p *progress) update(revision, low statedb.Revision) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if revision <= p.revision && low == p.low {
		return
	}
	p.revision = max(p.revision, revision)
	p.low = low
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *progress) wait(ctx context.Context, revision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	for {
		p.mu.Lock()
		current, low, changed := p.revision, p.low, p.changed
		p.mu.Unlock()
		if current >= revision {
			return current, low, nil
		}
		select {
		case <-ctx.Done():
			return current, low, ctx.Err()
		case <-changed:
		}
	}
}

// maxHealthErrors caps how many object errors a Degraded health report
// lists; the rest are summarised by count.
const maxHealthErrors = 10

// healthReporter reports the reconcile job's health, only when it changes.
type healthReporter struct {
	health cell.Health
	sent   bool
	ok     bool
	last   healthState
}

// healthState is what health is made of after a round. Its functions are
// called only if the report has to be remade.
type healthState struct {
	paused       bool
	objects      int    // objects in the table; filled in by update
	failing      int    // objects failing, waiting for a retry or retried now
	retryVersion uint64 // changes whenever the failing objects do
	pruneErr     error  // the last prune's error
	limiterErr   error  // the round limiter's error
	gateErr      error  // started before its tables were initialized
}

// update reports the state after a round if it differs from what was last
// reported. While paused, health is OK with "Paused". While nothing fails,
// health is OK with the number of objects.
// Otherwise it is Degraded with "N error(s)", the wording of the StateDB
// reconciler that scripts match on, then what fails, and up to
// maxHealthErrors errors of failing objects, earliest next attempt first.
// objects and retryErrors are called only when needed. It returns the
// state for the reconcilers table.
func (h *healthReporter) update(s healthState, objects func() int, retryErrors func(limit int) []error) State {
	if s.paused {
		// Paused on purpose: OK, but saying so.
		if !h.sent || !h.last.paused {
			h.sent, h.ok, h.last = true, false, s
			h.health.OK("Paused")
		}
		return StatePaused
	}
	if s.failing == 0 && s.pruneErr == nil && s.limiterErr == nil && s.gateErr == nil {
		s.objects = objects()
		if h.sent && h.ok && s.objects == h.last.objects {
			return StateRunning
		}
		h.sent, h.ok, h.last = true, true, s
		h.health.OK(fmt.Sprintf("OK, %d object(s)", s.objects))
		return StateRunning
	}
	if h.sent && !h.ok && s == h.last {
		return StateDegraded
	}
	h.sent, h.ok, h.last = true, false, s

	errs := make([]error, 0, maxHealthErrors+3)
	var what []string
	if s.failing > 0 {
		what = append(what, fmt.Sprintf("%d object(s) failing", s.failing))
	}
	if s.pruneErr != nil {
		what = append(what, "prune failed")
		errs = append(errs, s.pruneErr)
	}
	if s.limiterErr != nil {
		what = append(what, "round limiter failing")
		errs = append(errs, s.limiterErr)
	}
	if s.gateErr != nil {
		what = append(what, "tables not initialized")
		errs = append(errs, s.gateErr)
	}
	count := s.failing + len(errs)
	errs = append(errs, retryErrors(maxHealthErrors)...)
	if omitted := s.failing - maxHealthErrors; omitted > 0 {
		errs = append(errs, fmt.Errorf("%d more error(s) omitted", omitted))
	}
	h.health.Degraded(fmt.Sprintf("%d error(s): %s", count, strings.Join(what, ", ")), errors.Join(errs...))
	return StateDegraded
}

// totals are the running figures of a reconciler that its row in the
// reconcilers table shows. The loop owns them.
type totals struct {
	succeeded, failed uint64
	sinceSuccess      int // failed operations since the last that succeeded
	lastErr           string
	lastErrAt         time.Time
	refreshRepaired   int
}

// add counts a commit's figures.
func (t *totals) add(fig *commitFigures) {
	for _, c := range []*metrics.OutcomeCounts{&fig.stats.Update, &fig.stats.Delete} {
		ok := c[metrics.OutcomeSuccess]
		t.succeeded += uint64(ok)
		t.failed += uint64(c.Failed())
	}
	t.refreshRepaired += fig.stats.RefreshRepaired
}

// succeededLast records that an operation succeeded: the count of
// failures since one did starts again.
func (t *totals) succeededLast() { t.sinceSuccess = 0 }

// failed records a failed op, its attempt-th: the last error and the
// count of failures since a success; and logs it.
func (l *loop[Obj]) failed(o *op[Obj], attempt int, now time.Time) {
	l.totals.sinceSuccess++
	l.totals.lastErr = o.err.Error()
	l.totals.lastErrAt = now
	l.logFailure(o, attempt, now)
}

// infoWriter keeps the reconciler's rows in the tables of TablesCell
// current. It writes only what changed since its last write.
type infoWriter[Obj any] struct {
	tables *Tables
	id     string
	last   Info // as last written, without the fields others write
}

func newInfoWriter[Obj any](r *reconciler[Obj]) *infoWriter[Obj] {
	if r.tables == nil {
		return nil
	}
	r.keys.trackChanges()
	return &infoWriter[Obj]{tables: r.tables, id: metrics.Key(r.moduleID, r.opts.name)}
}

// write stores info as the reconciler's row if it differs from the last
// one written, and the rows of failing objects that changed.
func (w *infoWriter[Obj]) write(db *statedb.DB, info Info, retries map[string]*keyState[Obj]) {
	if w == nil {
		return
	}
	info.ID = w.id
	if info == w.last && len(retries) == 0 {
		return
	}
	wtxn := db.WriteTxn(w.tables.reconcilers, w.tables.retries)
	defer wtxn.Commit()
	if info != w.last {
		// The refresh job writes LastRefresh; keep it.
		if cur, _, found := w.tables.reconcilers.Get(wtxn, InfoByID.Query(w.id)); found {
			info.LastRefresh = cur.LastRefresh
		}
		row := info
		w.tables.reconcilers.Insert(wtxn, &row)
		w.last = info
		w.last.LastRefresh = time.Time{}
	}
	for key, s := range retries {
		shown := displayKey(key)
		if s == nil || s.attempts == 0 {
			w.tables.retries.Delete(wtxn, &RetryInfo{Reconciler: w.id, Key: shown})
			continue
		}
		row := &RetryInfo{
			Reconciler:  w.id,
			Key:         shown,
			Delete:      s.task.delete,
			Attempts:    s.attempts,
			FirstFailed: s.first,
			LastError:   s.err.Error(),
		}
		if s.phase == phaseWaiting {
			row.NextAttempt = time.Unix(0, s.due)
		}
		w.tables.retries.Insert(wtxn, row)
	}
}

// refreshed records a refresh sweep's time in the reconciler's row.
func (w *infoWriter[Obj]) refreshed(db *statedb.DB, at time.Time) {
	if w == nil {
		return
	}
	wtxn := db.WriteTxn(w.tables.reconcilers)
	defer wtxn.Commit()
	row := Info{ID: w.id, State: StateRunning}
	if cur, _, found := w.tables.reconcilers.Get(wtxn, InfoByID.Query(w.id)); found {
		row = *cur
	}
	row.LastRefresh = at
	w.tables.reconcilers.Insert(wtxn, &row)
}

// Failure logs are rate limited per reconciler, so that a storm of failures
// cannot flood the log: an object's first failure is logged at Warn level
// if the reconciler has logged fewer than failLogBurst failures in the last
// failLogInterval; otherwise it is counted, and the count is added
// ("suppressed") to the first Warn line once the window has passed: the
// next first failure, or, if the next failure is a later failure of an
// object that keeps failing, a Warn line for it. Later failures of an
// object that keeps failing are otherwise logged at Debug level only.
const (
	failLogBurst    = 10
	failLogInterval = 10 * time.Second
)

// failLog is the state of the rate limiter of failure logs. The loop owns
// it.
type failLog struct {
	windowStart time.Time
	inWindow    int
	suppressed  int
}

// logFailure logs the failure of o at now, as the rules above allow.
func (l *loop[Obj]) logFailure(o *op[Obj], attempt int, now time.Time) {
	r, f := l.r, &l.failLog
	what := "update"
	if o.delete {
		what = "delete"
	}
	if now.Sub(f.windowStart) >= failLogInterval {
		f.windowStart, f.inWindow = now, 0
	}
	if attempt > 1 {
		if f.suppressed > 0 && f.inWindow < failLogBurst {
			// A storm's objects may only fail again, never for the first
			// time: report what was suppressed with this failure.
			f.inWindow++
			r.log.Warn("Reconciler operation failed again; earlier failure logs were suppressed",
				"operation", what, "key", l.key(o), "attempt", attempt, "error", o.err, "suppressed", f.suppressed)
			f.suppressed = 0
			return
		}
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			r.log.Debug("Reconciler operation failed again", "operation", what, "key", l.key(o), "attempt", attempt, "error", o.err)
		}
		return
	}
	if f.inWindow >= failLogBurst {
		f.suppressed++
		return
	}
	f.inWindow++
	msg := "Reconciler operation failed; retrying with backoff"
	if IsTerminal(o.err) && !o.delete {
		msg = "Reconciler operation failed terminally; not retrying until the object changes"
	}
	args := []any{"operation", what, "key", l.key(o), "attempt", attempt, "error", o.err}
	if f.suppressed > 0 {
		args = append(args, "suppressed", f.suppressed)
		f.suppressed = 0
	}
	r.log.Warn(msg, args...)
}

// key returns o's primary key for messages.
func (l *loop[Obj]) key(o *op[Obj]) string {
	if o.key != "" {
		return displayKey(o.key)
	}
	key, _ := l.r.keyOf(o.obj)
	return displayKey(key)
}

// ReportRepaired lets an operation say that it repaired n pieces of drift:
// Prune counting what it removed from the target that should not have been
// there, or Update counting what it had to put right in the target for an
// object marked Refreshing. Call it with the context the operation was
// given, any number of times. The counts go to the metrics (drift repaired,
// by source "prune" or "refresh"; see [metrics.PruneStats] and
// [metrics.CommitStats]) and to the reconcilers table. With a context that
// does not come from a reconciler it does nothing. It is safe for
// concurrent use and does not allocate.
func ReportRepaired(ctx context.Context, n int) {
	if c, ok := ctx.Value(driftKey{}).(*driftCounter); ok && n > 0 {
		c.n.Add(int64(n))
	}
}

type driftKey struct{}

// driftCounter collects ReportRepaired calls of the operations an executor
// runs. The executor reads and resets it around each operation.
type driftCounter struct{ n atomic.Int64 }

func (c *driftCounter) take() int { return int(c.n.Swap(0)) }

// observers holds the metrics a reconciler reports to: the seed's Metrics
// and whichever optional interfaces it implements (nil otherwise), found
// once when the reconciler is registered.
type observers struct {
	metrics.Metrics
	queue   metrics.QueueMetrics
	round   metrics.RoundMetrics
	commit  metrics.CommitMetrics
	prune   metrics.PruneMetrics
	refresh metrics.RefreshMetrics
}

func newObservers(m metrics.Metrics) observers {
	o := observers{Metrics: m}
	o.queue, _ = m.(metrics.QueueMetrics)
	o.round, _ = m.(metrics.RoundMetrics)
	o.commit, _ = m.(metrics.CommitMetrics)
	o.prune, _ = m.(metrics.PruneMetrics)
	o.refresh, _ = m.(metrics.RefreshMetrics)
	return o
}

// outcome classifies how an operation ended, in the order of precedence
// metrics.Outcome documents: a panic, a timeout of the operation's own
// deadline, a terminal error, any other error.
func outcome(err error, timeout time.Duration) metrics.Outcome {
	switch {
	case err == nil:
		return metrics.OutcomeSuccess
	case errors.Is(err, ErrPanic):
		return metrics.OutcomePanic
	case timeout > 0 && errors.As(err, new(*timeoutError)):
		return metrics.OutcomeTimeout
	case IsTerminal(err):
		return metrics.OutcomeTerminal
	}
	return metrics.OutcomeError
}
