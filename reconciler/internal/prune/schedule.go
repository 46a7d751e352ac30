// Package prune decides when the reconciler prunes and whether a prune may
// remove what it would: the [Schedule] (once the tables prunes wait for
// are initialized, every prune interval, on request, again after a failure
// with backoff), the [TableGate] that follows those tables for health, and
// the [Guard] of WithPruneGuard that holds a prune removing too much. It
// calls no operation itself: the owner gives the schedule the function
// that prunes, and the guard the plan.
package prune

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/tables"
)

// Result is what one prune did.
type Result struct {
	At       time.Time
	Duration time.Duration
	Repaired int // drift Prune reported repaired
	Err      error
	Held     *Hold // the Guard held it: Prune was not called
}

// Config is what NewSchedule needs; all of it is required but Interval.
type Config struct {
	// Tables are those prunes wait for: the reconciler's and those of
	// WithStartAfter.
	Tables []statedb.TableMeta
	// Interval is the time between periodic prunes; 0: none.
	Interval time.Duration
	// Prune prunes with txn's snapshot and returns what it did.
	Prune func(ctx context.Context, txn statedb.ReadTxn) Result
	// Backoff returns the wait before a prune that failed failures times
	// in a row is tried again.
	Backoff func(failures int) time.Duration
}

// Schedule decides when the loop prunes: once the tables are initialized,
// whatever their timeout, then every prune interval and on request; a
// failed prune again after the retry backoff. The loop waits on its
// channels, tells it what fired, and prunes while Due, between rounds,
// with the gate closed. It lives as long as one run of the loop, whose
// goroutine it belongs to; make one with NewSchedule and Stop it. Its zero
// value has no channels, is never due, and reports no prune: a loop's
// rounds may use it (Tables, RoundRead, Errs, Info), not its run.
type Schedule struct {
	cfg    Config
	Tables TableGate // the tables prunes wait for, and why health says they do

	initC             <-chan struct{}  // closed when one of the tables is initialized; nil once all are
	tickC             <-chan time.Time // ticks every prune interval; nil without
	retry             *time.Timer      // fires when a failed prune is to be tried again
	due               bool             // initialized and requested: prune next
	ticker            *time.Ticker     // nil without periodic pruning
	isInit, requested bool

	failures int
	last     Result // the last prune's, zero before the first
	repaired int    // drift repaired by every prune so far
	held     *Hold  // the last prune was held by the guard: its plan; else nil
}

// closed is a channel that is closed.
var closed = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// NewSchedule returns the schedule of cfg, its tables as txn holds them.
func NewSchedule(txn statedb.ReadTxn, cfg Config) Schedule {
	s := Schedule{
		cfg:    cfg,
		Tables: TableGate{metas: cfg.Tables},
		initC:  closed,
		retry:  time.NewTimer(time.Hour),
	}
	if waiting, watch := s.Tables.Uninitialized(txn); len(waiting) > 0 {
		s.initC = watch
	}
	s.retry.Stop()
	if cfg.Interval > 0 {
		s.ticker = time.NewTicker(cfg.Interval)
		s.tickC = s.ticker.C
		s.requested = true // the first prune comes once the table is initialized
	}
	return s
}

// Due reports whether the schedule wants a prune now.
func (s *Schedule) Due() bool { return s.due }

// InitC is closed when one of the tables not initialized is; nil once all
// are. When it fires, the loop calls Initialized.
func (s *Schedule) InitC() <-chan struct{} { return s.initC }

// TickC ticks every prune interval (nil without); RetryC fires when a
// failed prune is to be tried again. When one fires, the loop calls
// Request.
func (s *Schedule) TickC() <-chan time.Time  { return s.tickC }
func (s *Schedule) RetryC() <-chan time.Time { return s.retry.C }

// Owed reports whether a prune was asked for and not run, or the last one
// failed (a stop cuts one short with a failure), or was held: the run
// that stops asks for one again, for the next run.
func (s *Schedule) Owed() bool { return s.requested || s.last.Err != nil || s.held != nil }

// Initialized is told, when InitC closes or a prune finds a table made
// uninitialized again, which tables are not initialized (waiting) and a
// channel closed when one of them is.
func (s *Schedule) Initialized(waiting []string, watch <-chan struct{}) {
	if len(waiting) > 0 {
		s.initC, s.isInit, s.due = watch, false, false
		return
	}
	s.initC, s.isInit = nil, true
	s.due = s.requested
}

// Request asks for a prune as soon as the tables are initialized.
func (s *Schedule) Request() {
	s.requested = true
	s.due = s.isInit
}

// Withdraw forgets a prune requested and not run.
func (s *Schedule) Withdraw() { s.requested, s.due = false, false }

// Run prunes and schedules a retry if it failed. A prune the guard held
// is planned again when due again.
func (s *Schedule) Run(ctx context.Context, txn statedb.ReadTxn) {
	s.requested, s.due = false, false
	s.retry.Stop()
	res := s.cfg.Prune(ctx, txn)
	if s.holding(res.Held) {
		return // Prune not called: planned again when due again
	}
	s.last = res
	s.repaired += res.Repaired
	if res.Err == nil {
		s.failures = 0
		return
	}
	s.failures++
	s.retry.Reset(s.cfg.Backoff(s.failures))
}

// Stop stops the schedule's timers.
func (s *Schedule) Stop() {
	if s.ticker != nil {
		s.ticker.Stop()
	}
	s.retry.Stop()
}

// Restart restarts the periodic prunes with interval: the next comes one
// new interval from now, or none with an interval of zero. A prune
// already requested or due still runs, and a retry already timed keeps
// its time (Backoff is asked at each failure).
func (s *Schedule) Restart(interval time.Duration) {
	if s.ticker != nil {
		s.ticker.Stop()
	}
	s.ticker, s.tickC = nil, nil
	if interval > 0 {
		s.ticker = time.NewTicker(interval)
		s.tickC = s.ticker.C
	}
}

// holding records the outcome of a prune's plan, h (nil: Prune was called,
// or the plan failed), and reports whether the prune was held. A hold
// whose figures did not change keeps its error, so that health is not
// made again.
func (s *Schedule) holding(h *Hold) bool {
	switch {
	case h == nil:
		s.held = nil
		return false
	case s.held == nil || s.held.Remove != h.Remove || s.held.Of != h.Of:
		s.held = h
	}
	return true
}

// Held reports whether the last prune was held.
func (s *Schedule) Held() bool { return s.held != nil }

// RoundRead is told, after each round, how many objects it handed to the
// operations: a held prune is planned again after a round that did, as
// the desired set may have grown back.
func (s *Schedule) RoundRead(n int) {
	if s.held != nil && n > 0 {
		s.Request()
	}
}

// Errs returns what health reports of prunes: the last one's error and a
// held prune's, each nil if none.
func (s *Schedule) Errs() (pruneErr, heldErr error) {
	if s.held != nil {
		heldErr = s.held.Err
	}
	return s.last.Err, heldErr
}

// Repaired returns the drift repaired by every prune so far.
func (s *Schedule) Repaired() int { return s.repaired }

// Info fills in the reconcilers table's row the last prune's time,
// duration and error, and what a held prune would remove (or clears it).
func (s *Schedule) Info(info *tables.Info) {
	info.LastPrune, info.LastPruneDuration, info.LastPruneError = s.last.At, s.last.Duration, ""
	if s.last.Err != nil {
		info.LastPruneError = s.last.Err.Error()
	}
	info.PruneHeld, info.PruneHeldRemove, info.PruneHeldOf = false, 0, 0
	if s.held != nil {
		info.PruneHeld, info.PruneHeldRemove, info.PruneHeldOf = true, s.held.Remove, s.held.Of
	}
}

// TableGate follows the tables prunes wait for, for health: once the
// start timeout passed, or a prune found one made uninitialized again (a
// new initializer), Err says which are not initialized until all are. Its
// zero value follows no table. It belongs to the loop's goroutine, as the
// schedule that holds it.
type TableGate struct {
	metas []statedb.TableMeta // the tables followed
	err   error               // why prunes wait: tables not initialized (see Wait), or nil
	watch <-chan struct{}     // while err is set: closed when one of those tables is
	names string              // the tables err names
	after time.Duration       // the start timeout that passed, or 0: a prune found them uninitialized
}

// Uninitialized returns the names of the tables not yet initialized in
// txn and a channel closed when the first of them is.
func (g *TableGate) Uninitialized(txn statedb.ReadTxn) ([]string, <-chan struct{}) {
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

// TimedOut makes health say that the start timeout after passed with the
// tables waiting not initialized, and that prunes wait for them (see
// Wait).
func (g *TableGate) TimedOut(after time.Duration, waiting []string, watch <-chan struct{}) {
	g.after = after
	g.Wait(waiting, watch)
}

// Wait makes health say that prunes wait for the tables waiting, which
// are not initialized, until they are: the start timeout passed, or a
// table was made uninitialized again by the time a prune was due. Check
// follows them, woken by Watch.
func (g *TableGate) Wait(waiting []string, watch <-chan struct{}) {
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

// Err is why prunes wait, for health: tables not initialized, or nil.
func (g *TableGate) Err() error { return g.err }

// Watch is closed, while Err is set, when one of its tables is
// initialized; the loop then calls Woken, and Check at its next round.
func (g *TableGate) Watch() <-chan struct{} { return g.watch }

// Woken forgets Watch, which fired: Check sets it again if need be.
func (g *TableGate) Woken() { g.watch = nil }

// Check follows the tables of Err, if set: it names those still not
// initialized in txn, and is cleared once all are.
func (g *TableGate) Check(txn statedb.ReadTxn) {
	if g.err == nil {
		return
	}
	waiting, watch := g.Uninitialized(txn)
	if len(waiting) == 0 {
		g.err, g.watch, g.names, g.after = nil, nil, "", 0
		return
	}
	g.Wait(waiting, watch)
}
