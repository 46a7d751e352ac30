package main

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	runtimemetrics "runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"golang.org/x/time/rate"

	convidx "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

// The soak workload (-workloads soak) runs one converge reconciler for
// -duration under a steady churn and samples, every -soak-interval, what
// would grow if something leaked or fell behind. Everything it exercises
// is scaled by the sample interval I (10 s by default), so that a short
// run with a small interval exercises the same things:
//
//   - writes: -soak-rate object writes per second over -soak-keys keys, in
//     write transactions every 10 ms. A write picks a key at random: an
//     absent key is inserted; a present one is deleted with probability
//     1/4 (so about 4/5 of the keys are present) or else updated. 1% of the
//     versions written fail once or twice in Update before succeeding, and
//     0.1% fail with reconciler.TerminalError.
//   - workers: WithConcurrency(-soak-workers); Update and Delete take
//     -soak-delay each, as a target would.
//   - a dependency table of -soak-keys/100 rows, one of which changes every
//     1000 writes; object k depends on row k mod (keys/100), whose value
//     Update records in the target beside the object's content, and
//     WithDependency re-reconciles the objects of a changed row.
//   - retries: WithRetry(I/100, I/10).
//   - refresh: WithRefreshing(3·I, at most -soak-rate marks per second).
//   - prune: WithPruning(2·I), and Reconciler.Prune() once per interval.
//   - pause: Pause for I/50 once per interval, then Resume.
//   - drift: once per interval, the target's entries of keys/2000 present
//     objects are made wrong (refresh must repair them) and as many orphan
//     entries are added (prune must remove them).
//
// Each sample records the series of soakSeriesDefs: the heap, goroutines,
// objects in the table, the retry queue and operations in flight (the
// reconcilers table's Retrying and InFlight), the rows of the
// "reconcilers" and "reconciler-retries" tables (tables.Cell), the number of
// keys in the reconciler's expvar maps (its metrics caches hold one entry
// per key), and the Pending→Done latency of the writes Done during the
// interval, p50 and p99, measured by the workload: from just before the
// write's commit to the moment a StateDB change iterator on the table
// shows that version Done (it wakes on the table's watch channel; nothing
// polls). Latency counts only writes meant to succeed at the first attempt
// and that no pause overlapped; the others are left out, not hidden: their
// count is in the report. The ranges of the reconciler's own writes are
// internal to it and not sampled.
//
// After the last sample the churn stops, objects of terminal versions are
// written again without the fault, one more prune is asked for, and once
// every object is Done and every damaged entry repaired, the target must
// equal the table: one entry per object, with its seq and its dependency's
// current value, and nothing else. The verdict (soakVerdictRule) is
// printed before the run starts.

// soakConfig holds the soak's flags.
type soakConfig struct {
	duration time.Duration // churn time, warm-up included
	interval time.Duration // between samples; scales everything else
	warmup   time.Duration // samples up to this time are not judged; 0: duration/5
	rate     float64       // object writes per second
	keys     int           // key space of the objects
	workers  int           // WithConcurrency
	delay    time.Duration // duration of each Update and Delete
	seed     uint64        // of the writes' random choices
	settle   time.Duration // bound on the final convergence; 0: 10 refresh intervals + 1 min
}

func (c soakConfig) warmupOrDefault() time.Duration {
	if c.warmup > 0 {
		return c.warmup
	}
	return c.duration / 5
}

func (c soakConfig) refreshInterval() time.Duration { return 3 * c.interval }
func (c soakConfig) pruneInterval() time.Duration   { return 2 * c.interval }
func (c soakConfig) pauseFor() time.Duration        { return c.interval / 50 }
func (c soakConfig) numDeps() int                   { return max(1, c.keys/100) }
func (c soakConfig) driftPerInterval() int          { return max(1, c.keys/2000) }
func (c soakConfig) settleBound() time.Duration {
	if c.settle > 0 {
		return c.settle
	}
	return 10*c.refreshInterval() + time.Minute
}

const (
	soakDeleteShare   = 0.25  // of writes to a present key
	soakFailShare     = 0.01  // of versions written: fail once or twice
	soakTerminalShare = 0.001 // of versions written: fail with a terminal error
	soakWritesPerDep  = 1000  // object writes per dependency change
	soakTick          = 10 * time.Millisecond
)

var soakStatusIndex = convidx.NewStatusIndex(soakGetStatus)

// soakEnv is the soak's running hive and what the workload keeps.
type soakEnv struct {
	cfg     soakConfig
	h       *hive.Hive
	db      *statedb.DB
	tbl     statedb.RWTable[*soakObject]
	deps    statedb.RWTable[*soakDep]
	infos   statedb.Table[*tables.Info]
	retries statedb.Table[*tables.RetryInfo]
	r       reconciler.Reconciler[*soakObject]
	target  *soakTarget
	metrics *metrics.ExpVar
	lat     *soakLatency

	seq    atomic.Uint64 // the last seq written
	epoch  atomic.Uint64 // pause epoch: odd while paused
	writes atomic.Int64  // object writes made
	drops  atomic.Int64  // writes not made because the writer fell behind by more than 100 ms
}

func startSoak(ctx context.Context, cfg soakConfig) (*soakEnv, error) {
	e := &soakEnv{
		cfg:     cfg,
		target:  newSoakTarget(cfg.delay),
		metrics: metrics.NewUnpublishedExpVar(),
		lat:     newSoakLatency(),
	}
	e.h = hive.New(
		cell.SimpleHealthCell, statedb.Cell, job.Cell, tables.Cell,
		cell.Module("soak", "Soak table and reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params, infos statedb.Table[*tables.Info], retries statedb.Table[*tables.RetryInfo]) error {
				return e.register(p, infos, retries)
			}),
		),
	)
	if err := e.h.Start(quietLog, ctx); err != nil {
		return nil, fmt.Errorf("starting soak hive: %w", err)
	}
	// The dependency rows exist from the start, each with value 0, and
	// the table starts as full as the churn keeps it (each key present
	// with probability 1/(1+soakDeleteShare)), so that the churn starts in
	// its steady state rather than filling the table during the warm-up.
	rng := rand.New(rand.NewPCG(cfg.seed+2, cfg.seed))
	wtxn := e.db.WriteTxn(e.deps)
	for d := range uint64(cfg.numDeps()) {
		e.deps.Insert(wtxn, &soakDep{id: d})
	}
	wtxn.Commit()
	for from := uint64(0); from < uint64(cfg.keys); from += 1000 {
		wtxn := e.db.WriteTxn(e.tbl)
		for id := from; id < min(from+1000, uint64(cfg.keys)); id++ {
			if rng.Float64() < 1/(1+soakDeleteShare) {
				e.tbl.Insert(wtxn, &soakObject{id: id, seq: e.seq.Add(1), dep: id % uint64(cfg.numDeps()), st: status.Pending()})
			}
		}
		wtxn.Commit()
	}
	if _, _, err := e.r.WaitUntilReconciled(ctx, e.tbl.Revision(e.db.ReadTxn())); err != nil {
		return nil, errors.Join(fmt.Errorf("waiting for the initial objects: %w", err), e.stop())
	}
	return e, nil
}

func (e *soakEnv) register(p reconciler.Params, infos statedb.Table[*tables.Info], retries statedb.Table[*tables.RetryInfo]) error {
	var err error
	e.db, e.infos, e.retries = p.DB, infos, retries
	if e.tbl, err = statedb.NewTable(p.DB, "soak-objects", soakIDIndex, soakStatusIndex); err != nil {
		return err
	}
	if e.deps, err = statedb.NewTable(p.DB, "soak-deps", soakDepIndex); err != nil {
		return err
	}
	e.target.deps = e.deps
	c := e.cfg
	nDeps, keys := uint64(c.numDeps()), uint64(c.keys)
	dependents := func(d *soakDep, _ bool) []statedb.Query[*soakObject] {
		qs := make([]statedb.Query[*soakObject], 0, keys/nDeps+1)
		for id := d.id; id < keys; id += nDeps {
			qs = append(qs, soakIDIndex.Query(id))
		}
		return qs
	}
	e.r, err = reconciler.Register(p, e.tbl, (*soakObject).clone, soakSetStatus, soakGetStatus, e.target, nil,
		reconciler.WithName("soak"),
		reconciler.WithMetrics(e.metrics),
		reconciler.WithConcurrency(c.workers),
		reconciler.WithRetry(c.interval/100, c.interval/10),
		reconciler.WithRefreshing(c.refreshInterval(), rate.NewLimiter(rate.Limit(c.rate), max(1, int(c.rate/10)))),
		reconciler.WithPruning(c.pruneInterval()),
		reconciler.WithDependency(e.deps, dependents),
	)
	return err
}

func (e *soakEnv) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.h.Stop(quietLog, ctx)
}

// soakExpect is a write whose Done the latency observer waits for.
type soakExpect struct {
	seq   uint64
	at    time.Time // just before the write's commit
	epoch uint64    // pause epoch at that time
	clean bool      // meant to succeed at the first attempt
}

// soakLatency matches writes with their Done statuses.
type soakLatency struct {
	mu       sync.Mutex
	expect   map[uint64]soakExpect // by object id: the latest write not yet seen Done
	window   []float64             // latencies in ms of the writes seen Done this interval
	excluded int                   // writes seen Done this interval but left out (faults, pauses)
}

func newSoakLatency() *soakLatency {
	return &soakLatency{expect: map[uint64]soakExpect{}}
}

// take returns the latencies and the count of excluded writes of the
// interval that ends, and starts a new one.
func (l *soakLatency) take() ([]float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, x := l.window, l.excluded
	l.window, l.excluded = make([]float64, 0, len(w)), 0
	return w, x
}

// observe watches the table's changes and records the latency of every
// awaited write that is seen Done, until ctx ends.
func (e *soakEnv) observe(ctx context.Context, ready chan<- error) {
	wtxn := e.db.WriteTxn(e.tbl)
	changes, err := e.tbl.Changes(wtxn)
	wtxn.Commit()
	ready <- err
	if err != nil {
		return
	}
	defer changes.Close()
	l := e.lat
	for {
		changed, watch := changes.Next(e.db.ReadTxn())
		now := time.Now()
		epoch := e.epoch.Load()
		l.mu.Lock()
		for c := range changed {
			o := c.Object
			if c.Deleted || o.st.Kind != status.KindDone {
				continue
			}
			x, ok := l.expect[o.id]
			if !ok || x.seq != o.seq {
				continue
			}
			delete(l.expect, o.id)
			if x.clean && x.epoch == epoch && epoch%2 == 0 {
				l.window = append(l.window, float64(now.Sub(x.at))/1e6)
			} else {
				l.excluded++
			}
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-watch:
		}
	}
}

// write makes the churn until ctx ends: every soakTick, the writes due at
// -soak-rate since start (at most 100 ms worth; the rest are dropped and
// counted), in one write transaction with the dependency changes due.
func (e *soakEnv) write(ctx context.Context) {
	c := e.cfg
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))
	keys, nDeps := uint64(c.keys), uint64(c.numDeps())
	depRate := c.rate / soakWritesPerDep
	maxBatch := max(1, int(c.rate/10))
	tick := time.NewTicker(soakTick)
	defer tick.Stop()
	start := time.Now()
	var due, depsDue int
	type expect struct {
		id    uint64
		seq   uint64
		clean bool
	}
	var batch []expect
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		elapsed := time.Since(start).Seconds()
		n := int(c.rate*elapsed) - due
		due += n
		if n > maxBatch {
			e.drops.Add(int64(n - maxBatch))
			n = maxBatch
		}
		nd := int(depRate*elapsed) - depsDue
		depsDue += nd
		if n == 0 && nd == 0 {
			continue
		}
		batch = batch[:0]
		wtxn := e.db.WriteTxn(e.tbl, e.deps)
		for range nd {
			e.deps.Insert(wtxn, &soakDep{id: rng.Uint64N(nDeps), val: e.seq.Add(1)})
		}
		for range n {
			id := rng.Uint64N(keys)
			old, _, ok := e.tbl.Get(wtxn, soakIDIndex.Query(id))
			if ok && rng.Float64() < soakDeleteShare {
				e.tbl.Delete(wtxn, old)
				continue
			}
			o := &soakObject{id: id, seq: e.seq.Add(1), dep: id % nDeps, st: status.Pending()}
			switch r := rng.Float64(); {
			case r < soakTerminalShare:
				o.terminal = true
			case r < soakTerminalShare+soakFailShare:
				o.fails = uint8(1 + rng.IntN(2))
			}
			e.tbl.Insert(wtxn, o)
			batch = append(batch, expect{id, o.seq, !o.terminal && o.fails == 0})
		}
		l := e.lat
		l.mu.Lock()
		at, epoch := time.Now(), e.epoch.Load()
		for _, x := range batch {
			l.expect[x.id] = soakExpect{seq: x.seq, at: at, epoch: epoch, clean: x.clean}
		}
		l.mu.Unlock()
		wtxn.Commit()
		e.writes.Add(int64(n))
	}
}

// soakSample is one sample: the time since the churn started, and a value
// per series of soakSeriesDefs.
type soakSample struct {
	at time.Duration
	v  [numSoakSeries]float64
}

// Indexes of soakSample.v.
const (
	seriesHeapLive = iota
	seriesHeapInuse
	seriesGoroutines
	seriesObjects
	seriesRetrying
	seriesRetryRows
	seriesInFlight
	seriesReconcilerRows
	seriesExpvarKeys
	seriesP50
	seriesP99
	seriesWrites
	seriesUpdates
	seriesLatencyN
	seriesExcluded
	numSoakSeries
)

// soakSeriesDef describes one series: how to show it, and how the verdict
// judges it.
type soakSeriesDef struct {
	name   string
	unit   string  // shown after values divided by scale
	scale  float64 //
	judged bool    // by soakVerdictRule
	// floor is the series' resolution in its raw unit: a growth this small
	// never counts, whatever the noise.
	floor float64
}

var soakSeriesDefs = [numSoakSeries]soakSeriesDef{
	seriesHeapLive:       {"heap live", "MiB", 1 << 20, true, 1 << 20},
	seriesHeapInuse:      {"heap in use", "MiB", 1 << 20, true, 2 << 20},
	seriesGoroutines:     {"goroutines", "", 1, true, 2},
	seriesObjects:        {"objects in table", "", 1, true, 2},
	seriesRetrying:       {"retrying (Info)", "", 1, true, 2},
	seriesRetryRows:      {"reconciler-retries rows", "", 1, true, 2},
	seriesInFlight:       {"in flight (Info)", "", 1, true, 2},
	seriesReconcilerRows: {"reconcilers rows", "", 1, true, 1},
	seriesExpvarKeys:     {"expvar keys", "", 1, true, 1},
	seriesP50:            {"latency p50", "ms", 1, true, 0.05},
	seriesP99:            {"latency p99", "ms", 1, true, 0.2},
	seriesWrites:         {"writes/s", "", 1, false, 0},
	seriesUpdates:        {"updates/s", "", 1, false, 0},
	seriesLatencyN:       {"latency samples", "", 1, false, 0},
	seriesExcluded:       {"latency excluded", "", 1, false, 0},
}

var heapLiveSample = []runtimemetrics.Sample{{Name: "/gc/heap/live:bytes"}}

// sample reads every series; prev is the previous sample's counters.
func (e *soakEnv) sample(at, since time.Duration, prevWrites, prevUpdates int64) soakSample {
	s := soakSample{at: at}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	runtimemetrics.Read(heapLiveSample)
	if heapLiveSample[0].Value.Kind() == runtimemetrics.KindUint64 {
		s.v[seriesHeapLive] = float64(heapLiveSample[0].Value.Uint64())
	}
	s.v[seriesHeapInuse] = float64(ms.HeapInuse)
	s.v[seriesGoroutines] = float64(runtime.NumGoroutine())
	txn := e.db.ReadTxn()
	s.v[seriesObjects] = float64(e.tbl.NumObjects(txn))
	for info := range e.infos.All(txn) {
		s.v[seriesRetrying] = float64(info.Retrying)
		s.v[seriesInFlight] = float64(info.InFlight)
	}
	s.v[seriesRetryRows] = float64(e.retries.NumObjects(txn))
	s.v[seriesReconcilerRows] = float64(e.infos.NumObjects(txn))
	s.v[seriesExpvarKeys] = float64(expvarKeys(e.metrics.Map()))
	lats, excluded := e.lat.take()
	slices.Sort(lats)
	s.v[seriesP50], s.v[seriesP99] = quantile(lats, 0.50), quantile(lats, 0.99)
	s.v[seriesLatencyN] = float64(len(lats))
	s.v[seriesExcluded] = float64(excluded)
	secs := since.Seconds()
	s.v[seriesWrites] = float64(e.writes.Load()-prevWrites) / secs
	s.v[seriesUpdates] = float64(e.target.updates.Load()-prevUpdates) / secs
	return s
}

// expvarKeys counts the keys of m and of the maps in it, recursively.
func expvarKeys(m *expvar.Map) int {
	n := 0
	m.Do(func(kv expvar.KeyValue) {
		n++
		if sub, ok := kv.Value.(*expvar.Map); ok {
			n += expvarKeys(sub)
		}
	})
	return n
}

func (s soakSample) String() string {
	d := soakSeriesDefs
	mib := func(i int) string { return fmt.Sprintf("%.1f", s.v[i]/d[i].scale) }
	return fmt.Sprintf("heap live %s MiB, in use %s MiB; goroutines %.0f; objects %.0f; retrying %.0f (rows %.0f); in flight %.0f; reconcilers rows %.0f; expvar keys %.0f; latency p50 %.3f ms p99 %.3f ms (n=%.0f, %.0f excluded); %.0f writes/s, %.0f updates/s",
		mib(seriesHeapLive), mib(seriesHeapInuse), s.v[seriesGoroutines], s.v[seriesObjects], s.v[seriesRetrying], s.v[seriesRetryRows],
		s.v[seriesInFlight], s.v[seriesReconcilerRows], s.v[seriesExpvarKeys], s.v[seriesP50], s.v[seriesP99], s.v[seriesLatencyN], s.v[seriesExcluded],
		s.v[seriesWrites], s.v[seriesUpdates])
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// soakResult is what a soak run yields.
type soakResult struct {
	cfg      soakConfig
	samples  []soakSample
	verdicts [numSoakSeries]growthVerdict // of the judged series
	end      soakEnd
	stats    soakStats
	pass     bool
	reasons  []string // why not
}

// soakStats are the soak's totals.
type soakStats struct {
	writes, drops                       int64
	updates, deletes, failures, terms   int64
	prunes, refreshRepairs, pruneRepair int64
	rewritten                           int // terminal objects written again at the end
}

// errSoakFailed is returned by run when the soak's verdict is a failure;
// the program exits with status 1.
var errSoakFailed = errors.New("soak verdict: FAIL")

// runSoak runs the soak workload and prints its rule, progress and verdict.
func runSoak(ctx context.Context, cfg soakConfig, stdout, progress io.Writer) (_ *soakResult, err error) {
	res := &soakResult{cfg: cfg}
	n := int(cfg.duration / cfg.interval)
	if n < 1 {
		return nil, fmt.Errorf("-duration %s is shorter than -soak-interval %s", cfg.duration, cfg.interval)
	}
	fmt.Fprintf(stdout, "\nSoak, %s, machine: %s\n", time.Now().Format("2006-01-02 15:04 MST"), machine())
	fmt.Fprintf(stdout, "%s of churn, one converge reconciler with %d workers; %.0f writes/s over %d keys (table preloaded to its steady state); sample every %s.\n",
		cfg.duration, cfg.workers, cfg.rate, cfg.keys, cfg.interval)
	fmt.Fprintf(stdout, "Each Update/Delete takes %s; 1%% of versions fail once or twice, 0.1%% terminally; dependency table of %d rows, a change every %d writes;\n",
		cfg.delay, cfg.numDeps(), soakWritesPerDep)
	fmt.Fprintf(stdout, "WithRetry(%s, %s), WithRefreshing(%s), WithPruning(%s) and Prune() every %s, a %s pause every %s, %d drifted and %d orphan entries every %s.\n",
		cfg.interval/100, cfg.interval/10, cfg.refreshInterval(), cfg.pruneInterval(), cfg.interval, cfg.pauseFor(), cfg.interval,
		cfg.driftPerInterval(), cfg.driftPerInterval(), cfg.interval)
	fmt.Fprintf(stdout, "Verdict rule, stated before the run: %s\n", soakVerdictRule(cfg))

	e, err := startSoak(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if stopErr := e.stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stopping soak hive: %w", stopErr)
		}
	}()
	obsCtx, stopObs := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopObs()
	ready := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); e.observe(obsCtx, ready) }()
	if err = <-ready; err != nil {
		return nil, err
	}
	writeCtx, stopWrites := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() { defer writer.Done(); e.write(writeCtx) }()
	stopWriter := func() {
		stopWrites()
		writer.Wait()
	}
	defer stopWriter()

	rng := rand.New(rand.NewPCG(cfg.seed+1, cfg.seed))
	start := time.Now()
	last := start
	prevWrites, prevUpdates := e.writes.Load(), e.target.updates.Load()
	paused := false
	resume := func() {
		if paused {
			e.r.Resume()
			e.epoch.Add(1)
			paused = false
		}
	}
	for k := range n {
		base := start.Add(time.Duration(k) * cfg.interval)
		steps := []struct {
			at time.Duration
			do func()
		}{
			{cfg.interval / 4, e.r.Prune},
			{cfg.interval / 2, func() { e.epoch.Add(1); paused = true; e.r.Pause() }},
			{cfg.interval/2 + cfg.pauseFor(), resume},
			{3 * cfg.interval / 4, func() {
				ids := make([]uint64, 4*cfg.driftPerInterval())
				for i := range ids {
					ids[i] = rng.Uint64N(uint64(cfg.keys))
				}
				e.target.drift(ids, cfg.driftPerInterval(), uint64(cfg.keys))
			}},
		}
		for _, st := range steps {
			if err := sleepUntil(ctx, base.Add(st.at)); err != nil {
				resume()
				return nil, err
			}
			st.do()
		}
		if err := sleepUntil(ctx, base.Add(cfg.interval)); err != nil {
			return nil, err
		}
		now := time.Now()
		w, u := e.writes.Load(), e.target.updates.Load()
		s := e.sample(now.Sub(start), now.Sub(last), prevWrites, prevUpdates)
		last, prevWrites, prevUpdates = now, w, u
		res.samples = append(res.samples, s)
		fmt.Fprintf(progress, "[soak %s] %s\n", s.at.Round(cfg.interval/10), s)
	}
	stopWriter()
	fmt.Fprintf(progress, "[soak] churn stopped after %s; converging\n", time.Since(start).Round(time.Millisecond))

	sctx, cancel := context.WithTimeout(ctx, cfg.settleBound())
	defer cancel()
	res.end, err = e.converge(sctx)
	if err != nil {
		return nil, err
	}
	t := e.target
	res.stats = soakStats{
		writes: e.writes.Load(), drops: e.drops.Load(),
		updates: t.updates.Load(), deletes: t.deletes.Load(), failures: t.failures.Load(), terms: t.terminals.Load(),
		prunes: t.prunes.Load(), refreshRepairs: t.refreshRepairs.Load(), pruneRepair: t.pruneRepairs.Load(),
		rewritten: res.end.rewritten,
	}
	res.judge()
	printSoak(stdout, res)
	return res, nil
}
