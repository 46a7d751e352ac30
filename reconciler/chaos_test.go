package reconciler_test

// TestChaos runs the reconciler against an in-memory target under random
// schedules: inserts, updates, deletes and re-inserts over a small key space,
// operations that fail, fail after applying, fail terminally, ask for a
// retry, panic or are slow (honouring ctx), random Reconciler.Prune calls,
// and restarts (a new hive and a freshly populated table, the same target).
// At the end the faults are turned off and the system must converge: the
// target holds exactly the table's key→value pairs, every object is Done
// (or Error for a "poison" value, which always fails terminally and must
// never reach the target), and health is OK.
//
// Every seed is a subtest, TestChaos/<config>/seed=<n>; its schedule is
// derived from the seed alone. Fault decisions come from a second RNG with
// the same seed, drawn as operations arrive, so with several workers a replay
// takes the same steps but not necessarily the same faults.
//
// Environment:
//
//	CONVERGE_CHAOS_SEEDS=N  run N seeds per configuration (default 10)
//	CONVERGE_CHAOS_FIRST=K  number seeds from K (default 1), to cover new ground
//	CONVERGE_CHAOS_SEED=S   run seed S only (replay); or -run 'TestChaos/<config>/seed=S$'
//	CONVERGE_CHAOS_LOG=1    log the hive and reconciler at debug level
//
// A long run:
//
//	CONVERGE_CHAOS_SEEDS=1000 go test -run TestChaos -failfast ./reconciler/

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

const (
	chaosDefaultSeeds = 10
	chaosKeys         = 30
	chaosMaxRestarts  = 3
	chaosHealTimeout  = 20 * time.Second
)

type chaosConfig struct {
	workers int
	batch   bool
}

func (c chaosConfig) String() string {
	mode := "single"
	if c.batch {
		mode = "batch"
	}
	return fmt.Sprintf("workers=%d-%s", c.workers, mode)
}

func envInt(t *testing.T, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "environment variable %s", name)
	return n
}

func chaosSeeds(t *testing.T) []uint64 {
	if os.Getenv("CONVERGE_CHAOS_SEED") != "" {
		return []uint64{envInt(t, "CONVERGE_CHAOS_SEED", 0)}
	}
	n := envInt(t, "CONVERGE_CHAOS_SEEDS", chaosDefaultSeeds)
	first := envInt(t, "CONVERGE_CHAOS_FIRST", 1)
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = first + uint64(i)
	}
	return seeds
}

func TestChaos(t *testing.T) {
	seeds := chaosSeeds(t)
	configs := []chaosConfig{{1, false}, {1, true}, {4, false}, {4, true}}
	for _, cfg := range configs {
		t.Run(cfg.String(), func(t *testing.T) {
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					runChaos(t, cfg, seed)
				})
			}
		})
	}
}

// --- the target ---

var errChaos = errors.New("chaos")

type chaosFault int

const (
	faultNone chaosFault = iota
	faultError
	faultApplyThenError // the change is applied, but reported as failed
	faultRetryAfter
	faultPanic
	faultTerminal // deletes only: a terminal error must not lose the delete
	faultSlow
)

func isPoison(value string) bool { return strings.HasPrefix(value, "poison") }

// chaosTarget is the target system shared by every generation (hive) of a
// run. It holds key→value pairs, decides faults from a seeded RNG, and
// records violations of the reconciler's guarantees that it can see.
type chaosTarget struct {
	mu         sync.Mutex
	rng        *rand.Rand
	failProb   float64
	slowProb   float64
	healed     bool
	data       map[string]string
	calls      int
	violations []string
	changed    chan struct{} // closed and replaced on every call
}

func newChaosTarget(seed uint64, failProb, slowProb float64) *chaosTarget {
	return &chaosTarget{
		rng:      rand.New(rand.NewPCG(seed, 0xfa017)),
		failProb: failProb,
		slowProb: slowProb,
		data:     map[string]string{},
		changed:  make(chan struct{}),
	}
}

// notify must be called with mu held.
func (c *chaosTarget) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *chaosTarget) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

func (c *chaosTarget) heal() {
	c.mu.Lock()
	c.healed = true
	c.mu.Unlock()
}

// delay returns a random slowness, mostly well under a millisecond.
func (c *chaosTarget) delay() time.Duration {
	if c.rng.IntN(20) == 0 {
		return time.Duration(c.rng.Int64N(int64(15 * time.Millisecond)))
	}
	return time.Duration(c.rng.Int64N(int64(time.Millisecond)))
}

// decide draws the fault for one call.
func (c *chaosTarget) decide() (chaosFault, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.healed {
		return faultNone, 0
	}
	if c.rng.Float64() >= c.failProb {
		if c.rng.Float64() < c.slowProb {
			return faultSlow, c.delay()
		}
		return faultNone, 0
	}
	switch c.rng.IntN(6) {
	case 0, 1:
		return faultError, 0
	case 2:
		return faultApplyThenError, 0
	case 3:
		return faultRetryAfter, time.Duration(c.rng.Int64N(int64(5 * time.Millisecond)))
	case 4:
		return faultPanic, 0
	default:
		return faultTerminal, 0
	}
}

// chance draws a fault-free random decision (for batch-level faults).
func (c *chaosTarget) chance(p float64) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.healed {
		return false, 0
	}
	return c.rng.Float64() < p, c.rng.IntN(1 << 20)
}

func (c *chaosTarget) set(key, value string) {
	c.mu.Lock()
	c.data[key] = value
	c.notify()
	c.mu.Unlock()
}

func (c *chaosTarget) del(key string) {
	c.mu.Lock()
	delete(c.data, key)
	c.notify()
	c.mu.Unlock()
}

func (c *chaosTarget) snapshot() (map[string]string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.data), c.changed
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// chaosOps is the Operations (and BatchOperations) of one generation. It
// checks, per generation, that at most one operation per key is in flight,
// that a key's operations come in revision order, that nothing starts after
// the hive stopped and that Prune comes only after initialization, with the
// whole table.
type chaosOps struct {
	c     *chaosTarget
	gen   int
	table statedb.Table[*item]

	// Guarded by c.mu.
	initialized  bool
	stopped      bool
	inFlight     map[string]int
	running      int
	lastRev      map[string]statedb.Revision
	prunes       int // completed prunes
	pruneRunning bool
	lastPruneOK  bool
}

func (o *chaosOps) enter(op, key string, rev statedb.Revision) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.notify()
	if o.stopped {
		c.violate("gen %d: %s %s@%d started after Stop returned", o.gen, op, key, rev)
	}
	o.inFlight[key]++
	o.running++
	if o.inFlight[key] > 1 {
		c.violate("gen %d: %s %s@%d while another operation on %s is in flight", o.gen, op, key, rev, key)
	}
	if last := o.lastRev[key]; rev < last {
		c.violate("gen %d: %s %s@%d after an operation on revision %d", o.gen, op, key, rev, last)
	}
	o.lastRev[key] = rev
}

func (o *chaosOps) leave(key string) {
	o.c.mu.Lock()
	o.inFlight[key]--
	o.running--
	o.c.mu.Unlock()
}

func (o *chaosOps) update(ctx context.Context, it *item, inBatch bool) error {
	c := o.c
	f, d := c.decide()
	switch f {
	case faultError, faultTerminal:
		return fmt.Errorf("update %s: %w", it.ID, errChaos)
	case faultRetryAfter:
		return reconciler.RetryAfter(d, fmt.Errorf("update %s: busy: %w", it.ID, errChaos))
	case faultPanic:
		if inBatch {
			return fmt.Errorf("update %s: %w", it.ID, errChaos)
		}
		panic(fmt.Sprintf("update %s: chaos panic", it.ID))
	case faultSlow:
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
	}
	if isPoison(it.Value) {
		return reconciler.TerminalError(fmt.Errorf("update %s: poison value %q", it.ID, it.Value))
	}
	c.set(it.ID, it.Value)
	if f == faultApplyThenError {
		return fmt.Errorf("update %s: applied, then: %w", it.ID, errChaos)
	}
	return nil
}

func (o *chaosOps) delete(ctx context.Context, it *item, inBatch bool) error {
	c := o.c
	f, d := c.decide()
	switch f {
	case faultError:
		return fmt.Errorf("delete %s: %w", it.ID, errChaos)
	case faultTerminal:
		return reconciler.TerminalError(fmt.Errorf("delete %s: terminal: %w", it.ID, errChaos))
	case faultRetryAfter:
		return reconciler.RetryAfter(d, fmt.Errorf("delete %s: busy: %w", it.ID, errChaos))
	case faultPanic:
		if inBatch {
			return fmt.Errorf("delete %s: %w", it.ID, errChaos)
		}
		panic(fmt.Sprintf("delete %s: chaos panic", it.ID))
	case faultSlow:
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
	}
	c.del(it.ID)
	if f == faultApplyThenError {
		return fmt.Errorf("delete %s: applied, then: %w", it.ID, errChaos)
	}
	return nil
}

func (o *chaosOps) Update(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.enter("update", it.ID, rev)
	defer o.leave(it.ID)
	return o.update(ctx, it, false)
}

func (o *chaosOps) Delete(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.enter("delete", it.ID, rev)
	defer o.leave(it.ID)
	return o.delete(ctx, it, false)
}

// batch applies fn to every entry; sometimes the whole batch panics part way.
func (o *chaosOps) batch(ctx context.Context, op string, batch []reconciler.BatchEntry[*item], fn func(context.Context, *item, bool) error) {
	for i := range batch {
		o.enter(op, batch[i].Object.ID, batch[i].Revision)
	}
	defer func() {
		for i := range batch {
			o.leave(batch[i].Object.ID)
		}
	}()
	panics, at := o.c.chance(o.c.failProb / 4)
	at %= len(batch)
	for i := range batch {
		if panics && i == at {
			panic(fmt.Sprintf("%s batch: chaos panic at entry %d of %d", op, i, len(batch)))
		}
		batch[i].Result = fn(ctx, batch[i].Object, true)
	}
}

func (o *chaosOps) UpdateBatch(ctx context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batch(ctx, "update", batch, o.update)
}

func (o *chaosOps) DeleteBatch(ctx context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batch(ctx, "delete", batch, o.delete)
}

func (o *chaosOps) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (err error) {
	c := o.c
	c.mu.Lock()
	c.calls++
	c.notify()
	if o.stopped {
		c.violate("gen %d: prune started after Stop returned", o.gen)
	}
	if !o.initialized {
		c.violate("gen %d: prune before the table was initialized", o.gen)
	}
	o.pruneRunning = true
	c.mu.Unlock()
	ok := false
	defer func() {
		c.mu.Lock()
		o.prunes++
		o.pruneRunning = false
		o.lastPruneOK = ok
		c.notify()
		c.mu.Unlock()
	}()

	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	var all []string
	for it := range o.table.All(txn) {
		all = append(all, it.ID)
	}
	if len(all) != len(want) || !allIn(all, want) {
		c.mu.Lock()
		c.violate("gen %d: prune given %v, the table holds %v", o.gen, slices.Sorted(maps.Keys(want)), all)
		c.mu.Unlock()
	}

	f, d := c.decide()
	partial := false
	switch f {
	case faultError, faultTerminal, faultRetryAfter:
		return fmt.Errorf("prune: %w", errChaos)
	case faultPanic:
		panic("prune: chaos panic")
	case faultSlow:
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
	case faultApplyThenError:
		partial = true
	}
	c.mu.Lock()
	n := 0
	for k := range c.data {
		if !want[k] {
			n++
			if partial && n%2 == 0 {
				continue
			}
			delete(c.data, k)
		}
	}
	c.notify()
	c.mu.Unlock()
	if partial {
		return fmt.Errorf("prune: partly done: %w", errChaos)
	}
	ok = true
	return nil
}

func allIn(keys []string, set map[string]bool) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return true
}

// --- a run ---

// chaosGen is one hive: a new DB, table and reconciler over the same target.
type chaosGen struct {
	hive     *hive.Hive
	db       *statedb.DB
	table    statedb.RWTable[*item]
	index    statedb.Index[*item, status.Kind]
	rec      reconciler.Reconciler[*item]
	health   *cell.SimpleHealth
	ops      *chaosOps
	markDone func(statedb.WriteTxn)
}

type chaosRun struct {
	t       *testing.T
	cfg     chaosConfig
	seed    uint64
	rng     *rand.Rand // the schedule
	target  *chaosTarget
	opts    []reconciler.Option
	refresh bool
	// manualPrune enables random Prune() calls. Without them, the prune at
	// the end of each generation can only be the one after initialization.
	manualPrune bool
	log         *slog.Logger
	gen         *chaosGen
	gens        int
	restarts    int
	initIn      int // steps until the current generation is marked initialized; <0 once done
	steps       []string
	// model is what the test wrote: the table's key→value pairs must equal
	// it at all times, since the reconciler writes only statuses.
	model  map[string]string
	values int
}

func runChaos(t *testing.T, cfg chaosConfig, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	run := &chaosRun{t: t, cfg: cfg, seed: seed, rng: rng, model: map[string]string{}}

	// Per-seed settings.
	failProb := 0.05 + 0.45*rng.Float64()
	slowProb := 0.3 * rng.Float64()
	run.target = newChaosTarget(seed, failProb, slowProb)
	roundSize := []int{1, 3, 10, 1000}[rng.IntN(4)]
	pruneInterval := time.Hour // only the initial prune and Prune() calls
	if rng.IntN(5) == 0 {
		pruneInterval = time.Duration(5+rng.IntN(30)) * time.Millisecond
	}
	run.opts = []reconciler.Option{
		reconciler.WithConcurrency(cfg.workers),
		reconciler.WithRetry(time.Millisecond, 10*time.Millisecond),
		reconciler.WithRoundLimits(roundSize, nil),
		reconciler.WithPruning(pruneInterval),
	}
	run.manualPrune = rng.IntN(3) > 0
	var timeout time.Duration
	if rng.IntN(4) == 0 {
		timeout = 20 * time.Millisecond
		run.opts = append(run.opts, reconciler.WithOperationTimeout(timeout))
	}
	if rng.IntN(3) == 0 {
		run.refresh = true
		run.opts = append(run.opts, reconciler.WithRefreshing(time.Duration(20+rng.IntN(50))*time.Millisecond, rate.NewLimiter(2000, 100)))
	}
	settings := fmt.Sprintf("fail=%.2f slow=%.2f round=%d prune=%s manual-prune=%v timeout=%s refresh=%v",
		failProb, slowProb, roundSize, pruneInterval, run.manualPrune, timeout, run.refresh)

	level := slog.LevelError + 1 // panics are logged at Error; keep quiet by default
	if os.Getenv("CONVERGE_CHAOS_LOG") != "" {
		level = slog.LevelDebug
	}
	run.log = hivetest.Logger(t, hivetest.LogLevel(level))

	t.Cleanup(func() {
		if run.gen != nil && run.gen.hive != nil {
			_ = run.gen.hive.Stop(run.log, context.Background())
		}
		if t.Failed() {
			from := max(0, len(run.steps)-60)
			t.Logf("chaos %s seed=%d (%s) failed; last steps:\n  %s", cfg, seed, settings,
				strings.Join(run.steps[from:], "\n  "))
			t.Logf("replay: CONVERGE_CHAOS_SEED=%d go test -run 'TestChaos/%s/seed=%d$' -v ./reconciler/", seed, cfg, seed)
		}
	})

	run.startGen(nil)
	steps := 80 + rng.IntN(170)
	for range steps {
		run.step()
		if run.initIn > 0 {
			run.initIn--
		}
		if run.initIn == 0 {
			run.markInitialized()
		}
	}
	run.healAndCheck(settings)
	run.stopGen()
	run.checkViolations()
}

func (r *chaosRun) logf(format string, args ...any) {
	r.steps = append(r.steps, fmt.Sprintf(format, args...))
}

func (r *chaosRun) key() string { return fmt.Sprintf("k%02d", r.rng.IntN(chaosKeys)) }

func (r *chaosRun) value() string {
	r.values++
	if r.rng.IntN(10) == 0 {
		return fmt.Sprintf("poison-%d.%d", r.gens, r.values)
	}
	return fmt.Sprintf("v%d.%d", r.gens, r.values)
}

// write applies changes in one transaction: a value of "" deletes the key.
type chaosChange struct{ key, value string }

func (r *chaosRun) write(changes ...chaosChange) statedb.Revision {
	g := r.gen
	wtxn := g.db.WriteTxn(g.table)
	for _, ch := range changes {
		var err error
		if ch.value == "" {
			_, _, err = g.table.Delete(wtxn, &item{ID: ch.key})
			delete(r.model, ch.key)
		} else {
			_, _, err = g.table.Insert(wtxn, &item{ID: ch.key, Value: ch.value, Status: status.Pending()})
			r.model[ch.key] = ch.value
		}
		require.NoError(r.t, err)
	}
	rev := g.table.Revision(wtxn)
	wtxn.Commit()
	return rev
}

func (r *chaosRun) current(key string) (string, bool) {
	v, ok := r.model[key]
	return v, ok
}

// tableProblem reports how the table's key→value pairs differ from the
// model, or "".
func (r *chaosRun) tableProblem() string {
	inTable := map[string]string{}
	for obj := range r.gen.table.All(r.gen.db.ReadTxn()) {
		inTable[obj.ID] = obj.Value
	}
	if maps.Equal(inTable, r.model) {
		return ""
	}
	return fmt.Sprintf("the table holds %s, the test wrote %s", describe(inTable), describe(r.model))
}

func (r *chaosRun) checkTable() {
	if problem := r.tableProblem(); problem != "" {
		r.t.Fatalf("seed %d: %s", r.seed, problem)
	}
}

func (r *chaosRun) step() {
	switch p := r.rng.IntN(100); {
	case p < 33: // insert or update
		k := r.key()
		v := r.value()
		if old, ok := r.current(k); ok && r.rng.IntN(8) == 0 {
			v = old // same value, new Pending status
		}
		rev := r.write(chaosChange{k, v})
		r.logf("@%d set %s=%s", rev, k, v)
	case p < 48: // delete
		k := r.key()
		rev := r.write(chaosChange{k, ""})
		r.logf("@%d delete %s", rev, k)
	case p < 58: // a transaction of several changes, possibly of one key
		n := 2 + r.rng.IntN(7)
		changes := make([]chaosChange, n)
		words := make([]string, n)
		for i := range changes {
			changes[i].key = r.key()
			if r.rng.IntN(3) > 0 {
				changes[i].value = r.value()
			}
			words[i] = changes[i].key + "=" + changes[i].value
		}
		rev := r.write(changes...)
		r.logf("@%d txn %s", rev, strings.Join(words, " "))
	case p < 65: // delete then re-insert, in two transactions
		k := r.key()
		rev1 := r.write(chaosChange{k, ""})
		v := r.value()
		rev2 := r.write(chaosChange{k, v})
		r.logf("@%d delete %s; @%d re-insert %s=%s", rev1, k, rev2, k, v)
	case p < 70:
		if !r.manualPrune {
			r.logf("(no Prune() in this seed)")
			return
		}
		r.gen.rec.Prune()
		r.logf("Prune()")
	case p < 84: // let the reconciler catch up with the current revision, or not
		rev := r.gen.table.Revision(r.gen.db.ReadTxn())
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.rng.IntN(20))*time.Millisecond)
		reached, low, err := r.gen.rec.WaitUntilReconciled(ctx, rev)
		cancel()
		r.logf("wait for @%d: reached @%d, retry low @%d, err=%v", rev, reached, low, err)
		r.checkTable()
	case p < 96: // wait for some operations on the target
		n := 1 + r.rng.IntN(10)
		r.waitCalls(n, 10*time.Millisecond)
		r.logf("wait for %d calls", n)
	default:
		if r.restarts >= chaosMaxRestarts {
			r.logf("(no restart: limit reached)")
			return
		}
		r.restarts++
		r.checkTable()
		desired := maps.Clone(r.model)
		r.stopGen()
		r.startGen(desired)
		r.logf("restart as generation %d with %s", r.gens, describe(desired))
	}
}

// waitCalls waits for n more calls on the target, or for the timeout.
func (r *chaosRun) waitCalls(n int, timeout time.Duration) {
	c := r.target
	c.mu.Lock()
	until := c.calls + n
	c.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		calls, changed := c.calls, c.changed
		c.mu.Unlock()
		if calls >= until {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			return
		}
	}
}

// startGen starts a hive over a new table holding desired, all Pending, and
// marks the table initialized now or after a few steps.
func (r *chaosRun) startGen(desired map[string]string) {
	r.gens++
	g := &chaosGen{index: convergeindex.NewStatusIndex((*item).getStatus)}
	g.ops = &chaosOps{c: r.target, gen: r.gens, inFlight: map[string]int{}, lastRev: map[string]statedb.Revision{}}
	var batch reconciler.BatchOperations[*item]
	if r.cfg.batch {
		batch = g.ops
	}
	g.hive = hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Chaos test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params, h *cell.SimpleHealth) error {
				g.db, g.health = db, h
				var err error
				g.table, err = statedb.NewTable(db, "items", itemID, g.index)
				if err != nil {
					return err
				}
				g.ops.table = g.table
				wtxn := db.WriteTxn(g.table)
				g.markDone = g.table.RegisterInitializer(wtxn, "chaos")
				wtxn.Commit()
				g.rec, err = reconciler.Register(p, g.table, (*item).clone, (*item).setStatus, (*item).getStatus, g.ops, batch, r.opts...)
				return err
			}),
		),
	)
	require.NoError(r.t, g.hive.Start(r.log, context.Background()))
	r.gen = g

	// Populate in a few transactions while the reconciler already runs.
	keys := slices.Sorted(maps.Keys(desired))
	for len(keys) > 0 {
		n := min(len(keys), 1+r.rng.IntN(chaosKeys))
		changes := make([]chaosChange, n)
		for i, k := range keys[:n] {
			changes[i] = chaosChange{k, desired[k]}
		}
		r.write(changes...)
		keys = keys[n:]
	}
	r.initIn = 0
	if r.rng.IntN(2) == 0 {
		r.initIn = 1 + r.rng.IntN(12)
		if r.manualPrune && r.rng.IntN(2) == 0 {
			r.gen.rec.Prune() // must wait for the initialization
			r.logf("Prune() before initialization")
		}
	}
	if r.initIn == 0 {
		r.markInitialized()
	}
}

func (r *chaosRun) markInitialized() {
	g := r.gen
	r.target.mu.Lock()
	g.ops.initialized = true
	r.target.mu.Unlock()
	wtxn := g.db.WriteTxn(g.table)
	g.markDone(wtxn)
	wtxn.Commit()
	r.initIn = -1
	r.logf("table initialized")
}

// stopGen stops the current hive and checks that no operation outlives Stop.
func (r *chaosRun) stopGen() {
	g := r.gen
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := g.hive.Stop(r.log, ctx)
	took := time.Since(start)
	g.hive = nil
	require.NoError(r.t, err, "stopping generation %d", g.ops.gen)
	c := r.target
	c.mu.Lock()
	if g.ops.running > 0 || g.ops.pruneRunning {
		c.violate("gen %d: %d operation(s) (prune: %v) still running after Stop returned", g.ops.gen, g.ops.running, g.ops.pruneRunning)
	}
	g.ops.stopped = true
	c.mu.Unlock()
	if took > 5*time.Second {
		r.t.Errorf("seed %d: stopping generation %d took %s", r.seed, g.ops.gen, took)
	}
}

func (r *chaosRun) checkViolations() {
	r.target.mu.Lock()
	defer r.target.mu.Unlock()
	if len(r.target.violations) > 0 {
		r.t.Fatalf("seed %d: %d violation(s):\n  %s", r.seed, len(r.target.violations), strings.Join(r.target.violations, "\n  "))
	}
}

// waitFor polls cond whenever the target or the table changes (and every few
// milliseconds, for health) until it holds or the deadline passes.
func (r *chaosRun) waitFor(what string, timeout time.Duration, cond func() string) {
	g := r.gen
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		r.target.mu.Lock()
		changed := r.target.changed
		r.target.mu.Unlock()
		_, tableWatch := g.table.AllWatch(g.db.ReadTxn())
		problem := cond()
		if problem == "" {
			return
		}
		select {
		case <-changed:
		case <-tableWatch:
		case <-tick.C:
		case <-deadline.C:
			r.checkViolations()
			r.t.Fatalf("seed %d: %s: not reached within %s: %s", r.seed, what, timeout, problem)
		}
	}
}

// healAndCheck turns the faults off and checks that the system converges.
func (r *chaosRun) healAndCheck(settings string) {
	r.target.heal()
	r.logf("heal")
	if r.initIn >= 0 {
		r.markInitialized()
	}
	g := r.gen
	c := r.target

	// The first prune after initialization must happen by itself. If the
	// last one failed (faults were on), ask for another.
	r.waitFor("the initial prune", chaosHealTimeout, func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		if g.ops.prunes == 0 || g.ops.pruneRunning {
			return fmt.Sprintf("%d prune(s) done, one running: %v", g.ops.prunes, g.ops.pruneRunning)
		}
		return ""
	})
	c.mu.Lock()
	pruned := g.ops.lastPruneOK
	c.mu.Unlock()
	if !pruned {
		g.rec.Prune()
		r.waitFor("a prune after healing", chaosHealTimeout, func() string {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !g.ops.lastPruneOK {
				return "the last prune failed"
			}
			return ""
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), chaosHealTimeout)
	defer cancel()
	require.NoError(r.t, reconciler.WaitForReconciliation(ctx, g.db, g.table, g.index), "seed %d", r.seed)
	r.waitFor("convergence", chaosHealTimeout, r.converged)

	rev := g.table.Revision(g.db.ReadTxn())
	reached, low, err := g.rec.WaitUntilReconciled(ctx, rev)
	require.NoError(r.t, err, "seed %d", r.seed)
	require.GreaterOrEqual(r.t, reached, rev)
	require.Zero(r.t, low, "seed %d: objects still queued for retry after convergence", r.seed)
	r.checkViolations()
	c.mu.Lock()
	calls := c.calls
	c.mu.Unlock()
	r.t.Logf("seed %d (%s): %d steps, %d generation(s), %d calls, converged on %d objects",
		r.seed, settings, len(r.steps), r.gens, calls, g.table.NumObjects(g.db.ReadTxn()))
}

// converged returns "" if the target matches the table exactly, every object
// is settled and health is OK; otherwise what is wrong.
func (r *chaosRun) converged() string {
	g := r.gen
	data, _ := r.target.snapshot()
	var problems []string
	if problem := r.tableProblem(); problem != "" {
		problems = append(problems, problem)
	}
	inTable := map[string]bool{}
	for obj := range g.table.All(g.db.ReadTxn()) {
		inTable[obj.ID] = true
		got, has := data[obj.ID]
		st := obj.Status
		if isPoison(obj.Value) {
			if st.Kind != status.KindError || !strings.Contains(st.Error, "poison value") {
				problems = append(problems, fmt.Sprintf("%s=%s is %s, want a terminal Error", obj.ID, obj.Value, st))
			}
			if has && got == obj.Value {
				problems = append(problems, fmt.Sprintf("target holds poison %s=%s", obj.ID, got))
			}
			continue
		}
		if st.Kind != status.KindDone && !(r.refresh && st.Kind == status.KindRefreshing) {
			problems = append(problems, fmt.Sprintf("%s=%s is %s", obj.ID, obj.Value, st))
		}
		if !has || got != obj.Value {
			problems = append(problems, fmt.Sprintf("target has %s=%q (present: %v), table %q", obj.ID, got, has, obj.Value))
		}
	}
	for k, v := range data {
		if !inTable[k] {
			problems = append(problems, fmt.Sprintf("deleted %s=%s still in the target", k, v))
		}
	}
	if h := g.health.GetChild("job-reconcile"); h == nil {
		problems = append(problems, "no health for job-reconcile")
	} else {
		h.Lock()
		if h.Level != cell.StatusOK {
			problems = append(problems, fmt.Sprintf("health %s: %s: %v", h.Level, h.Status, h.Error))
		}
		h.Unlock()
	}
	return strings.Join(problems, "; ")
}
