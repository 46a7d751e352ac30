package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/statedb"
	"golang.org/x/time/rate"
)

// Configure implements Reconciler.
func (r *reconciler[Obj]) Configure(opts ...Option) error {
	return r.gate.settings.configure(r.target.pruner != nil, opts)
}

// configurable lists, in the order its errors name them, the options
// Configure accepts: those setting what the reconcile job and the refresh
// job read between rounds (see applySettings).
var configurable = []string{"WithConcurrency", "WithRoundLimits", "WithRefreshing", "WithPruning", "WithRetry", "WithRetryJitter"}

// settings is what Configure changes: the options as Register took them
// with every accepted Configure applied (latest), those the reconcile job
// has yet to take (pending), and what the refresh job reads. Configure
// writes it from any goroutine; the reconcile job takes pending at its
// start and at the top of each round, the refresh job reads refresh. Safe
// for concurrent use; the zero value is not usable (see newSettings), and
// a nil *settings accepts nothing and has nothing pending.
type settings struct {
	mu      sync.Mutex
	latest  options
	pending *options      // accepted and not yet taken; nil if none
	posted  chan struct{} // signalled when pending is set: wakes the reconcile job

	refresh   refreshSettings
	refreshed chan struct{} // signalled when refresh changes: wakes the refresh job
}

// refreshSettings is what the refresh job reads of the options.
type refreshSettings struct {
	interval time.Duration
	limiter  *rate.Limiter
	retryMax time.Duration // a failing limiter's sweep comes again after at most this
}

func newSettings(o options) *settings {
	return &settings{
		latest:    o,
		posted:    make(chan struct{}, 1),
		refresh:   refreshSettings{o.refreshInterval, o.refreshLimiter, o.retryMax},
		refreshed: make(chan struct{}, 1),
	}
}

// configure applies opts to the latest options and, if every option is one
// Configure accepts and the result validates as Register validates it,
// posts them; otherwise it changes nothing and returns an error wrapping
// ErrInvalidConfig.
func (s *settings) configure(canPrune bool, opts []Option) error {
	if s == nil {
		return fmt.Errorf("reconciler.Configure: not a registered reconciler: %w", ErrInvalidConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.latest
	for i, opt := range opts {
		if err := checkConfigurable(opt); err != nil {
			return fmt.Errorf("reconciler.Configure: option %d: %w", i, err)
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return fmt.Errorf("reconciler.Configure: %w", err)
	}
	if !canPrune && o.pruneInterval > 0 {
		return fmt.Errorf("reconciler.Configure: %w: WithPruning(%s): nothing to prune with (see Register)", ErrInvalidConfig, o.pruneInterval)
	}
	s.latest = o
	p := o
	s.pending = &p
	notify(s.posted)
	if rs := (refreshSettings{o.refreshInterval, o.refreshLimiter, o.retryMax}); rs != s.refresh {
		s.refresh = rs
		notify(s.refreshed)
	}
	return nil
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// take returns the options accepted since the last take, if any.
func (s *settings) take() (options, bool) {
	if s == nil {
		return options{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	if p == nil {
		return options{}, false
	}
	return *p, true
}

// postedC is the channel signalled when options are posted; nil for a nil
// *settings.
func (s *settings) postedC() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.posted
}

// refreshing returns the refresh job's settings and a channel signalled
// when they change.
func (s *settings) refreshing() (refreshSettings, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refresh, s.refreshed
}

// checkConfigurable returns an error naming opt if it is nil or made by a
// constructor Configure does not accept.
func checkConfigurable(opt Option) error {
	if opt == nil {
		return fmt.Errorf("nil Option: %w", ErrInvalidConfig)
	}
	var o options
	opt(&o)
	if slices.Contains(configurable, o.by) {
		return nil
	}
	return fmt.Errorf("%s cannot be changed on a registered reconciler; Configure takes %s: %w",
		o.by, strings.Join(configurable, ", "), ErrInvalidConfig)
}

// applySettings takes the options Configure accepted since the last call,
// if any, sets those of them the reconcile job reads in r.opts, and the
// circuit breaker's probe maximum, which is the retry maximum, and returns
// the settings they replaced. It runs on the reconcile job's goroutine,
// between rounds: workers read none of these fields, and the refresh job
// reads its own (settings.refreshing).
func (r *reconciler[Obj]) applySettings() (old options, ok bool) {
	o, ok := r.gate.settings.take()
	if !ok {
		return options{}, false
	}
	old = r.opts
	r.opts.concurrency = o.concurrency
	r.opts.roundSize, r.opts.roundLimiter = o.roundSize, o.roundLimiter
	r.opts.pruneInterval = o.pruneInterval
	r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter = o.retryMin, o.retryMax, o.retryJitter
	if old.retryMax != o.retryMax {
		// Else a breaker registered with a long retry maximum keeps
		// doubling its probes' backoff towards it, hours apart.
		r.breaker.SetProbeMax(o.retryMax, r.clock.now())
	}
	return old, true
}

// reconfigure applies the options accepted since the last round, at the top
// of a round: the executor is resized and the prune schedule restarted if
// their settings changed.
func (l *loop[Obj]) reconfigure() {
	old, ok := l.r.applySettings()
	if !ok {
		return
	}
	o := &l.r.opts
	l.exec.resize(o.concurrency, o.roundSize)
	l.prune.reconfigure(old.pruneInterval != o.pruneInterval, o)
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

// resized is what an executor keeps across a change of its size (see
// executor.resize): the run's context, the signal its pools share, the
// pools retired with operations still under way, and what they left. The
// loop's goroutine owns it.
type resized[Obj any] struct {
	ctx     context.Context
	signal  chan struct{} // every pool's: one finished op of any wakes the loop
	retired []*workerPool[Obj]
	left    []op[Obj] // inline: queued for the old workers, never started; run first
	done    []op[Obj] // finished in a retired pool, not yet returned by operate
	buf     []op[Obj] // what operate returns while any of the above is not empty
}

// busy reports whether anything of an old executor is left.
func (z *resized[Obj]) busy() bool {
	return len(z.retired) > 0 || len(z.left) > 0 || len(z.done) > 0
}

// resize makes e run n operations at once (inline if n == 1) in rounds of
// at most size, at a round boundary, losing and repeating nothing: an
// inline executor has nothing under way then; a pool changing its
// number of workers is retired: its workers finish the operations they
// run, whose outcomes operate returns as they come, and exit, and the work
// queued for them keeps its place, at the head of the new pool's queue
// or run first by the inline executor in this round.
func (e *executor[Obj]) resize(n, size int) {
	r, z := e.r(), &e.resized
	switch {
	case e.pool == nil && n == 1:
		e.size = size
		return
	case e.pool != nil && n == len(e.pool.running):
		e.pool.mu.Lock()
		e.pool.roundSize = size
		e.pool.mu.Unlock()
		e.pool.limit = max(size, 2*n)
		return
	}
	var queued []op[Obj]
	if old := e.pool; old != nil {
		var done []op[Obj]
		queued, done = old.retire()
		z.done = append(z.done, done...)
		if old.held > 0 {
			z.retired = append(z.retired, old)
		} else {
			old.wg.Wait() // nothing under way: its workers are exiting
		}
		e.pool = nil
	}
	if n == 1 {
		r.gate.setWake(nil)
		e.inline, e.size = newRunner(z.ctx, r), size
		z.left = append(z.left, queued...)
	} else {
		e.inline = nil
		e.pool = newWorkerPool(z.ctx, r, z.signal)
		if len(queued) > 0 {
			e.pool.held += len(queued)
			e.pool.mu.Lock()
			e.pool.queue = append(e.pool.queue, queued...)
			e.pool.mu.Unlock()
			e.pool.cond.Broadcast()
		}
	}
	clear(queued)
	e.finished = nil
	if e.pool != nil || z.busy() {
		e.finished = z.signal
	}
}

// r returns the reconciler e runs the operations of.
func (e *executor[Obj]) r() *reconciler[Obj] {
	if e.pool != nil {
		return e.pool.r
	}
	return e.inline.r
}

// operateResized is operate while something of an old executor is left:
// the inline executor runs the ops the old workers never started before
// work, and what the retired pools finished is returned with the rest.
func (e *executor[Obj]) operateResized(txn statedb.ReadTxn, work []op[Obj]) []op[Obj] {
	z := &e.resized
	out := z.buf[:0]
	if e.pool != nil {
		out = append(out, e.pool.operate(work)...)
	} else {
		out = append(append(out, z.left...), work...)
		clear(z.left)
		z.left = z.left[:0]
		e.inline.run(txn, out)
	}
	out = z.collect(out)
	if e.pool == nil && !z.busy() {
		e.finished = nil
	}
	z.buf = out
	return out
}

// load adds to w what the retired pools hold.
func (z *resized[Obj]) load(w execLoad, now time.Time) execLoad {
	for _, p := range z.retired {
		l := p.load(now)
		w.waiting += l.waiting
		w.busy += l.busy
		w.unfinished += l.unfinished
		w.longest = max(w.longest, l.longest)
	}
	return w
}

// stop waits for the retired pools' operations to return and gives back
// everything operate has not.
func (z *resized[Obj]) stop() (left []op[Obj]) {
	left = append(append(left, z.left...), z.done...)
	for _, p := range z.retired {
		p.wg.Wait()
		left = append(left, p.done...)
		p.done, p.held = nil, 0
	}
	z.left, z.done, z.retired, z.buf = nil, nil, nil, nil
	return left
}

// retire stops p's workers from taking work: each finishes the operations
// it runs, puts them on done and exits. It returns the ops queued (never
// started) and those finished that operate has not returned; p.held then
// counts only the ops under way.
func (p *workerPool[Obj]) retire() (queued, done []op[Obj]) {
	p.mu.Lock()
	p.stopped = true
	queued, done = p.queue, p.done
	p.queue, p.done, p.spare = nil, nil, nil
	p.cond.Broadcast()
	p.mu.Unlock()
	p.held -= len(queued) + len(done)
	return queued, done
}

// collect appends to out what the retired pools finished since the last
// call, and forgets each pool once nothing of it is under way.
func (z *resized[Obj]) collect(out []op[Obj]) []op[Obj] {
	out = append(out, z.done...)
	clear(z.done)
	z.done = z.done[:0]
	z.retired = slices.DeleteFunc(z.retired, func(p *workerPool[Obj]) bool {
		p.mu.Lock()
		done := p.done
		p.done = nil
		p.mu.Unlock()
		p.held -= len(done)
		out = append(out, done...)
		if p.held > 0 {
			return false
		}
		p.wg.Wait() // every op returned: its workers are exiting
		return true
	})
	return out
}
