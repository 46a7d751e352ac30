package reconciler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/internal/ident"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/tables"
	"github.com/converge-go/converge/tracing"
)

// pruneSchedule decides when the loop prunes: once the table and those of
// WithStartAfter are initialized, whatever its timeout, then every prune
// interval and on Reconciler.Prune; a failed prune again after the retry
// backoff. The loop waits on its channels, tells it what fired, and prunes
// while due is set, between rounds, with the gate closed. It lives as long
// as one run of the loop, whose goroutine it belongs to; its zero value is
// not usable (see newPruneSchedule).
type pruneSchedule struct {
	prune  func(ctx context.Context, txn statedb.ReadTxn) pruneResult
	tables tableGate // the tables prunes wait for, and why health says they do

	initC             <-chan struct{}  // closed when one of the tables is initialized; nil once all are
	tickC             <-chan time.Time // ticks every prune interval; nil without
	retry             *time.Timer      // fires when a failed prune is to be tried again
	due               bool             // initialized and requested: prune next
	ticker            *time.Ticker     // nil without periodic pruning
	isInit, requested bool

	retryMin, retryMax time.Duration
	retryJitter        float64
	rand               func() float64

	failures int
	last     pruneResult // the last prune's, zero before the first
	lastErr  error       // the last prune's error, or nil
	repaired int         // drift repaired by every prune so far
	held     *pruneHold  // the last prune was held by WithPruneGuard: its plan; else nil
}

func newPruneSchedule[Obj any](r *reconciler[Obj]) pruneSchedule {
	s := pruneSchedule{
		prune:       r.prune,
		tables:      tableGate{metas: append([]statedb.TableMeta{r.objects.table}, r.opts.startTables...)},
		initC:       closedChan,
		retry:       time.NewTimer(time.Hour),
		retryMin:    r.opts.retryMin,
		retryMax:    r.opts.retryMax,
		retryJitter: r.opts.retryJitter,
		rand:        r.clock.rand,
	}
	if waiting, watch := s.tables.uninitialized(r.db.ReadTxn()); len(waiting) > 0 {
		s.initC = watch
	}
	s.retry.Stop()
	if r.opts.pruneInterval > 0 {
		s.ticker = time.NewTicker(r.opts.pruneInterval)
		s.tickC = s.ticker.C
		s.requested = true // the first prune comes once the table is initialized
	}
	return s
}

// owed reports whether a prune was asked for and not run, or the last one
// failed (a stop cuts one short with a failure): the run that stops asks
// for one again, for the next run (see loop.stopped).
func (s *pruneSchedule) owed() bool { return s.requested || s.lastErr != nil || s.held != nil }

// initialized is told, when initC closes or a prune finds a table made
// uninitialized again, which tables are not initialized (waiting) and a
// channel closed when one of them is.
func (s *pruneSchedule) initialized(waiting []string, watch <-chan struct{}) {
	if len(waiting) > 0 {
		s.initC, s.isInit, s.due = watch, false, false
		return
	}
	s.initC, s.isInit = nil, true
	s.due = s.requested
}

// request asks for a prune as soon as the table is initialized. The loop
// calls it when the tick or retry channel fires and on Reconciler.Prune.
func (s *pruneSchedule) request() {
	s.requested = true
	s.due = s.isInit
}

// pruneNow prunes, the schedule being due, with a snapshot taken once the
// gate is closed: an object the last commit marked Done is in it, and the
// prune must not remove it from the target. In that snapshot every table
// prunes wait for is initialized, or the prune waits until they are. Its
// span is the child of a round's, as a prune is the loop's round of its
// own.
func (r *reconciler[Obj]) pruneNow(ctx context.Context, p *pruneSchedule) {
	if !r.gate.BeginPrune() {
		return // paused since the round began: the prune stays due
	}
	defer r.gate.EndPrune()
	if !r.gate.EnterPrune() {
		return // paused since beginPrune: the prune stays due
	}
	r.awaitLanded() // the statuses of the rounds before, written with the table's other reconcilers
	txn := r.db.ReadTxn()
	if waiting, watch := p.tables.uninitialized(txn); len(waiting) > 0 {
		r.gate.Entered() // no prune: a table was made uninitialized again
		p.initialized(waiting, watch)
		p.tables.wait(waiting, watch)
		return
	}
	cut := ident.Last() // as the snapshot was taken
	if r.opts.tracer != nil {
		var round tracing.Span
		ctx, round = r.startSpan(ctx, tracing.Start{Kind: tracing.Round})
		defer round.End(tracing.End{})
	}
	p.run(ctx, txn)
	if p.held != nil {
		return // WithPruneGuard held it: Prune removed nothing, nothing to mark
	}
	// Marked once Prune returned, as before it: no operation's outcome is
	// committed meanwhile (the loop's goroutine commits).
	r.keys.lifecycles.Add(keyqueue.Change[Obj]{As: keyqueue.Pruned, Absent: func(obj Obj) bool {
		_, _, found := r.objects.lookup(txn, obj)
		return !found
	}})
	if rev := r.objects.table.Revision(txn); rev > r.feed.lastRev {
		r.keys.stales.sawPrune(txn, rev, cut)
	}
}

// run prunes and schedules a retry if it failed.
func (s *pruneSchedule) run(ctx context.Context, txn statedb.ReadTxn) {
	s.requested, s.due = false, false
	s.retry.Stop()
	res := s.prune(ctx, txn)
	if s.holding(res.held) {
		return // Prune not called: planned again when due again
	}
	s.last = res
	s.lastErr = s.last.err
	s.repaired += s.last.repaired
	if s.lastErr == nil {
		s.failures = 0
		return
	}
	s.failures++
	s.retry.Reset(backoff(s.failures, s.retryMin, s.retryMax, s.retryJitter, s.rand()))
}

func (s *pruneSchedule) stop() {
	if s.ticker != nil {
		s.ticker.Stop()
	}
	s.retry.Stop()
}

// tableGate follows the tables prunes wait for, the reconciler's and those
// of WithStartAfter, for health: once the start timeout passed, or a prune
// found one made uninitialized again (a new initializer), err says which
// are not initialized until all are. Its zero value follows no table. It
// belongs to the loop's goroutine, as the schedule that holds it.
type tableGate struct {
	metas []statedb.TableMeta // the tables followed
	err   error               // why prunes wait: tables not initialized (see wait), or nil
	watch <-chan struct{}     // while err is set: closed when one of those tables is
	names string              // the tables err names
	after time.Duration       // the start timeout that passed, or 0: a prune found them uninitialized
}

// uninitialized returns the names of the tables not yet initialized in
// txn and a channel closed when the first of them is.
func (g *tableGate) uninitialized(txn statedb.ReadTxn) ([]string, <-chan struct{}) {
	var (
		names []string
		watch <-chan struct{}
	)
	for _, t := range g.metas {
		if ok, w := t.Initialized(txn); !ok {
			names = append(names, t.Name())
			if watch == nil {
				watch = w
			}
		}
	}
	return names, watch
}

// wait makes health say that prunes wait for the tables waiting, which
// are not initialized, until they are: the start timeout passed, or a
// table was made uninitialized again by the time a prune was due. check
// follows them, woken by watch.
func (g *tableGate) wait(waiting []string, watch <-chan struct{}) {
	g.watch = watch
	names := strings.Join(waiting, ", ")
	if g.err != nil && names == g.names {
		return // the same error: health need not be remade
	}
	g.names = names
	if g.after > 0 {
		g.err = fmt.Errorf("started after %s without waiting any longer for tables to be initialized: %s (prunes wait for them)", g.after, names)
	} else {
		g.err = fmt.Errorf("tables not initialized again: %s (prunes wait for them)", names)
	}
}

// check follows the tables of err: it names those still not initialized,
// and is cleared once all are.
func (g *tableGate) check(txn statedb.ReadTxn) {
	waiting, watch := g.uninitialized(txn)
	if len(waiting) == 0 {
		g.err, g.watch, g.names, g.after = nil, nil, "", 0
		return
	}
	g.wait(waiting, watch)
}

// pruneResult is what one prune did.
type pruneResult struct {
	at       time.Time
	duration time.Duration
	repaired int // drift Prune reported with ReportRepaired
	err      error
	held     *pruneHold // WithPruneGuard held it: Prune was not called
}

// prune hands the whole desired set to Operations.Prune (or the batch
// operations' Prune, see Register) and reports the outcome. A failure is
// returned for health. Nothing asks for a prune when there is no pruner:
// Register refuses periodic pruning then, and Reconciler.Prune does
// nothing.
func (r *reconciler[Obj]) prune(ctx context.Context, txn statedb.ReadTxn) pruneResult {
	var reports opReports
	ctx = context.WithValue(ctx, reportsKey{}, &reports)
	var span tracing.Span
	if r.opts.tracer != nil {
		ctx, span = r.startSpan(ctx, tracing.Start{Kind: tracing.Prune})
	}
	start := time.Now()
	var hold *pruneHold
	planning := false
	err := r.call(ctx, "prune", func(ctx context.Context) error {
		r.gate.Entered() // begun with enterPrune
		planning = true
		h, err := r.guardPrune(ctx, txn)
		if planning, hold = false, h; hold != nil || err != nil {
			return err
		}
		return r.target.pruner.Prune(ctx, txn, r.objects.table.All(txn))
	})
	if planning {
		err = fmt.Errorf("plan: %w", err) // the plan panicked
	}
	if hold != nil {
		if span != nil {
			span.End(tracing.End{})
		}
		return pruneResult{held: hold}
	}
	res := pruneResult{at: start, duration: time.Since(start), repaired: int(reports.drift.Swap(0))}
	if span != nil {
		span.End(tracing.End{Outcome: outcome(err, r.opts.operationTimeout), Err: err, Repaired: res.repaired})
	}
	r.rep.metrics.PruneDuration(r.moduleID, r.opts.name, res.duration)
	r.rep.metrics.PruneError(r.moduleID, r.opts.name, err)
	if r.rep.metrics.prune != nil {
		r.rep.metrics.prune.Pruned(r.moduleID, r.opts.name, metrics.PruneStats{
			Outcome: outcome(err, r.opts.operationTimeout), Repaired: res.repaired,
		})
	}
	if err != nil {
		r.log.Warn("Reconciler prune failed; trying again after the retry backoff", "error", err)
		res.err = fmt.Errorf("prune: %w", err)
	}
	return res
}

// reconfigure takes the retry backoff of o for prunes that fail from now
// on (a retry already timed keeps its time) and, if restart, restarts the
// periodic prunes: the next comes one new interval from now, or none with
// an interval of zero. A prune already requested or due still runs.
func (s *pruneSchedule) reconfigure(restart bool, o *options) {
	s.retryMin, s.retryMax, s.retryJitter = o.retryMin, o.retryMax, o.retryJitter
	if !restart {
		return
	}
	if s.ticker != nil {
		s.ticker.Stop()
	}
	s.ticker, s.tickC = nil, nil
	if o.pruneInterval > 0 {
		s.ticker = time.NewTicker(o.pruneInterval)
		s.tickC = s.ticker.C
	}
}

// Prune implements Reconciler. Without anything to prune with (see
// Register) it does nothing.
func (r *reconciler[Obj]) Prune() {
	if r.target.pruner == nil {
		return
	}
	select {
	case r.pruneRequests <- struct{}{}:
	default:
	}
}

// ConfirmPrune implements Reconciler.
func (r *reconciler[Obj]) ConfirmPrune() {
	g := r.target.guard
	if g == nil {
		return
	}
	if id := g.hold.Load(); id != 0 {
		g.confirmed.Store(id)
		r.Prune() // the held prune, as soon as possible
	}
}

// holding records the outcome of a prune's plan, h (nil: Prune was called,
// or the plan failed), and reports whether the prune was held. A hold
// whose figures did not change keeps its error, so that health is not
// made again.
func (s *pruneSchedule) holding(h *pruneHold) bool {
	switch {
	case h == nil:
		s.held = nil
		return false
	case s.held == nil || s.held.remove != h.remove || s.held.of != h.of:
		s.held = h
	}
	return true
}

// roundRead is told, after each round, how many objects it handed to the
// operations: a held prune is planned again after a round that did, as
// the desired set may have grown back.
func (s *pruneSchedule) roundRead(n int) {
	if s.held != nil && n > 0 {
		s.request()
	}
}

// heldErr is the error health reports for a held prune, or nil.
func (s *pruneSchedule) heldErr() error {
	if s.held == nil {
		return nil
	}
	return s.held.err
}

// heldInfo fills in the reconcilers table's row what a held prune would
// remove, or clears it.
func (s *pruneSchedule) heldInfo(info *tables.Info) {
	info.PruneHeld, info.PruneHeldRemove, info.PruneHeldOf = false, 0, 0
	if s.held != nil {
		info.PruneHeld, info.PruneHeldRemove, info.PruneHeldOf = true, s.held.remove, s.held.of
	}
}
