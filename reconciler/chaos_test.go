package reconciler_test

// TestChaos runs the reconciler against an in-memory target under random
// schedules: inserts, updates, deletes and re-inserts over a small key space,
// reverts to a value written earlier, identical re-inserts of the object
// as it is, and re-inserts of the object as read some steps earlier (all
// keep the status identities they carry), and the same moves
// made on purpose while the object's operation is held in flight, while a
// newer version is parked behind it, or while it waits for a retry;
// a delete, a new value and the object in flight again while its update is
// held; operations that fail, fail after applying, fail terminally, ask for
// a retry, panic or are slow (honouring ctx); batches that reorder their
// entries or replace one with an entry of their own; random
// Reconciler.Prune calls, Pause and Resume at any moment, Pause also from
// inside an operation of a round for which a prune is due; option values at
// the edges (round sizes of 1 and math.MaxInt, a retry maximum of
// MaxInt64); and restarts: a new hive and a freshly populated table over
// the same target, or the same hive stopped, changed while stopped, and
// started again.
// At the end the faults are turned off and the system must converge: the
// target holds exactly the table's key→value pairs, every object is Done
// (or Error for a "poison" value, which always fails terminally and must
// never reach the target), and health is OK. Along the way the targets
// check that at most one operation per object is in flight, an object's
// operations come in revision order, no operation starts after Stop
// returned, none starts after every Pause returned and before Resume, nor
// does a prune, none while its reconciler's prune runs, Prune comes only after initialization
// and with the whole table, and no update is redone once it succeeded for a
// status. The "-set"
// configurations run two reconcilers sharing the objects through a
// status.Set, each with its own target.
//
// Every seed is a subtest, TestChaos/<config>/seed=<n>; its schedule is
// derived from the seed alone. Fault decisions come from a second RNG with
// the same seed, drawn as operations arrive, so with several workers a replay
// takes the same steps but not necessarily the same faults.
//
// Environment:
//
//	CONVERGE_CHAOS_SEEDS=N  run N seeds per configuration (default 10)
//	CONVERGE_CHAOS_FOR=D    run seeds for duration D instead (for example 10m),
//	                        shared equally by the configurations; prints the
//	                        seed range each covered
//	CONVERGE_CHAOS_FIRST=K  number seeds from K (default 1), to cover new ground
//	CONVERGE_CHAOS_SEED=S   run seed S only (replay); or -run 'TestChaos/<config>/seed=S$'
//	CONVERGE_CHAOS_LOG=1    log the hive and reconciler at debug level
//
// A long run:
//
//	CONVERGE_CHAOS_SEEDS=1000 go test -run TestChaos -failfast -timeout 60m ./reconciler/
//	CONVERGE_CHAOS_FOR=10m go test -run TestChaos -v -timeout 20m ./reconciler/ | grep ^chaos

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
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
	chaosMaxHeldStops = 2 // stops while an update is held, besides the restarts
	chaosHealTimeout  = 20 * time.Second
)

type chaosConfig struct {
	workers int
	batch   bool
	set     bool // two reconcilers, "a" and "b", share the objects through a status.Set
}

func (c chaosConfig) String() string {
	mode := "single"
	if c.batch {
		mode = "batch"
	}
	if c.set {
		mode += "-set"
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
	configs := []chaosConfig{
		{1, false, false}, {1, true, false}, {4, false, false}, {4, true, false},
		{1, false, true}, {4, false, true}, {4, true, true},
	}
	// CONVERGE_CHAOS_FOR runs seeds for a while instead of a count: each
	// configuration gets an equal share of the time, from the first seed on.
	var share time.Duration
	if s := os.Getenv("CONVERGE_CHAOS_FOR"); s != "" && os.Getenv("CONVERGE_CHAOS_SEED") == "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "CONVERGE_CHAOS_FOR")
		share = d / time.Duration(len(configs))
	}
	for _, cfg := range configs {
		t.Run(cfg.String(), func(t *testing.T) {
			if share == 0 {
				for _, seed := range seeds {
					t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
						runChaos(t, cfg, seed)
					})
				}
				return
			}
			first := envInt(t, "CONVERGE_CHAOS_FIRST", 1)
			seed, end := first, time.Now().Add(share)
			for ; time.Now().Before(end) && !t.Failed(); seed++ {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					runChaos(t, cfg, seed)
				})
			}
			msg := fmt.Sprintf("chaos %s: seeds %d to %d in %s", cfg, first, seed-1, share)
			t.Log(msg)
			fmt.Println(msg)
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

// pruneHoldKey is the key under which a hold blocks the next prune.
const pruneHoldKey = "(prune)"

func isPoison(value string) bool { return strings.HasPrefix(value, "poison") }

// isLater reports whether value's update asks to be retried in about 292
// years, the longest RetryAfter there is (past the year 2262, where Unix
// nanoseconds end): the reconciler must not ask again for that version, let
// alone spin. The test replaces such values before it checks convergence.
func isLater(value string) bool { return strings.HasPrefix(value, "later") }

// chaosLater is the RetryAfter of an update of a later value.
const chaosLater = time.Duration(math.MaxInt64)

// chaosTarget is the target system shared by every generation (hive) of a
// run. It holds key→value pairs, decides faults from a seeded RNG, and
// records violations of the reconciler's guarantees that it can see.
type chaosTarget struct {
	mu       sync.Mutex
	rng      *rand.Rand
	failProb float64
	slowProb float64
	healed   bool
	// pausedAt is when every reconciler's Pause had returned (Unix ns),
	// 0 while not paused. Operations read it (and pruningAt) first thing,
	// without a lock, as close to the call as a target can be.
	pausedAt atomic.Int64
	// pausedInRound is set when an operation of a loop without workers
	// paused its own reconciler: the loop is in that operation's round, so
	// no operation or prune of it may begin until Resume, however soon
	// after Pause.
	pausedInRound atomic.Bool
	data          map[string]string
	depSeen       map[string]string // per key, the dependency value its last update saw
	calls         int
	violations    []string
	changed       chan struct{} // closed and replaced on every call

	// holds blocks the next operation on a key until released; held
	// receives the key when it starts blocking.
	holds map[string]*chaosHold
	// failNext makes the next operations on a key fail.
	failNext map[string]int
	// reinserts counts, per status identity, how often the test wrote an
	// object carrying that status again: each may legitimately be applied
	// once more.
	reinserts map[uint64]int
}

type chaosHold struct {
	taken    bool
	released bool
	started  chan struct{} // closed when an operation blocks on the hold
	release  chan struct{}
	// inside, if set, is called by the held operation once released,
	// before it returns; done is closed after.
	inside func()
	done   chan struct{}
	// cut is closed when the held operation's context ends before the
	// hold is released.
	cut chan struct{}
	// afterApply holds the update once it has applied its object, not
	// before; succeedAtStop makes it report success, not its context's
	// error, when that context ends while it is held (a stop).
	afterApply, succeedAtStop bool
}

// release lets the operation held by h, if any, go on; later operations
// are not held. It may be called more than once.
func (c *chaosTarget) release(h *chaosHold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open(h)
}

// open must be called with mu held.
func (c *chaosTarget) open(h *chaosHold) {
	if h.released {
		return
	}
	h.released = true
	close(h.release)
	for key, held := range c.holds {
		if held == h {
			delete(c.holds, key)
		}
	}
}

func newChaosTarget(seed uint64, failProb, slowProb float64) *chaosTarget {
	return &chaosTarget{
		rng:       rand.New(rand.NewPCG(seed, 0xfa017)),
		failProb:  failProb,
		slowProb:  slowProb,
		data:      map[string]string{},
		depSeen:   map[string]string{},
		changed:   make(chan struct{}),
		holds:     map[string]*chaosHold{},
		failNext:  map[string]int{},
		reinserts: map[uint64]int{},
	}
}

// hold makes the next operation on key block until the returned hold is
// released (or its context ends).
func (c *chaosTarget) hold(key string) *chaosHold { return c.setHold(key, false) }

// holdAfterApply makes the next update of key block once it has applied
// its object, until the returned hold is released (or its context ends).
func (c *chaosTarget) holdAfterApply(key string) *chaosHold { return c.setHold(key, true) }

func (c *chaosTarget) setHold(key string, afterApply bool) *chaosHold {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := &chaosHold{started: make(chan struct{}), release: make(chan struct{}), cut: make(chan struct{}), afterApply: afterApply}
	if old := c.holds[key]; old != nil {
		c.open(old)
	}
	c.holds[key] = h
	return h
}

// wait blocks the operation on key if a hold is set for it: before it
// applies anything, or, with applied, an update that has just applied its
// object if the hold is for that moment.
func (c *chaosTarget) wait(ctx context.Context, key string, applied bool) error {
	c.mu.Lock()
	h := c.holds[key]
	if h == nil || h.taken || c.healed || h.afterApply != applied {
		c.mu.Unlock()
		return nil
	}
	h.taken = true
	delete(c.holds, key)
	close(h.started)
	c.mu.Unlock()
	select {
	case <-h.release:
		if h.inside != nil {
			h.inside()
			close(h.done)
		}
		return nil
	case <-ctx.Done():
		close(h.cut)
		c.mu.Lock()
		succeed := h.succeedAtStop
		c.mu.Unlock()
		if succeed {
			return nil
		}
		return ctx.Err()
	}
}

// forcedFailure reports whether the operation on key must fail now.
func (c *chaosTarget) forcedFailure(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failNext[key] == 0 || c.healed {
		return false
	}
	c.failNext[key]--
	return true
}

func (c *chaosTarget) reinserted(ids ...uint64) {
	c.mu.Lock()
	for _, id := range ids {
		if id != 0 {
			c.reinserts[id]++
		}
	}
	c.mu.Unlock()
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
	for _, h := range c.holds {
		c.open(h)
	}
	clear(c.failNext)
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

func (c *chaosTarget) set(key, value, dep string) {
	c.mu.Lock()
	c.data[key] = value
	c.depSeen[key] = dep
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
	c         *chaosTarget
	gen       int
	name      string // the reconciler's name, "" when it is alone
	getStatus func(*item) status.Status
	table     statedb.Table[*item]
	deps      statedb.Table[*chaosDep]

	// Guarded by c.mu.
	initialized  bool
	stopped      bool
	inFlight     map[string]int
	running      int
	lastRev      map[string]statedb.Revision
	prunes       int // completed prunes
	pruneRunning bool
	pruningAt    atomic.Int64 // when the running prune began (Unix ns), 0 if none
	lastPruneOK  bool
	// applied counts, per status identity, the updates that succeeded. A
	// success more than once (plus the times the test wrote that status
	// again) means work was redone, for example because another reconciler
	// wrote its own status.
	applied map[uint64]int
	// lastApplied is, per key, the identity of the status of its last
	// successful update.
	lastApplied map[string]uint64
	// laterAsked counts, per status identity, the updates of a later value
	// (see isLater).
	laterAsked map[uint64]int
}

func (o *chaosOps) violate(format string, args ...any) {
	o.c.violate("gen %d%s: %s", o.gen, o.label(), fmt.Sprintf(format, args...))
}

func (o *chaosOps) label() string {
	if o.name == "" {
		return ""
	}
	return " reconciler " + o.name
}

// gateSeen is what an operation saw first thing: whether every reconciler
// was paused, and whether its reconciler's prune ran.
type gateSeen struct{ paused, pruning, pausedInRound bool }

// startGrace is how long after Pause returned (or a prune began) an
// operation may still show its first line. The reconciler decides at the
// gate, just before it calls the operation; the operation's first line
// comes a few instructions later, but the goroutine may be descheduled in
// between. A start later than this after Pause returned is the
// reconciler's, not the scheduler's; the bugs this checks for start much
// later (after a commit, a round, a release by the test).
const startGrace = 20 * time.Millisecond

func (o *chaosOps) gate() gateSeen {
	now := time.Now().UnixNano()
	late := func(at int64) bool { return at != 0 && now-at > int64(startGrace) }
	return gateSeen{late(o.c.pausedAt.Load()), late(o.pruningAt.Load()), o.c.pausedInRound.Load()}
}

func (o *chaosOps) enter(g gateSeen, op, key string, rev statedb.Revision) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.notify()
	if o.stopped {
		o.violate("%s %s@%d started after Stop returned", op, key, rev)
	}
	if g.paused {
		o.violate("%s %s@%d started while paused", op, key, rev)
	}
	if g.pausedInRound {
		o.violate("%s %s@%d started after an operation of the round paused the reconciler", op, key, rev)
	}
	if g.pruning {
		o.violate("%s %s@%d started while a prune ran", op, key, rev)
	}
	o.inFlight[key]++
	o.running++
	if o.inFlight[key] > 1 {
		o.violate("%s %s@%d while another operation on %s is in flight", op, key, rev, key)
	}
	if last := o.lastRev[key]; rev < last {
		o.violate("%s %s@%d after an operation on revision %d", op, key, rev, last)
	}
	o.lastRev[key] = rev
}

func (o *chaosOps) leave(key string) {
	o.c.mu.Lock()
	o.inFlight[key]--
	o.running--
	o.c.mu.Unlock()
}

func (o *chaosOps) update(ctx context.Context, txn statedb.ReadTxn, it *item, inBatch bool) error {
	c := o.c
	if err := c.wait(ctx, it.ID, false); err != nil {
		return err
	}
	if c.forcedFailure(it.ID) {
		return reconciler.RetryAfter(5*time.Millisecond, fmt.Errorf("update %s: forced: %w", it.ID, errChaos))
	}
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
	if isLater(it.Value) {
		st := o.getStatus(it)
		c.mu.Lock()
		o.laterAsked[st.ID()]++
		if n, allowed := o.laterAsked[st.ID()], 1+c.reinserts[st.ID()]; n > allowed {
			o.violate("update %s=%s for status %s (id %d) asked %d times within a RetryAfter of %s", it.ID, it.Value, st, st.ID(), n, chaosLater)
		}
		c.mu.Unlock()
		return reconciler.RetryAfter(chaosLater, fmt.Errorf("update %s: later value %q", it.ID, it.Value))
	}
	dep := ""
	if d, _, found := o.deps.Get(txn, chaosDepID.Query(depOf(it.ID))); found {
		dep = d.Value
	}
	c.set(it.ID, it.Value, dep)
	if err := c.wait(ctx, it.ID, true); err != nil {
		return fmt.Errorf("update %s: applied, then: %w", it.ID, err)
	}
	if f == faultApplyThenError {
		return fmt.Errorf("update %s: applied, then: %w", it.ID, errChaos)
	}
	st := o.getStatus(it)
	c.mu.Lock()
	o.applied[st.ID()]++
	o.lastApplied[it.ID] = st.ID()
	if n, allowed := o.applied[st.ID()], 1+c.reinserts[st.ID()]; n > allowed {
		o.violate("update %s=%s for status %s (id %d) succeeded %d times, written %d time(s)", it.ID, it.Value, st, st.ID(), n, allowed)
	}
	c.mu.Unlock()
	return nil
}

func (o *chaosOps) delete(ctx context.Context, _ statedb.ReadTxn, it *item, inBatch bool) error {
	c := o.c
	if err := c.wait(ctx, it.ID, false); err != nil {
		return err
	}
	if c.forcedFailure(it.ID) {
		return reconciler.RetryAfter(5*time.Millisecond, fmt.Errorf("delete %s: forced: %w", it.ID, errChaos))
	}
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

func (o *chaosOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	g := o.gate()
	o.enter(g, "update", it.ID, rev)
	defer o.leave(it.ID)
	return o.update(ctx, txn, it, false)
}

func (o *chaosOps) Delete(ctx context.Context, _ statedb.ReadTxn, rev statedb.Revision, it *item) error {
	g := o.gate()
	o.enter(g, "delete", it.ID, rev)
	defer o.leave(it.ID)
	return o.delete(ctx, nil, it, false)
}

// batch applies fn to every entry; sometimes the whole batch panics part way.
func (o *chaosOps) batch(g gateSeen, ctx context.Context, txn statedb.ReadTxn, op string, batch []reconciler.BatchEntry[*item], fn func(context.Context, statedb.ReadTxn, *item, bool) error) {
	for i := range batch {
		o.enter(g, op, batch[i].Object.ID, batch[i].Revision)
	}
	defer func() {
		for i := range batch {
			o.leave(batch[i].Object.ID)
		}
	}()
	// Like a user's BatchOperations, sometimes reorder the entries (sort
	// them, group them), and sometimes replace one with an entry of its
	// own making, which the reconciler cannot bind to its object: it
	// tries that object again.
	o.c.mu.Lock()
	reorder, overwrite := o.c.rng.IntN(3) == 0, o.c.rng.IntN(8) == 0
	if reorder {
		o.c.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
	}
	o.c.mu.Unlock()
	if overwrite {
		defer func() {
			e := &batch[len(batch)-1]
			if op == "update" {
				o.c.mu.Lock()
				o.askedAgain(e) // it is applied again
				o.c.mu.Unlock()
			}
			*e = reconciler.BatchEntry[*item]{Object: e.Object, Revision: e.Revision, Result: e.Result}
		}()
	}
	panics, at := o.c.chance(o.c.failProb / 4)
	at %= len(batch)
	for i := range batch {
		if panics && i == at {
			// The reconciler records the whole batch as failed, so the
			// updates applied so far will be applied again.
			o.c.mu.Lock()
			for j := range batch[:i] {
				if op == "update" {
					o.askedAgain(&batch[j])
				}
			}
			o.c.mu.Unlock()
			panic(fmt.Sprintf("%s batch: chaos panic at entry %d of %d", op, i, len(batch)))
		}
		batch[i].Result = fn(ctx, txn, batch[i].Object, true)
	}
	// Once the deadline has passed when the batch returns, the reconciler
	// cannot tell an entry that succeeded from one the batch never got to
	// (both have a nil Result), so it retries them: a success near the
	// deadline may be applied again. The margin covers the time between
	// this check and the reconciler's.
	if dl, ok := ctx.Deadline(); ok && op == "update" && time.Until(dl) < 10*time.Millisecond {
		o.c.mu.Lock()
		for j := range batch {
			o.askedAgain(&batch[j])
		}
		o.c.mu.Unlock()
	}
}

// askedAgain records that the reconciler will ask again for the update of
// e, whose result it cannot take: one success, or one later value's
// RetryAfter, more is allowed. It must be called with o.c.mu held.
func (o *chaosOps) askedAgain(e *reconciler.BatchEntry[*item]) {
	id := o.getStatus(e.Object).ID()
	switch {
	case e.Result == nil:
		o.applied[id]--
	case isLater(e.Object.Value) && strings.Contains(e.Result.Error(), "later value"):
		o.laterAsked[id]--
	}
}

func (o *chaosOps) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batch(o.gate(), ctx, txn, "update", batch, o.update)
}

func (o *chaosOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batch(o.gate(), ctx, txn, "delete", batch, o.delete)
}

func (o *chaosOps) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) (err error) {
	g := o.gate()
	c := o.c
	c.mu.Lock()
	if g.paused {
		o.violate("prune started while paused")
	}
	if o.c.pausedInRound.Load() {
		o.violate("prune started after an operation of the round paused the reconciler")
	}
	c.calls++
	c.notify()
	if o.stopped {
		o.violate("prune started after Stop returned")
	}
	if !o.initialized {
		o.violate("prune before the table was initialized")
	}
	o.pruneRunning = true
	o.pruningAt.Store(time.Now().UnixNano())
	c.mu.Unlock()
	ok := false
	defer func() {
		c.mu.Lock()
		o.prunes++
		o.pruneRunning = false
		o.pruningAt.Store(0)
		o.lastPruneOK = ok
		c.notify()
		c.mu.Unlock()
	}()
	if err := c.wait(ctx, pruneHoldKey, false); err != nil {
		return err
	}

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
		o.violate("prune given %v, the table holds %v", slices.Sorted(maps.Keys(want)), all)
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

// chaosRec is one reconciler of a run: its target and how it reads and
// writes its status.
type chaosRec struct {
	name      string // "" when it is alone and uses item.Status
	target    *chaosTarget
	getStatus func(*item) status.Status
	setStatus func(*item, status.Status) *item
}

func (c *chaosRec) healthName() string {
	if c.name == "" {
		return "job-reconcile"
	}
	return "job-reconcile-" + c.name
}

func (c *chaosRec) label() string {
	if c.name == "" {
		return ""
	}
	return "reconciler " + c.name + ": "
}

// chaosGen is one hive: a new DB, table and reconcilers over the same
// targets. Slices are indexed like chaosRun.recs.
type chaosGen struct {
	hive     *hive.Hive
	db       *statedb.DB
	table    statedb.RWTable[*item]
	indexes  []statedb.Index[*item, status.Kind]
	recs     []reconciler.Reconciler[*item]
	ops      []*chaosOps
	health   *cell.SimpleHealth
	markDone func(statedb.WriteTxn)
	deps     statedb.RWTable[*chaosDep] // WithDependency of every reconciler
	paused   bool
}

// chaosDep is an object of the dependency table. Dependency dN is what
// every item kM with M % chaosDeps == N depends on: their Update records
// the dependency's value it saw, which must be the current one at the end.
type chaosDep struct{ ID, Value string }

func (d *chaosDep) TableHeader() []string { return []string{"ID", "Value"} }
func (d *chaosDep) TableRow() []string    { return []string{d.ID, d.Value} }

const chaosDeps = 6

var chaosDepID = statedb.Index[*chaosDep, string]{
	Name:       "id",
	FromObject: func(d *chaosDep) index.KeySet { return index.NewKeySet(index.String(d.ID)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// depOf returns the dependency of item key.
func depOf(key string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
	return fmt.Sprintf("d%d", n%chaosDeps)
}

// dependents maps a dependency to queries for the items that depend on it.
func dependents(d *chaosDep, _ bool) []statedb.Query[*item] {
	n, _ := strconv.Atoi(strings.TrimPrefix(d.ID, "d"))
	var qs []statedb.Query[*item]
	for k := n; k < chaosKeys; k += chaosDeps {
		qs = append(qs, itemID.Query(fmt.Sprintf("k%02d", k)))
	}
	return qs
}

type chaosRun struct {
	t       *testing.T
	cfg     chaosConfig
	seed    uint64
	rng     *rand.Rand // the schedule
	recs    []*chaosRec
	opts    []reconciler.Option
	refresh bool
	// manualPrune enables random Prune() calls. Without them, the prune at
	// the end of each generation can only be the one after initialization.
	manualPrune bool
	roundSize   int
	log         *slog.Logger
	gen         *chaosGen
	gens        int
	restarts    int
	heldStops   int // stops while an update is held (writeBackAfterPrune)
	initIn      int // steps until the current generation is marked initialized; <0 once done
	steps       []string
	// model is what the test wrote: the table's key→value pairs must equal
	// it at all times, since the reconcilers write only statuses.
	model  map[string]string
	values int
	// written holds, per key, the objects the test inserted in this
	// generation, as it inserted them, for reverts.
	written map[string][]*item
	// read holds, per key, the object as the last identical re-insert read
	// it, statuses included, for writing back a stale read.
	read map[string]*item
	// writtenAt is when (len(steps)) the test inserted each object of
	// written; depChangedAt when each dependency last changed. depStale
	// holds the keys whose object was written back with statuses that may
	// predate a change of their dependency (see writeBackUndoesMark).
	writtenAt    map[*item]int
	depChangedAt map[string]int
	depStale     map[string]bool
}

func runChaos(t *testing.T, cfg chaosConfig, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	run := &chaosRun{t: t, cfg: cfg, seed: seed, rng: rng, model: map[string]string{}, written: map[string][]*item{}, read: map[string]*item{},
		writtenAt: map[*item]int{}, depChangedAt: map[string]int{}, depStale: map[string]bool{}}

	// Per-seed settings.
	failProb := 0.05 + 0.45*rng.Float64()
	slowProb := 0.3 * rng.Float64()
	if cfg.set {
		for i, name := range []string{"a", "b"} {
			run.recs = append(run.recs, &chaosRec{
				name:      name,
				target:    newChaosTarget(seed+uint64(i)<<32, failProb, slowProb),
				getStatus: func(it *item) status.Status { return it.Statuses.Get(name) },
				setStatus: func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it },
			})
		}
	} else {
		run.recs = []*chaosRec{{
			target:    newChaosTarget(seed, failProb, slowProb),
			getStatus: (*item).getStatus,
			setStatus: (*item).setStatus,
		}}
	}
	roundSize := []int{1, 3, 10, 1000, math.MaxInt}[rng.IntN(5)]
	run.roundSize = roundSize
	retryMax := 10 * time.Millisecond
	if rng.IntN(6) == 0 && failProb < 0.25 {
		retryMax = time.Duration(math.MaxInt64) // saturates; failures stay few
	}
	pruneInterval := time.Hour // only the initial prune and Prune() calls
	if rng.IntN(5) == 0 {
		pruneInterval = time.Duration(5+rng.IntN(30)) * time.Millisecond
	}
	run.opts = []reconciler.Option{
		reconciler.WithConcurrency(cfg.workers),
		reconciler.WithRetry(time.Millisecond, retryMax),
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
	settings := fmt.Sprintf("fail=%.2f slow=%.2f round=%d retry-max=%s prune=%s manual-prune=%v timeout=%s refresh=%v",
		failProb, slowProb, roundSize, retryMax, pruneInterval, run.manualPrune, timeout, run.refresh)

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
			if os.Getenv("CONVERGE_CHAOS_ALLSTEPS") != "" {
				from = 0
			}
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
	switch n := r.rng.IntN(40); {
	case n < 4:
		return fmt.Sprintf("poison-%d.%d", r.gens, r.values)
	case n == 4:
		return fmt.Sprintf("later-%d.%d", r.gens, r.values)
	}
	return fmt.Sprintf("v%d.%d", r.gens, r.values)
}

// write applies changes in one transaction: a value of "" deletes the key,
// and obj, if set, is inserted as it is, status included.
type chaosChange struct {
	key, value string
	obj        *item
}

// statusIDs returns the identities of the statuses obj carries.
func (r *chaosRun) statusIDs(obj *item) []uint64 {
	var ids []uint64
	for _, rec := range r.recs {
		ids = append(ids, rec.getStatus(obj).ID())
	}
	return ids
}

func (r *chaosRun) write(changes ...chaosChange) statedb.Revision {
	g := r.gen
	wtxn := g.db.WriteTxn(g.table)
	for _, ch := range changes {
		var err error
		switch {
		case ch.obj != nil:
			// A copy: StateDB refuses the very pointer it holds, and
			// the copy carries the same status identities.
			_, _, err = g.table.Insert(wtxn, ch.obj.clone())
			r.model[ch.key] = ch.obj.Value
			if r.writeBackUndoesMark(ch.key, ch.obj) {
				r.depStale[ch.key] = true
			}
			ids := r.statusIDs(ch.obj)
			for _, rec := range r.recs {
				rec.target.reinserted(ids...)
			}
		case ch.value == "":
			_, _, err = g.table.Delete(wtxn, &item{ID: ch.key})
			delete(r.model, ch.key)
		default:
			obj := &item{ID: ch.key, Value: ch.value}
			if r.cfg.set {
				// A new set, or the old one with every status Pending.
				obj.Statuses = status.NewSet()
				if old, _, found := g.table.Get(wtxn, itemID.Query(ch.key)); found && r.rng.IntN(2) == 0 {
					obj.Statuses = old.Statuses.Pending()
				}
			} else {
				obj.Status = status.Pending()
			}
			_, _, err = g.table.Insert(wtxn, obj)
			r.model[ch.key] = ch.value
			r.written[ch.key] = append(r.written[ch.key], obj)
			r.writtenAt[obj] = len(r.steps)
			delete(r.depStale, ch.key)
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
	switch p := r.rng.IntN(109); {
	case p < 28: // insert or update
		k := r.key()
		v := r.value()
		if old, ok := r.current(k); ok && r.rng.IntN(8) == 0 {
			v = old // same value, new Pending status
		}
		rev := r.write(chaosChange{key: k, value: v})
		r.logf("@%d set %s=%s", rev, k, v)
	case p < 38: // delete
		k := r.key()
		rev := r.write(chaosChange{key: k})
		r.logf("@%d delete %s", rev, k)
	case p < 46: // a transaction of several changes, possibly of one key
		n := 2 + r.rng.IntN(7)
		changes := make([]chaosChange, n)
		words := make([]string, n)
		for i := range changes {
			changes[i].key = r.key()
			switch r.rng.IntN(4) {
			case 0: // delete
			case 1:
				changes[i].obj = r.earlier(changes[i].key)
			}
			if changes[i].obj == nil && r.rng.IntN(3) > 0 {
				changes[i].value = r.value()
			}
			words[i] = changes[i].key + "=" + changes[i].value
			if changes[i].obj != nil {
				words[i] = changes[i].key + "=" + changes[i].obj.Value + " (revert)"
			}
		}
		rev := r.write(changes...)
		r.logf("@%d txn %s", rev, strings.Join(words, " "))
	case p < 51: // delete then re-insert, in two transactions
		k := r.key()
		rev := r.write(chaosChange{key: k})
		r.logf("@%d delete %s", rev, k)
		r.keyMove(k, r.rng.IntN(2)+1)
	case p < 56: // revert, re-insert the object as it is, or put it back after a delete
		r.keyMove(r.key(), 2+r.rng.IntN(3))
	case p < 64:
		if r.rng.IntN(2) == 0 {
			r.writeBackAfterPrune()
			return
		}
		r.scenario()
	case p < 68:
		switch r.rng.IntN(4) {
		case 0:
			r.pruneWhileBusy()
			return
		case 1:
			r.twoPrunesWhileSaturated()
			return
		}
		if !r.manualPrune {
			r.logf("(no Prune() in this seed)")
			return
		}
		i := r.rng.IntN(len(r.recs))
		r.gen.recs[i].Prune()
		r.logf("%sPrune()", r.recs[i].label())
	case p < 82: // let a reconciler catch up with the current revision, or not
		i := r.rng.IntN(len(r.recs))
		rev := r.gen.table.Revision(r.gen.db.ReadTxn())
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.rng.IntN(20))*time.Millisecond)
		reached, low, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
		cancel()
		r.logf("%swait for @%d: reached @%d, retry low @%d, err=%v", r.recs[i].label(), rev, reached, low, err)
		r.checkTable()
	case p < 95: // wait for some operations on a target
		i := r.rng.IntN(len(r.recs))
		n := 1 + r.rng.IntN(10)
		r.waitCalls(r.recs[i].target, n, 10*time.Millisecond)
		r.logf("%swait for %d calls", r.recs[i].label(), n)
	case p < 101: // change what objects depend on
		d := fmt.Sprintf("d%d", r.rng.IntN(chaosDeps))
		wtxn := r.gen.db.WriteTxn(r.gen.deps)
		var err error
		if r.rng.IntN(4) == 0 {
			_, _, err = r.gen.deps.Delete(wtxn, &chaosDep{ID: d})
			r.logf("delete dependency %s", d)
		} else {
			v := r.value()
			_, _, err = r.gen.deps.Insert(wtxn, &chaosDep{ID: d, Value: v})
			r.logf("set dependency %s=%s", d, v)
		}
		wtxn.Commit()
		require.NoError(r.t, err)
		r.depChangedAt[d] = len(r.steps)
	case p < 104: // pause, or resume
		if !r.gen.paused && r.rng.IntN(2) == 0 {
			if r.rng.IntN(2) == 0 {
				r.pauseWhileBusy()
			} else {
				r.pauseFromAnOperation()
			}
			return
		}
		r.setPaused(!r.gen.paused)
	default:
		if r.restarts >= chaosMaxRestarts {
			r.logf("(no restart: limit reached)")
			return
		}
		r.restarts++
		r.checkTable()
		if r.rng.IntN(2) == 0 {
			r.restartInPlace()
			return
		}
		desired := maps.Clone(r.model)
		r.stopGen()
		r.startGen(desired)
		r.logf("restart as generation %d with %s", r.gens, describe(desired))
	}
}

// earlier returns an object the test inserted for key in this generation,
// as it was inserted (status identity included), or nil.
func (r *chaosRun) earlier(key string) *item {
	objs := r.written[key]
	if len(objs) == 0 {
		return nil
	}
	return objs[r.rng.IntN(len(objs))]
}

// keyMove makes one change to key: 0 delete, 1 a new value, 2 a revert to
// an earlier value, 3 an identical re-insert of the object as it is now,
// 4 a delete and then the object put back as it was before it.
func (r *chaosRun) keyMove(key string, move int) {
	switch move {
	case 0:
		rev := r.write(chaosChange{key: key})
		r.logf("@%d delete %s", rev, key)
		return
	case 4:
		if obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(key)); found {
			r.putBackAfterDelete(key, obj)
			return
		}
	case 2:
		if obj := r.earlier(key); obj != nil {
			rev := r.write(chaosChange{key: key, obj: obj})
			r.logf("@%d revert %s=%s (%s)", rev, key, obj.Value, r.statuses(obj))
			return
		}
	case 3:
		if obj, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(key)); found {
			// Sometimes the object as read some steps ago, statuses
			// included: a read-modify-write that spans transactions
			// writes back statuses that reconcilers have replaced. Not a
			// Done status: no reconciler can tell a stale Done from a
			// true one without remembering every object it applied. (A
			// write-back may also undo a dependency's mark; see
			// writeBackUndoesMark.)
			if old := r.read[key]; old != nil && !r.anyDone(old) && r.rng.IntN(2) == 0 {
				r.read[key] = obj
				rev := r.write(chaosChange{key: key, obj: old})
				r.logf("@%d re-insert %s=%s as read earlier (%s)", rev, key, old.Value, r.statuses(old))
				return
			}
			// The object as it is, read and written in one transaction:
			// an identical re-insert, which leaves marks in place.
			if rev, obj, ok := r.reinsertAsIs(key); ok {
				r.read[key] = obj
				r.logf("@%d re-insert %s=%s as it is (%s)", rev, key, obj.Value, r.statuses(obj))
				return
			}
		}
	}
	v := r.value()
	rev := r.write(chaosChange{key: key, value: v})
	r.logf("@%d set %s=%s", rev, key, v)
}

// putBackAfterDelete deletes key and then writes obj, its object read
// just before, back as it was, statuses included: Done ones too. A Done
// status from before a delete says nothing about the target once the
// delete has run, so a reconciler that read the delete must apply obj
// again; one that did not still holds obj's version, unless the delete is
// still to run. Sometimes the test waits, briefly, for a reconciler to read
// the delete first.
func (r *chaosRun) putBackAfterDelete(key string, obj *item) {
	rev := r.write(chaosChange{key: key})
	r.logf("@%d delete %s", rev, key)
	if r.rng.IntN(2) == 0 {
		i := r.rng.IntN(len(r.recs))
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.rng.IntN(10))*time.Millisecond)
		reached, _, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
		cancel()
		r.logf("%swait for @%d: reached @%d, err=%v", r.recs[i].label(), rev, reached, err)
	}
	rev = r.write(chaosChange{key: key, obj: obj})
	r.logf("@%d put %s=%s back as it was before its delete (%s)", rev, key, obj.Value, r.statuses(obj))
}

// restoredInError returns key=value with a retryable Error status for
// every reconciler, each with a fresh identity, as decoding a saved table
// gives.
func (r *chaosRun) restoredInError(key, value string) *item {
	obj := &item{ID: key, Value: value}
	st := status.ErrorAt(time.Now().Add(-time.Hour), errors.New("restored"))
	if r.cfg.set {
		obj.Statuses = status.NewSet()
		for _, rec := range r.recs {
			obj.Statuses = obj.Statuses.Set(rec.name, status.ErrorAt(st.UpdatedAt, errors.New("restored")))
		}
	} else {
		obj.Status = st
	}
	return obj
}

// anyDone reports whether a reconciler's status on obj is Done.
// reinsertAsIs writes key's object back as it is, statuses included, in
// the write transaction that reads it.
func (r *chaosRun) reinsertAsIs(key string) (statedb.Revision, *item, bool) {
	g := r.gen
	wtxn := g.db.WriteTxn(g.table)
	defer wtxn.Abort()
	obj, _, found := g.table.Get(wtxn, itemID.Query(key))
	if !found {
		return 0, nil, false
	}
	_, _, err := g.table.Insert(wtxn, obj.clone())
	require.NoError(r.t, err)
	for _, rec := range r.recs {
		rec.target.reinserted(r.statusIDs(obj)...)
	}
	rev := g.table.Revision(wtxn)
	wtxn.Commit()
	return rev, obj, true
}

// writeBackUndoesMark reports whether writing back obj, an object written
// or read earlier, may undo the mark that a change of key's dependency made
// since obj's statuses were written: then an update of key that ran with
// the dependency's old value for one of those statuses stands, as it must
// for a write-back that says "this version" (see WithDependency). Only
// statuses the test wrote itself, after the last change of the
// dependency, are known not to.
func (r *chaosRun) writeBackUndoesMark(key string, obj *item) bool {
	changed, ok := r.depChangedAt[depOf(key)]
	if !ok {
		return false
	}
	at, ok := r.writtenAt[obj]
	return !ok || at <= changed
}

func (r *chaosRun) anyDone(obj *item) bool {
	for _, rec := range r.recs {
		if rec.getStatus(obj).Kind == status.KindDone {
			return true
		}
	}
	return false
}

func (r *chaosRun) statuses(obj *item) string {
	var words []string
	for _, rec := range r.recs {
		st := rec.getStatus(obj)
		words = append(words, fmt.Sprintf("%s%s id %d", rec.label(), st.Kind, st.ID()))
	}
	return strings.Join(words, ", ")
}

// scenario writes a key and, while its operation on one target is held in
// flight, or held with a newer version parked behind it, or has failed and
// waits for its retry, changes the key a few times: deletes, new values,
// reverts (often to the very value being applied) and identical re-inserts.
func (r *chaosRun) scenario() {
	k := r.key()
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	mode := []string{"held in flight", "parked behind", "waiting for a retry"}[r.rng.IntN(3)]
	var h *chaosHold
	if mode == "waiting for a retry" {
		c.mu.Lock()
		c.failNext[k] = 1 + r.rng.IntN(2)
		c.mu.Unlock()
	} else {
		h = c.hold(k)
	}
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	first := r.written[k][len(r.written[k])-1]
	r.logf("@%d set %s=%s, %soperation to be %s", rev, k, v, r.recs[i].label(), mode)

	// Give the operation time to start; it may not (the key may be
	// deleted, or the object busy with an earlier version).
	if h != nil {
		timer := time.NewTimer(20 * time.Millisecond)
		select {
		case <-h.started:
			r.logf("%s: operation held", k)
		case <-timer.C:
		}
		timer.Stop()
	} else {
		r.waitCalls(c, 1, 10*time.Millisecond)
	}
	if mode == "parked behind" {
		r.keyMove(k, 1)
	}
	if mode == "held in flight" {
		switch r.rng.IntN(3) {
		case 0:
			// Deleted, a new value, and at once the object in flight
			// again, status identity included: after a delete, the same
			// identity is new work.
			r.keyMove(k, 0)
			r.keyMove(k, 1)
			rev := r.write(chaosChange{key: k, obj: first})
			r.logf("@%d revert %s=%s, the value in flight, after a delete", rev, k, first.Value)
		case 1:
			// The same, but the update is let go once the delete is
			// written, and the delete that follows it is held in turn:
			// the new value and the revert arrive while the delete of
			// the very object being reverted to is in flight.
			r.keyMove(k, 0)
			next := c.hold(k)
			c.release(h)
			h = next
			if r.waitStarted(h, 20*time.Millisecond) {
				r.logf("%s: update released, delete held", k)
			}
			r.keyMove(k, 1)
			rev := r.write(chaosChange{key: k, obj: first})
			r.logf("@%d revert %s=%s, the value of the update, while its delete is held", rev, k, first.Value)
		}
	}
	for n := r.rng.IntN(3); n > 0; n-- {
		r.keyMove(k, r.rng.IntN(5))
	}
	if r.rng.IntN(2) == 0 {
		rev := r.write(chaosChange{key: k, obj: first})
		r.logf("@%d revert %s=%s, the value %s", rev, k, first.Value, mode)
	}
	if h != nil {
		c.release(h)
		r.logf("%s: released", k)
	}
}

// writeBackAfterPrune holds k's operation (sometimes its retry) on one
// target in flight, deletes k, has that reconciler prune while the
// operation is held (the prune may
// remove what the operation applies), and then lets the operation go while
// a writer it wakes puts k back as it was read before the delete, status
// identity included. The write-back lands while the operation returns, so
// it may fall between the changes a round has read and that round's
// commit; the object is then new work, not the version the operation
// applied. Sometimes the hive is stopped and started again as the
// operation returns.
func (r *chaosRun) writeBackAfterPrune() {
	k := r.key()
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	// Sometimes the first attempt fails and its retry is held: what is
	// read then, and written back, carries the Error status the retry
	// answers.
	retry := r.rng.IntN(3) == 0
	// Sometimes the update is held once it has applied its object: then
	// the prune removes what it applied.
	applyFirst := r.rng.IntN(2) == 0
	hold := c.hold
	if applyFirst {
		hold = c.holdAfterApply
	}
	var h *chaosHold
	if retry {
		c.mu.Lock()
		c.failNext[k] = 1
		c.mu.Unlock()
	} else {
		h = hold(k)
	}
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	r.logf("@%d set %s=%s, %soperation held for a write-back after a prune (retry: %v, held after applying: %v)", rev, k, v, r.recs[i].label(), retry, applyFirst)
	if retry {
		r.waitCalls(c, 1, 20*time.Millisecond)
		h = hold(k)
	}
	if !r.waitStarted(h, 20*time.Millisecond) {
		c.release(h)
		r.logf("%s: operation did not start", k)
		return
	}
	read, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(k))
	if !found || r.anyDone(read) {
		c.release(h)
		r.logf("%s: released, nothing to write back", k)
		return
	}
	rev = r.write(chaosChange{key: k})
	r.logf("@%d delete %s", rev, k)
	if r.manualPrune {
		r.pruneAndWait(i, 20*time.Millisecond)
		r.logf("%sPrune() while %s is held", r.recs[i].label(), k)
	}
	yields := r.rng.IntN(4)
	if applyFirst && r.heldStops < chaosMaxHeldStops && r.rng.IntN(3) == 0 {
		// The hive stops while the update, which applied its object
		// before the prune removed it, is still held: it reports
		// success as the stop cuts it short, with the write-back
		// waiting to apply the object again.
		r.heldStops++
		rev = r.write(chaosChange{key: k, obj: read})
		r.logf("@%d write-back %s=%s as read before the delete (%s), while its operation is held", rev, k, read.Value, r.statuses(read))
		c.mu.Lock()
		h.succeedAtStop = true
		c.mu.Unlock()
		<-time.After(20 * time.Millisecond) // for a loop with workers to read the write-back
		r.logf("%s: the hive stops while the operation is held; it reports success", k)
		r.restartInPlace()
		c.release(h)
		return
	}
	restart := r.restarts < chaosMaxRestarts && r.rng.IntN(4) == 0
	if stop := restart && r.rng.IntN(2) == 0; stop || r.rng.IntN(3) == 0 {
		// The write-back comes while the operation is held, so that it
		// is read while it runs and waits to be applied again after
		// it; sometimes the hive stops as the operation returns.
		rev = r.write(chaosChange{key: k, obj: read})
		r.logf("@%d write-back %s=%s as read before the delete (%s), while its operation is held", rev, k, read.Value, r.statuses(read))
		if !stop {
			// A few milliseconds for a loop with workers to read it;
			// any order is a valid schedule.
			<-time.After(5 * time.Millisecond)
			c.release(h)
			return
		}
		c.release(h)
		r.restarts++
		r.restartInPlace()
		return
	}
	written := make(chan statedb.Revision, 1)
	c.mu.Lock()
	h.done = make(chan struct{})
	h.inside = func() {
		go func() {
			for range yields {
				runtime.Gosched()
			}
			// The test goroutine waits for this write: r is not
			// shared.
			written <- r.write(chaosChange{key: k, obj: read})
		}()
	}
	c.mu.Unlock()
	c.release(h)
	select {
	case rev = <-written:
		r.logf("@%d write-back %s=%s as read before the delete (%s), from inside its operation", rev, k, read.Value, r.statuses(read))
	case <-h.cut:
		// The operation was cut short (a timeout) and woke no writer.
		rev = r.write(chaosChange{key: k, obj: read})
		r.logf("@%d write-back %s=%s from the test: the operation was cut short", rev, k, read.Value)
	}
	if restart {
		r.restarts++
		r.restartInPlace()
	}
}

// pruneAndWait asks reconciler i for a prune and waits up to d for one to
// end; paused, or without workers while an operation is held (the loop is
// in it), the prune waits, and the test goes on without it.
func (r *chaosRun) pruneAndWait(i int, d time.Duration) bool {
	c, ops := r.recs[i].target, r.gen.ops[i]
	c.mu.Lock()
	before := ops.prunes
	c.mu.Unlock()
	r.gen.recs[i].Prune()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		pruned, changed := ops.prunes > before, c.changed
		c.mu.Unlock()
		if pruned {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// twoPrunesWhileSaturated holds operations on as many keys as one
// reconciler's workers and their queue take, so that its loop reads no
// change, and then, with k Done: deletes k, has the reconciler prune (which
// removes k from its target, the delete unread), puts k back as read
// before the delete, Done status included, and has it prune again, before
// the operations go. The second prune finds k; the first one's removal
// must still count: k is new work.
func (r *chaosRun) twoPrunesWhileSaturated() {
	slots := max(r.roundSize, 2*r.cfg.workers) // the executor's limit
	if !r.manualPrune || r.cfg.workers == 1 || slots >= chaosKeys-6 {
		r.logf("(no two prunes while saturated in this seed)")
		return
	}
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	k := r.key()
	read, _, found := r.gen.table.Get(r.gen.db.ReadTxn(), itemID.Query(k))
	if !found || r.recs[i].getStatus(read).Kind != status.KindDone {
		r.logf("%s: not Done, no two prunes", k)
		return
	}
	var holds []*chaosHold
	var busy []chaosChange
	// A few more than the slots: a key whose version is parked behind
	// its operation, or queued already, takes none.
	for _, n := range r.rng.Perm(chaosKeys) {
		if other := fmt.Sprintf("k%02d", n); other != k && len(busy) < slots+6 {
			holds = append(holds, c.hold(other))
			busy = append(busy, chaosChange{key: other, value: r.value()})
		}
	}
	rev := r.write(busy...)
	r.logf("@%d %soperations held on %s, to take every slot", rev, r.recs[i].label(), describeChanges(busy))
	started := 0
	for _, h := range holds {
		if started < r.cfg.workers && r.waitStarted(h, 5*time.Millisecond) {
			started++
		}
	}
	<-time.After(2 * time.Millisecond) // for the loop to fill its queue; any order is a valid schedule
	rev = r.write(chaosChange{key: k})
	r.logf("@%d delete %s (%d held operations started)", rev, k, started)
	r.logf("%sPrune() while saturated: ran %v", r.recs[i].label(), r.pruneAndWait(i, 20*time.Millisecond))

	rev = r.write(chaosChange{key: k, obj: read})
	r.logf("@%d put %s=%s back as read before the delete (%s)", rev, k, read.Value, r.statuses(read))
	r.logf("%sPrune() again: ran %v", r.recs[i].label(), r.pruneAndWait(i, 20*time.Millisecond))
	for _, h := range holds {
		c.release(h)
	}
	r.logf("%soperations released", r.recs[i].label())

	// Once the put-back is read, the target must come to hold it, or its
	// status change (applied again, or failed): a Done that stays while
	// the target lacks the object was believed. A retry or a requeued
	// batch entry may still be on its way, so this waits a while.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	reached, _, err := r.gen.recs[i].WaitUntilReconciled(ctx, rev)
	cancel()
	if err != nil || reached < rev {
		r.logf("%s: not read within 100ms (reached @%d), not checked", k, reached)
		return
	}
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	for {
		obj, _, watch, found := r.gen.table.GetWatch(r.gen.db.ReadTxn(), itemID.Query(k))
		if !found || r.recs[i].getStatus(obj).ID() != r.recs[i].getStatus(read).ID() {
			return
		}
		c.mu.Lock()
		got, has := c.data[k]
		changed := c.changed
		c.mu.Unlock()
		if has && got == read.Value {
			return
		}
		select {
		case <-watch:
		case <-changed:
		case <-deadline.C:
			c.mu.Lock()
			c.violate("%s=%s put back after two prunes was believed %s: the target has %q (present: %v)",
				k, read.Value, r.recs[i].getStatus(read), got, has)
			c.mu.Unlock()
			return
		}
	}
}

// pruneWhileBusy holds operations on a few keys, so that with workers the
// workers are busy, writes more keys so that work is queued behind them,
// and holds a prune asked for meanwhile. While the prune is held it lets
// the operations go: the workers are free, and the queued work must still
// wait for the prune to end.
func (r *chaosRun) pruneWhileBusy() { r.whileBusy(false) }

// pauseWhileBusy is pruneWhileBusy with Pause in place of the prune, and a
// newer version of one held key parked behind its operation: once every
// Pause has returned, neither the parked version nor the queued work may
// start, however the workers come free.
func (r *chaosRun) pauseWhileBusy() { r.whileBusy(true) }

func (r *chaosRun) whileBusy(pause bool) {
	if !pause && !r.manualPrune {
		r.logf("(no Prune() in this seed)")
		return
	}
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	var holds []*chaosHold
	var busy, queued []chaosChange
	chosen := map[string]bool{}
	for n := 2 + r.rng.IntN(4); n > 0; n-- {
		k := r.key()
		if chosen[k] {
			continue
		}
		chosen[k] = true
		holds = append(holds, c.hold(k))
		busy = append(busy, chaosChange{key: k, value: r.value()})
	}
	rev := r.write(busy...)
	r.logf("@%d %soperations held on %s", rev, r.recs[i].label(), describeChanges(busy))
	for _, h := range holds {
		r.waitStarted(h, 10*time.Millisecond)
	}
	for n := 1 + r.rng.IntN(3); n > 0; n-- {
		queued = append(queued, chaosChange{key: r.key(), value: r.value()})
	}
	if pause {
		queued = append(queued, chaosChange{key: busy[0].key, value: r.value()})
	}
	rev = r.write(queued...)
	r.logf("@%d %s, queued behind them", rev, describeChanges(queued))
	if pause {
		if !r.gen.paused {
			r.setPaused(true)
		}
		// A start sooner than startGrace after Pause returned is not
		// told from one that passed the gate before it.
		<-time.After(startGrace)
		for _, h := range holds {
			c.release(h)
		}
		r.waitCalls(c, len(queued), 20*time.Millisecond)
		r.logf("%soperations released while paused", r.recs[i].label())
		return
	}
	ph := c.hold(pruneHoldKey)
	r.gen.recs[i].Prune()
	if r.waitStarted(ph, 20*time.Millisecond) {
		// A start sooner than startGrace after the prune began is not
		// told from one that passed the gate before it.
		<-time.After(startGrace)
		r.logf("%sprune held", r.recs[i].label())
	}
	for _, h := range holds {
		c.release(h)
	}
	r.waitCalls(c, len(queued), 20*time.Millisecond)
	c.release(ph)
	r.logf("%sprune and operations released", r.recs[i].label())
}

func describeChanges(changes []chaosChange) string {
	words := make([]string, len(changes))
	for i, ch := range changes {
		words[i] = ch.key + "=" + ch.value
	}
	return strings.Join(words, " ")
}

// setPaused pauses or resumes every reconciler.
func (r *chaosRun) setPaused(paused bool) {
	if !paused {
		r.markPaused(false) // before Resume: starts are allowed from now on
	}
	for _, rc := range r.gen.recs {
		if paused {
			rc.Pause()
		} else {
			rc.Resume()
		}
	}
	if paused {
		r.markPaused(true) // every Pause has returned: no start from now on
	}
	r.gen.paused = paused
	r.logf("paused: %v", paused)
}

// pauseFromAnOperation pauses every reconciler from inside an operation,
// in the middle of a round, after asking for a prune: the round must not
// start anything more, its due prune included.
func (r *chaosRun) pauseFromAnOperation() {
	k := r.key()
	i := r.rng.IntN(len(r.recs))
	c := r.recs[i].target
	recs := slices.Clone(r.gen.recs)
	// An operation on another key held first keeps a loop without
	// workers in its round while the prune is asked for and k written, so
	// that the next round may be the prune's and also run k's operation.
	var first *chaosHold
	if j := r.key(); j != k {
		first = c.hold(j)
		v := r.value()
		rev := r.write(chaosChange{key: j, value: v})
		r.logf("@%d set %s=%s, %soperation held", rev, j, v, r.recs[i].label())
		r.waitStarted(first, 20*time.Millisecond)
	}
	h := c.hold(k)
	h.done = make(chan struct{})
	h.inside = func() {
		for _, rc := range recs {
			rc.Pause()
		}
		if r.cfg.workers <= 1 {
			c.pausedInRound.Store(true)
		}
		r.markPaused(true)
	}
	if r.manualPrune {
		for _, rc := range recs {
			rc.Prune()
		}
	}
	v := r.value()
	rev := r.write(chaosChange{key: k, value: v})
	r.logf("@%d set %s=%s, %soperation to pause every reconciler", rev, k, v, r.recs[i].label())
	if first != nil {
		c.release(first)
	}
	timer := time.NewTimer(20 * time.Millisecond)
	defer timer.Stop()
	select {
	case <-h.started:
	case <-timer.C:
		c.mu.Lock()
		taken := h.taken
		if !taken {
			delete(c.holds, k)
		}
		c.mu.Unlock()
		if !taken {
			r.logf("%s: operation did not start; paused from the test", k)
			r.setPaused(true)
			return
		}
		<-h.started
	}
	c.release(h)
	timer.Reset(10 * time.Second)
	select {
	case <-h.done:
		r.gen.paused = true
		r.logf("paused: true, from the operation on %s", k)
	case <-timer.C: // cut short (a timeout): pause from here
		r.logf("%s: operation cut short; paused from the test", k)
		r.setPaused(true)
	}
}

// waitStarted waits up to d for an operation to block on h.
func (r *chaosRun) waitStarted(h *chaosHold, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-h.started:
		return true
	case <-timer.C:
		return false
	}
}

// markPaused tells the targets whether every reconciler is paused, so
// that they flag an operation that starts meanwhile.
func (r *chaosRun) markPaused(paused bool) {
	for _, rec := range r.recs {
		if paused {
			rec.target.pausedAt.Store(time.Now().UnixNano())
		} else {
			rec.target.pausedAt.Store(0)
			rec.target.pausedInRound.Store(false)
		}
	}
}

// waitCalls waits for n more calls on the target, or for the timeout.
func (r *chaosRun) waitCalls(c *chaosTarget, n int, timeout time.Duration) {
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
	r.markPaused(false) // a new generation's reconcilers are not paused
	r.gens++
	clear(r.written) // statuses of an earlier generation mean nothing to this one
	clear(r.read)
	g := &chaosGen{}
	for _, rec := range r.recs {
		g.ops = append(g.ops, &chaosOps{
			c: rec.target, gen: r.gens, name: rec.name, getStatus: rec.getStatus,
			inFlight: map[string]int{}, lastRev: map[string]statedb.Revision{}, applied: map[uint64]int{}, lastApplied: map[string]uint64{}, laterAsked: map[uint64]int{},
		})
		g.indexes = append(g.indexes, convergeindex.NewNamedStatusIndex("status-"+rec.name, rec.getStatus))
	}
	g.hive = hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("test", "Chaos test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params, h *cell.SimpleHealth) error {
				g.db, g.health = db, h
				indexes := make([]statedb.Indexer[*item], len(g.indexes))
				for i := range g.indexes {
					indexes[i] = g.indexes[i]
				}
				var err error
				g.table, err = statedb.NewTable(db, "items", itemID, indexes...)
				if err != nil {
					return err
				}
				if g.deps, err = statedb.NewTable(db, "deps", chaosDepID); err != nil {
					return err
				}
				wtxn := db.WriteTxn(g.table)
				g.markDone = g.table.RegisterInitializer(wtxn, "chaos")
				wtxn.Commit()
				for i, rec := range r.recs {
					ops := g.ops[i]
					ops.table, ops.deps = g.table, g.deps
					var batch reconciler.BatchOperations[*item]
					if r.cfg.batch {
						batch = ops
					}
					opts := append(slices.Clip(r.opts), reconciler.WithDependency(g.deps, dependents))
					if rec.name != "" {
						opts = append(opts, reconciler.WithName(rec.name))
					}
					rc, err := reconciler.Register(p, g.table, (*item).clone, rec.setStatus, rec.getStatus, ops, batch, opts...)
					if err != nil {
						return err
					}
					g.recs = append(g.recs, rc)
				}
				return nil
			}),
		),
	)
	require.NoError(r.t, g.hive.Start(r.log, context.Background()))
	r.gen = g

	// Populate in a few transactions while the reconcilers already run.
	// Some objects come with a retryable Error status of their own, as
	// restored from a file: no reconciler has a retry for it, and each
	// must still apply them.
	keys := slices.Sorted(maps.Keys(desired))
	var restored []string
	for len(keys) > 0 {
		n := min(len(keys), 1+r.rng.IntN(chaosKeys))
		changes := make([]chaosChange, n)
		for i, k := range keys[:n] {
			changes[i] = chaosChange{key: k, value: desired[k]}
			if r.rng.IntN(4) == 0 {
				changes[i].obj = r.restoredInError(k, desired[k])
				restored = append(restored, k)
			}
		}
		r.write(changes...)
		keys = keys[n:]
	}
	if len(restored) > 0 {
		r.logf("restored in Error: %s", strings.Join(restored, " "))
	}
	r.initIn = 0
	if r.rng.IntN(2) == 0 {
		r.initIn = 1 + r.rng.IntN(12)
		if r.manualPrune && r.rng.IntN(2) == 0 {
			for _, rc := range g.recs {
				rc.Prune() // must wait for the initialization
			}
			r.logf("Prune() before initialization")
		}
	}
	if r.initIn == 0 {
		r.markInitialized()
	}
}

func (r *chaosRun) markInitialized() {
	g := r.gen
	for _, ops := range g.ops {
		ops.c.mu.Lock()
		ops.initialized = true
		ops.c.mu.Unlock()
	}
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
	require.NoError(r.t, err, "stopping generation %d", r.gens)
	for _, ops := range g.ops {
		ops.c.mu.Lock()
		if ops.running > 0 || ops.pruneRunning {
			ops.violate("%d operation(s) (prune: %v) still running after Stop returned", ops.running, ops.pruneRunning)
		}
		ops.stopped = true
		// A failure that returns as the hive stops is taken for the stop's
		// doing, and its update asked again after the start: so may a
		// later value's.
		for id := range ops.laterAsked {
			ops.c.reinserts[id]++
		}
		ops.c.mu.Unlock()
	}
	if took > 5*time.Second {
		r.t.Errorf("seed %d: stopping generation %d took %s", r.seed, r.gens, took)
	}
}

// restartInPlace stops the hive, changes a few keys while it is stopped,
// and starts the same hive again: same table, same reconcilers, whose jobs
// run again.
func (r *chaosRun) restartInPlace() {
	g := r.gen
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(r.t, g.hive.Stop(r.log, ctx), "stopping the hive")
	for _, ops := range g.ops {
		ops.c.mu.Lock()
		if ops.running > 0 || ops.pruneRunning {
			ops.violate("%d operation(s) (prune: %v) still running after Stop returned", ops.running, ops.pruneRunning)
		}
		ops.stopped = true
		// A failure that returns as the hive stops is taken for the stop's
		// doing, and its update asked again after the start: so may a
		// later value's.
		for id := range ops.laterAsked {
			ops.c.reinserts[id]++
		}
		ops.c.mu.Unlock()
	}
	// An update that succeeded but was cut short before its status was
	// written (a batch stopped part way cannot tell which entries ran) may
	// be applied again after the start: the object is still Pending, or
	// still Error from an earlier attempt, or carries a status from before
	// a delete and is applied with a Pending status of the reconciler's
	// making, which only the last update of the key has seen.
	for obj := range g.table.All(g.db.ReadTxn()) {
		for i, rec := range r.recs {
			rec.target.mu.Lock()
			last := g.ops[i].lastApplied[obj.ID]
			rec.target.mu.Unlock()
			if st := rec.getStatus(obj); st.Kind != status.KindDone {
				rec.target.reinserted(st.ID(), last)
			} else if last != st.ID() {
				rec.target.reinserted(last)
			}
		}
	}
	r.logf("hive stopped")
	for n := r.rng.IntN(5); n > 0; n-- {
		r.keyMove(r.key(), r.rng.IntN(5))
	}
	for _, ops := range g.ops {
		ops.c.mu.Lock()
		ops.stopped = false
		ops.c.mu.Unlock()
	}
	require.NoError(r.t, g.hive.Start(r.log, ctx), "starting the hive again")
	r.logf("hive started again")
}

func (r *chaosRun) checkViolations() {
	if all := r.violations(); len(all) > 0 {
		r.t.Fatalf("seed %d: %d violation(s):\n  %s", r.seed, len(all), strings.Join(all, "\n  "))
	}
}

// violations returns what the targets recorded against the guarantees.
func (r *chaosRun) violations() []string {
	var all []string
	for _, rec := range r.recs {
		rec.target.mu.Lock()
		all = append(all, rec.target.violations...)
		rec.target.mu.Unlock()
	}
	return all
}

// waitFor polls cond whenever a target or the table changes (and every few
// milliseconds, for health) until it holds or the deadline passes.
func (r *chaosRun) waitFor(what string, timeout time.Duration, cond func() string) {
	g := r.gen
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var changed []<-chan struct{}
		for _, rec := range r.recs {
			rec.target.mu.Lock()
			changed = append(changed, rec.target.changed)
			rec.target.mu.Unlock()
		}
		_, tableWatch := g.table.AllWatch(g.db.ReadTxn())
		problem := cond()
		if problem == "" {
			return
		}
		var second <-chan struct{}
		if len(changed) > 1 {
			second = changed[1]
		}
		select {
		case <-changed[0]:
		case <-second:
		case <-tableWatch:
		case <-tick.C:
		case <-deadline.C:
			// Both: a violation may explain the problem, or not.
			msg := fmt.Sprintf("seed %d: %s: not reached within %s: %s", r.seed, what, timeout, problem)
			if all := r.violations(); len(all) > 0 {
				msg += fmt.Sprintf("\nand %d violation(s):\n  %s", len(all), strings.Join(all, "\n  "))
			}
			r.t.Fatal(msg)
		}
	}
}

// healAndCheck turns the faults off and checks that the system converges.
func (r *chaosRun) healAndCheck(settings string) {
	for _, rec := range r.recs {
		rec.target.heal()
	}
	r.logf("heal")
	if r.gen.paused {
		r.setPaused(false)
	}
	if r.initIn >= 0 {
		r.markInitialized()
	}
	g := r.gen
	// Values retried only in a century are replaced, as a user fixes
	// them: the new version must not wait behind that retry.
	for _, k := range slices.Sorted(maps.Keys(r.model)) {
		if isLater(r.model[k]) {
			r.values++
			v := fmt.Sprintf("v%d.%d", r.gens, r.values)
			rev := r.write(chaosChange{key: k, value: v})
			r.logf("@%d set %s=%s in place of a later value", rev, k, v)
		}
	}

	for i, rec := range r.recs {
		// The first prune after initialization must happen by itself. If
		// the last one failed (faults were on), ask for another.
		c, ops := rec.target, g.ops[i]
		r.waitFor(rec.label()+"the initial prune", chaosHealTimeout, func() string {
			c.mu.Lock()
			defer c.mu.Unlock()
			if ops.prunes == 0 || ops.pruneRunning {
				return fmt.Sprintf("%d prune(s) done, one running: %v", ops.prunes, ops.pruneRunning)
			}
			return ""
		})
		c.mu.Lock()
		pruned := ops.lastPruneOK
		c.mu.Unlock()
		if !pruned {
			g.recs[i].Prune()
			r.waitFor(rec.label()+"a prune after healing", chaosHealTimeout, func() string {
				c.mu.Lock()
				defer c.mu.Unlock()
				if !ops.lastPruneOK {
					return "the last prune failed"
				}
				return ""
			})
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), chaosHealTimeout)
	defer cancel()
	for i, rec := range r.recs {
		if err := reconciler.WaitForReconciliation(ctx, g.db, g.table, g.indexes[i]); err != nil {
			var stuck []string
			for obj, rev := range g.table.All(g.db.ReadTxn()) {
				if st := rec.getStatus(obj); st.IsPendingOrRefreshing() {
					stuck = append(stuck, fmt.Sprintf("%s=%s@%d %s (id %d)", obj.ID, obj.Value, rev, st, st.ID()))
				}
			}
			r.t.Fatalf("seed %d: %sobjects still to reconcile: %v: %s", r.seed, rec.label(), err, strings.Join(stuck, ", "))
		}
	}
	r.waitFor("convergence", chaosHealTimeout, r.converged)

	// An operation that started before the heal phase may still fail after
	// the state above was observed (a delete applied and then failed leaves
	// nothing to see in the table or the target), so wait for the retry
	// queues to drain, then check the state again.
	rev := g.table.Revision(g.db.ReadTxn())
	r.waitFor("retry queues to drain", chaosHealTimeout, func() string {
		for i, rec := range r.recs {
			reached, low, err := g.recs[i].WaitUntilReconciled(ctx, rev)
			switch {
			case err != nil:
				return err.Error()
			case reached < rev:
				return fmt.Sprintf("%sreached revision %d of %d", rec.label(), reached, rev)
			case low != 0:
				return fmt.Sprintf("%sobjects still queued for retry (lowest revision %d)", rec.label(), low)
			}
		}
		return ""
	})
	r.waitFor("convergence after the retries", chaosHealTimeout, r.converged)
	calls := 0
	for _, rec := range r.recs {
		rec.target.mu.Lock()
		calls += rec.target.calls
		rec.target.mu.Unlock()
	}
	r.checkViolations()
	r.t.Logf("seed %d (%s): %d steps, %d generation(s), %d calls, converged on %d objects",
		r.seed, settings, len(r.steps), r.gens, calls, g.table.NumObjects(g.db.ReadTxn()))
}

// converged returns "" if every target matches the table exactly, every
// object is settled and health is OK; otherwise what is wrong.
func (r *chaosRun) converged() string {
	g := r.gen
	var problems []string
	if problem := r.tableProblem(); problem != "" {
		problems = append(problems, problem)
	}
	for _, rec := range r.recs {
		data, _ := rec.target.snapshot()
		rec.target.mu.Lock()
		depSeen := maps.Clone(rec.target.depSeen)
		rec.target.mu.Unlock()
		inTable := map[string]bool{}
		for obj := range g.table.All(g.db.ReadTxn()) {
			inTable[obj.ID] = true
			got, has := data[obj.ID]
			st := rec.getStatus(obj)
			if isPoison(obj.Value) {
				if st.Kind != status.KindError || !st.Terminal || !strings.Contains(st.Error, "poison value") {
					problems = append(problems, fmt.Sprintf("%s%s=%s is %s, want a terminal Error", rec.label(), obj.ID, obj.Value, st))
				}
				if has && got == obj.Value {
					problems = append(problems, fmt.Sprintf("%starget holds poison %s=%s", rec.label(), obj.ID, got))
				}
				continue
			}
			if st.Kind != status.KindDone && !(r.refresh && st.Kind == status.KindRefreshing) {
				problems = append(problems, fmt.Sprintf("%s%s=%s is %s", rec.label(), obj.ID, obj.Value, st))
			}
			if !has || got != obj.Value {
				problems = append(problems, fmt.Sprintf("%starget has %s=%q (present: %v), table %q", rec.label(), obj.ID, got, has, obj.Value))
			}
			want := ""
			if d, _, found := g.deps.Get(g.db.ReadTxn(), chaosDepID.Query(depOf(obj.ID))); found {
				want = d.Value
			}
			if seen := depSeen[obj.ID]; has && seen != want && !r.depStale[obj.ID] {
				problems = append(problems, fmt.Sprintf("%s%s was last applied with dependency %s=%q, it is %q now", rec.label(), obj.ID, depOf(obj.ID), seen, want))
			}
		}
		for k, v := range data {
			if !inTable[k] {
				problems = append(problems, fmt.Sprintf("%sdeleted %s=%s still in the target", rec.label(), k, v))
			}
		}
		if h := g.health.GetChild(rec.healthName()); h == nil {
			problems = append(problems, "no health for "+rec.healthName())
		} else {
			h.Lock()
			if h.Level != cell.StatusOK {
				problems = append(problems, fmt.Sprintf("%s health %s: %s: %v", rec.healthName(), h.Level, h.Status, h.Error))
			}
			h.Unlock()
		}
	}
	return strings.Join(problems, "; ")
}
