package reconciler_test

// The chaos test's world: the target system every generation shares
// (chaosTarget), the operations of one generation (chaosOps), the hives
// (chaosGen), the dependency table, and the writes to the table, which keep
// the model of what the test wrote. See chaos_test.go.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

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
	r.stopInPlace()
	for n := r.rng.IntN(5); n > 0; n-- {
		r.keyMove(r.key(), r.rng.IntN(5))
	}
	r.startInPlace()
}

// stopInPlace stops the hive, for startInPlace to start it again.
func (r *chaosRun) stopInPlace() {
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
}

// startInPlace starts the hive stopInPlace stopped.
func (r *chaosRun) startInPlace() {
	g := r.gen
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ops := range g.ops {
		ops.c.mu.Lock()
		ops.stopped = false
		ops.c.mu.Unlock()
	}
	require.NoError(r.t, g.hive.Start(r.log, ctx), "starting the hive again")
	r.logf("hive started again")
}
