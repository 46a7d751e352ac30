package reconciler_test

// The chaos test's world: targets, operations, hives, dependencies, writes.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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

	"github.com/converge-go/converge/internal/ident"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tables"
)

var (
	errChaos     = errors.New("chaos")
	errChaosDown = fmt.Errorf("target down: %w", errChaos) // an outage (see chaosTarget.down)
)

// isDown is the circuit breaker's classifier in the runs that give one.
func isDown(err error) bool { return errors.Is(err, errChaosDown) }

// panickyIsDown is isDown with a bug: it panics on errors of keys ending in
// 7, which the reconciler must recover from (taken as not about the target).
func panickyIsDown(err error) bool {
	if strings.Contains(err.Error(), "7: ") {
		panic("chaos classifier: " + err.Error())
	}
	return isDown(err)
}

// The faults of one call: faultApplyThenError applies the change and
// reports a failure; faultTerminal is terminal for deletes (which must not
// be lost), a plain error otherwise; faultForced is the test's (failNext).
type chaosFault int

const (
	faultNone chaosFault = iota
	faultError
	faultApplyThenError
	faultRetryAfter
	faultPanic
	faultTerminal
	faultSlow
	faultForced
	faultDown // the target is down: every call fails with errChaosDown
)

const pruneHoldKey = "(prune)" // a hold on it blocks the next prune

// A poison value fails terminally and never reaches the target; a later
// value asks for the longest RetryAfter, and must not be asked again.
func isPoison(value string) bool { return strings.HasPrefix(value, "poison") }
func isLater(value string) bool  { return strings.HasPrefix(value, "later") }

// chaosTarget is the target system every generation of a run shares: it
// holds key→value pairs, draws faults and records the violations it sees.
type chaosTarget struct {
	// When every Pause had returned (0: not paused), and whether an operation
	// of a loop without workers paused it; read first thing, without mu.
	pausedAt      atomic.Int64
	pausedInRound atomic.Bool

	mu                 sync.Mutex // guards what follows
	rng                *rand.Rand
	failProb, slowProb float64
	healed             bool
	down               bool              // an outage: every call fails, until heal or the test ends it
	downAsk            time.Duration     // in an outage, the calls fail with RetryAfter(downAsk, ...) if >= 0
	downKeys           map[string]bool   // the calls on these keys fail as in an outage (partialOutage)
	recheckProb        float64           // an update that succeeds asks for a re-check (RecheckAfter)
	data, depSeen      map[string]string // depSeen: the dependency value a key's last update saw
	calls              int
	violations         []string
	changed            chan struct{}         // closed and replaced on every change
	holds              map[string]*chaosHold // the next operation on a key blocks on it
	lateOn             map[string]chaosLate  // the next successful update of a key asks late, once another call started (lateAskOnTheNextCall)
	failNext           map[string]int        // the next operations on a key fail
	reinserts          map[uint64]int        // per status identity, the test's writes of it again
	deletes            map[uint64]int        // per status identity, the test's deletes of an object carrying it
	inCall             map[int64]int         // per goroutine, the calls it is inside (see gate)
	gated              map[int64]int         // per goroutine, the calls it began (see gate)
	pauseMark          *startMark            // while paused: what may still start
	rc                 *recheckBook          // the re-checks asked for, and markings seen
	hist               *historyLog           // the errors op returned, per key (chaos_history_test.go)
	drift              *driftBook            // the drift checks' verdicts (chaos_drift_test.go)
}

// chaosHold blocks an operation on key, before it applies anything or (with
// afterApply) once an update applied its object, until released.
type chaosHold struct {
	key             string
	taken, released bool
	started         chan struct{} // closed when an operation blocks on it
	release         chan struct{}
	inside          func() // if set, called by the operation once released; done closed after
	done            chan struct{}
	cut             chan struct{} // closed when the operation's context ends first
	// succeedAtStop: the operation reports success if its context ends.
	afterApply, succeedAtStop bool
}

func newChaosTarget(seed uint64, failProb, slowProb float64) *chaosTarget {
	return &chaosTarget{
		rng: rand.New(rand.NewPCG(seed, 0xfa017)), failProb: failProb, slowProb: slowProb,
		data: map[string]string{}, depSeen: map[string]string{}, changed: make(chan struct{}),
		holds: map[string]*chaosHold{}, lateOn: map[string]chaosLate{}, failNext: map[string]int{}, reinserts: map[uint64]int{}, deletes: map[uint64]int{}, downAsk: -1,
		inCall: map[int64]int{}, gated: map[int64]int{}, rc: newRecheckBook(),
	}
}

func (c *chaosTarget) hold(key string, afterApply bool) *chaosHold {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.holds[key]; old != nil {
		c.open(old)
	}
	c.holds[key] = &chaosHold{key: key, started: make(chan struct{}), release: make(chan struct{}), cut: make(chan struct{}), afterApply: afterApply}
	return c.holds[key]
}

// release lets the operations held by holds go on; it may be called again.
func (c *chaosTarget) release(holds ...*chaosHold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range holds {
		if h != nil {
			c.open(h)
		}
	}
}

// open must be called with mu held.
func (c *chaosTarget) open(h *chaosHold) {
	if !h.released {
		h.released = true
		close(h.release)
	}
	if c.holds[h.key] == h {
		delete(c.holds, h.key)
	}
}

// wait blocks the operation on key on its hold for this moment, if any.
func (c *chaosTarget) wait(ctx context.Context, key string, applied bool) error {
	c.mu.Lock()
	h := c.holds[key]
	if h == nil || c.healed || h.afterApply != applied {
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
		defer c.mu.Unlock()
		return map[bool]error{false: ctx.Err()}[h.succeedAtStop]
	}
}

// with runs f with mu held.
func (c *chaosTarget) with(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

func (c *chaosTarget) failNextN(key string, n int) { c.with(func() { c.failNext[key] = n }) }

func (c *chaosTarget) reinserted(ids ...uint64) {
	c.with(func() {
		for _, id := range ids {
			c.reinserts[id]++
		}
		delete(c.reinserts, 0)
	})
}

// notify must be called with mu held.
func (c *chaosTarget) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitUntil waits up to d for cond (called with mu held) to hold.
func (c *chaosTarget) waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, changed := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

func (c *chaosTarget) heal() {
	c.with(func() {
		c.healed, c.down, c.downKeys = true, false, nil
		for _, h := range c.holds {
			c.open(h)
		}
		clear(c.failNext)
	})
}

// decide draws the fault of a call on key and its delay.
func (c *chaosTarget) decide(key string) (chaosFault, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.healed, c.rc.spared(key):
		return faultNone, 0
	case c.down:
		return faultDown, c.downAsk
	case c.downKeys[key]:
		return faultDown, -1
	case c.failNext[key] > 0:
		c.failNext[key]--
		return faultForced, 0
	case c.rng.Float64() >= c.failProb:
		if c.rng.Float64() >= c.slowProb {
			return faultNone, 0
		}
		return faultSlow, time.Duration(c.rng.Int64N(int64([]time.Duration{15, 1}[min(c.rng.IntN(20), 1)] * time.Millisecond)))
	}
	return []chaosFault{faultError, faultError, faultApplyThenError, faultRetryAfter, faultPanic, faultTerminal}[c.rng.IntN(6)],
		time.Duration(c.rng.Int64N(int64(5 * time.Millisecond)))
}

// recheck draws whether an update that succeeded asks for a re-check, and
// after how long (0: none). None once healed, so that runs settle.
// mu must be held.
func (c *chaosTarget) recheckLocked() time.Duration {
	if !c.healed && c.recheckProb > 0 && c.rng.Float64() < c.recheckProb {
		return time.Duration(1+c.rng.IntN(20)) * time.Millisecond
	}
	return 0
}

// sleepCtx sleeps for d, or returns ctx's error if it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if closedWithin(ctx.Done(), d) {
		return ctx.Err()
	}
	return nil
}

// chaosOps is the Operations and BatchOperations of one reconciler in one
// generation; the fields below the tables are guarded by target.mu.
type chaosOps struct {
	*chaosRec
	gen                 int
	db                  *statedb.DB
	table               statedb.Table[*item]
	deps                statedb.Table[*chaosDep]
	pruningAt           atomic.Int64 // when the running prune began (Unix ns), 0 if none
	initialized         bool
	stopped             bool
	inFlight            map[string]int
	running, prunes     int // operations running, prunes completed
	lastRev             map[string]statedb.Revision
	pruneRunning        bool
	pruneMark           *startMark // while a prune runs: what may still start
	lastPruneOK         bool
	applied, laterAsked map[uint64]int    // per status identity (see count)
	lastApplied         map[string]uint64 // per key, the status identity of its last success
	// appliedIn is, per status identity, the context of the batch call
	// that last applied it (see op).
	appliedIn     map[uint64]context.Context
	priorityReads map[uint64]int   // per status identity (see countPriority)
	late          sync.WaitGroup   // asks made after Update returned (see Update)
	setupDone     bool             // the setup step succeeded in this run (chaos_setup_test.go)
	guard         *chaosGuardState // WithPruneGuard's, or nil (see chaos_guard_test.go)
}

// countPriority returns fn counting its reads per version: WithPriority
// reads a version's priority once, when its change is read, whatever
// requeues it goes through (the breaker holding it, Pause, a stop), so
// more reads of a status identity than the test's writes of it and deletes
// of an object carrying it are a violation. It runs on the reconciler's
// goroutine.
func (o *chaosOps) countPriority(fn func(*item) int) func(*item) int {
	return func(it *item) int {
		if id := o.getStatus(it).ID(); id != 0 {
			o.target.with(func() {
				allowed := 1 + o.target.reinserts[id] + o.target.deletes[id]
				if o.priorityReads[id]++; o.priorityReads[id] > allowed {
					o.violate("priority of %s=%s (status id %d) read %d times, written %d time(s) and deleted %d",
						it.ID, it.Value, id, o.priorityReads[id], 1+o.target.reinserts[id], o.target.deletes[id])
				}
			})
		}
		return fn(it)
	}
}

// start runs an operation's hold and fault; it returns the fault and the
// error to end with, if any.
func (o *chaosOps) start(ctx context.Context, key, what string, inBatch bool) (chaosFault, error) {
	if err := o.target.wait(ctx, key, false); err != nil {
		return faultNone, err
	}
	f, d := o.target.decide(key)
	err := fmt.Errorf("%s %s: %w", what, key, errChaos)
	switch {
	case f == faultForced:
		return f, reconciler.RetryAfter(5*time.Millisecond, err)
	case f == faultDown:
		down := fmt.Errorf("%s %s: %w", what, key, errChaosDown)
		if d >= 0 { // the outage answers RetryAfter (see chaosRun.outage)
			return f, reconciler.RetryAfter(d, down)
		}
		return f, down
	case f == faultTerminal && what == "delete":
		return f, reconciler.TerminalError(err)
	case f == faultError || f == faultTerminal || f == faultPanic && inBatch:
		return f, err
	case f == faultRetryAfter:
		return f, reconciler.RetryAfter(d, err)
	case f == faultPanic:
		panic(err.Error())
	case f == faultSlow:
		return f, sleepCtx(ctx, d)
	}
	return f, nil
}

// count counts it's status in m and flags more than once per write of it:
// work redone. A status without identity is not counted: the reconciler
// may apply such an object again. mu must be held.
func (o *chaosOps) count(m map[uint64]int, it *item, what string) {
	st := o.getStatus(it)
	if st.ID() == 0 {
		return
	}
	if m[st.ID()]++; m[st.ID()] > 1+o.target.reinserts[st.ID()] {
		o.violate("update %s=%s for status %s (id %d) %s %d times, written %d time(s)", it.ID, it.Value, st, st.ID(), what, m[st.ID()], 1+o.target.reinserts[st.ID()])
	}
}

// op runs an update (or, with del, a delete) of it.
func (o *chaosOps) op(ctx context.Context, txn statedb.ReadTxn, it *item, inBatch, del bool) (err error) {
	defer o.noteOutcome(it.ID, &err)
	c, what := o.target, map[bool]string{false: "update", true: "delete"}[del]
	if !del {
		c.with(func() { c.given(it.ID, o.getStatus(it)); c.checkDriftVerdict(it, o.getStatus(it)) })
	}
	f, err := o.start(ctx, it.ID, what, inBatch)
	switch {
	case err != nil:
		return err
	case del:
		c.with(func() { delete(c.data, it.ID); c.notify() })
	case isPoison(it.Value):
		return reconciler.TerminalError(fmt.Errorf("update %s: poison value %q", it.ID, it.Value))
	case isLater(it.Value):
		c.with(func() {
			o.count(o.laterAsked, it, "asked within a RetryAfter of "+time.Duration(math.MaxInt64).String())
		})
		return reconciler.RetryAfter(time.Duration(math.MaxInt64), fmt.Errorf("update %s: later value %q", it.ID, it.Value))
	default:
		dep := ""
		if d, _, found := o.deps.Get(txn, chaosDepID.Query(depOf(it.ID))); found {
			dep = d.Value
		}
		c.with(func() { c.data[it.ID], c.depSeen[it.ID] = it.Value, dep; c.notify() })
		if err := c.wait(ctx, it.ID, true); err != nil {
			return fmt.Errorf("update %s: applied, then: %w", it.ID, err)
		}
	}
	if f == faultApplyThenError {
		return fmt.Errorf("%s %s: applied, then: %w", what, it.ID, errChaos)
	}
	if !del {
		c.with(func() {
			id := o.getStatus(it).ID()
			o.lastApplied[it.ID] = id
			if prev := o.appliedIn[id]; prev != nil && prev.Err() == context.DeadlineExceeded {
				// The batch that applied it ran out its timeout before the
				// reconciler ended the call (it cancels the context then):
				// it may have taken every entry for cut short and tried it
				// again, however early this one was done (a busy machine
				// can pass the 10ms margin batch allows for).
				o.applied[id]--
			}
			if inBatch {
				o.appliedIn[id] = ctx
			}
			o.count(o.applied, it, "succeeded")
		})
	}
	return nil
}

func (o *chaosOps) one(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item, del bool) error {
	o.enter(o.gate(), del, it.ID, rev)
	defer o.callEnd()
	defer o.leave(it.ID)
	return o.op(ctx, txn, it, false, del)
}

func (o *chaosOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	st := o.getStatus(it)
	err := o.one(ctx, txn, rev, it, false)
	if err != nil {
		return err
	}
	var d time.Duration
	o.target.with(func() { d = o.target.ask(it.ID, st) })
	if d > 0 {
		reconciler.RecheckAfter(ctx, d)
	}
	if l, ok := o.lateAsked(it.ID); ok {
		// Once the next call has started (lateAskOnTheNextCall): an
		// ask with this context must do nothing. The held call may
		// have started before this one (and been cut by its timeout):
		// then the ask comes at once, and may race this call's end,
		// as the random late asks below may.
		g := goid()
		var began int
		o.target.with(func() { began = o.target.gated[g] })
		o.late.Add(1)
		go func() {
			defer o.late.Done()
			defer close(l.done)
			select {
			case <-l.after:
			case <-time.After(time.Second):
			}
			o.target.with(func() {
				if o.target.gated[g] == began {
					o.target.rc.raced[it.ID]++
				}
			})
			reconciler.RecheckAfter(ctx, time.Millisecond)
		}()
	} else if o.target.lateAsk() {
		// After Update returned, as a goroutine it started might: by the
		// time the next call starts (or a little later), an ask with
		// this context must do nothing.
		g := goid()
		o.target.with(func() {
			next, began := o.target.changed, o.target.gated[g]
			o.late.Add(1)
			go func() {
				defer o.late.Done()
				timer := time.NewTimer(20 * time.Millisecond)
				defer timer.Stop()
				select {
				case <-next:
				case <-timer.C:
				}
				// next may be another goroutine's change: until the
				// goroutine that ran Update begins its next call, the
				// reconciler may not have ended this one's reports, and
				// the ask may count, as one made while Update ran.
				o.target.with(func() {
					if o.target.gated[g] == began {
						o.target.rc.raced[it.ID]++
					}
				})
				reconciler.RecheckAfter(ctx, time.Millisecond)
			}()
		})
	}
	return nil
}
func (o *chaosOps) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	return o.one(ctx, txn, rev, it, true)
}
func (o *chaosOps) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, b []reconciler.BatchEntry[*item]) {
	defer o.callEnd()
	o.batch(ctx, txn, o.gate(), b, false)
}
func (o *chaosOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, b []reconciler.BatchEntry[*item]) {
	defer o.callEnd()
	o.batch(ctx, txn, o.gate(), b, true)
}

// chaosProcessor is chaosOps implementing BatchProcessor: a call is a
// DeleteBatch then an UpdateBatch, each of which may reorder, overwrite or
// panic, and then sometimes fails as a whole.
type chaosProcessor struct{ *chaosOps }

func (p chaosProcessor) ProcessBatch(ctx context.Context, txn statedb.ReadTxn, deleted, upserted []reconciler.BatchEntry[*item]) error {
	o := p.chaosOps
	g := o.gate() // the call started once: its updates too, whatever happens meanwhile
	defer o.callEnd()
	o.batch(ctx, txn, g, deleted, true)
	overwrote := o.batch(ctx, txn, g, upserted, false)
	fail := false
	o.target.with(func() {
		fail = !o.target.healed && o.target.rng.Float64() < o.target.failProb/4 && !o.target.rc.sparedAny(deleted, upserted)
	})
	if dl, ok := ctx.Deadline(); !fail || ok && time.Until(dl) < 10*time.Millisecond {
		return nil // near the deadline, batch allowed for every entry already
	}
	// The entries without a Result take the call's error and are tried
	// again, their success here notwithstanding; the one overwritten is
	// already allowed for.
	kept := upserted
	if overwrote {
		kept = upserted[:len(upserted)-1]
	}
	var unresolved []reconciler.BatchEntry[*item]
	for _, e := range kept {
		if e.Result == nil {
			unresolved = append(unresolved, e)
		}
	}
	o.askedAgain(false, unresolved)
	return fmt.Errorf("process batch of %d: %w", len(deleted)+len(upserted), errChaos)
}

// batch runs op on every entry of a call that saw g at the gate; it may
// reorder them, replace the last with one of its own (which the
// reconciler cannot bind; overwrote then says so), or panic part way.
func (o *chaosOps) batch(ctx context.Context, txn statedb.ReadTxn, g gateSeen, batch []reconciler.BatchEntry[*item], del bool) (overwrote bool) {
	if len(batch) == 0 {
		return false
	}
	for _, e := range batch {
		o.enter(g, del, e.Object.ID, e.Revision)
	}
	defer func() {
		for _, e := range batch {
			o.leave(e.Object.ID)
		}
	}()
	overwrite, at := false, -1
	o.target.with(func() {
		c := o.target
		if c.rng.IntN(3) == 0 {
			c.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		}
		if overwrite = c.rng.IntN(8) == 0; !c.healed && c.rng.Float64() < c.failProb/4 {
			at = c.rng.IntN(len(batch))
		}
		if c.rc.sparedAny(batch) {
			overwrite, at = false, -1
		}
	})
	if overwrite {
		overwrote = true
		defer func() {
			e := &batch[len(batch)-1]
			o.askedAgain(del, batch[len(batch)-1:])
			*e = reconciler.BatchEntry[*item]{Object: e.Object, Revision: e.Revision, Result: e.Result}
		}()
	}
	for i := range batch {
		if i == at {
			o.askedAgain(del, batch[:i]) // the whole batch is recorded as failed
			panic(fmt.Sprintf("batch: chaos panic at entry %d of %d", i, len(batch)))
		}
		st := o.getStatus(batch[i].Object)
		batch[i].Result = o.op(ctx, txn, batch[i].Object, true, del)
		if !del && batch[i].Result == nil {
			o.target.with(func() { batch[i].RecheckAfter = o.target.ask(batch[i].Object.ID, st) })
		}
	}
	// Near the deadline the reconciler cannot tell a success from an entry
	// never reached: it retries them.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 10*time.Millisecond {
		o.askedAgain(del, batch)
	}
	return overwrote
}

// askedAgain allows one more success (or later-value ask) per entry whose
// result the reconciler cannot take.
func (o *chaosOps) askedAgain(del bool, entries []reconciler.BatchEntry[*item]) {
	if del {
		return
	}
	o.target.mu.Lock()
	defer o.target.mu.Unlock()
	for _, e := range entries {
		id := o.getStatus(e.Object).ID()
		switch {
		case id == 0: // not counted
		case e.Result == nil:
			o.applied[id]--
		case isLater(e.Object.Value) && strings.Contains(e.Result.Error(), "later value"):
			o.laterAsked[id]--
		}
	}
}

func (o *chaosOps) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	g, c, ok := o.gate(), o.target, false
	defer o.callEnd()
	c.with(func() {
		o.begin(g, "prune")
		o.pruneRunning = true
		o.pruningAt.Store(time.Now().UnixNano())
		o.pruneMark = c.mark(false)
	})
	defer c.with(func() {
		o.prunes++
		o.pruneRunning, o.lastPruneOK = false, ok
		o.pruningAt.Store(0)
		o.pruneMark = nil
		c.notify()
	})
	for _, t := range []statedb.TableMeta{o.table, o.deps} {
		if init, _ := t.Initialized(txn); !init {
			c.with(func() { o.violate("prune given a snapshot in which table %s is not initialized", t.Name()) })
		}
	}
	want, all := map[string]bool{}, map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	for it := range o.table.All(txn) {
		all[it.ID] = true
	}
	if !maps.Equal(want, all) {
		c.with(func() {
			o.violate("prune given %v, the table holds %v", slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(all)))
		})
	}
	f, err := o.start(ctx, pruneHoldKey, "prune", false)
	if err != nil {
		return err
	}
	partial := f == faultApplyThenError // removes every other key
	ok = !partial
	c.with(func() {
		o.guardCheck(want)
		n := 0
		for k := range c.data {
			if !want[k] {
				if n++; !partial || n%2 == 1 {
					delete(c.data, k)
				}
			}
		}
		c.notify()
	})
	if partial {
		return fmt.Errorf("prune: partly done: %w", errChaos)
	}
	return nil
}

// chaosRec is one reconciler of a run; name "" uses item.Status.
type chaosRec struct {
	name      string
	target    *chaosTarget
	getStatus func(*item) status.Status
	setStatus func(*item, status.Status) *item
	// inSet, if not nil, is the set function of WithStatusSet (of
	// item.Statuses) by which the reconciler is registered instead of
	// setStatus and getStatus ("-sets" runs; see drawNames).
	inSet func(*item, status.Set) *item

	setupFails int // failures of the setup step left, at the next start (chaos_setup_test.go); target's mu
}

func (c *chaosRec) healthName() string { return strings.TrimSuffix("job-reconcile-"+c.name, "-") }
func (c *chaosRec) label() string {
	return map[bool]string{true: "reconciler " + c.name + ": "}[c.name != ""]
}

// chaosGen is one hive; slices are indexed like chaosRun.recs.
type chaosGen struct {
	hive     *hive.Hive
	db       *statedb.DB
	table    statedb.RWTable[*item]
	deps     statedb.RWTable[*chaosDep] // WithDependency of every reconciler
	indexes  []statedb.Index[*item, status.Kind]
	recs     []reconciler.Reconciler[*item]
	ops      []*chaosOps
	health   *cell.SimpleHealth
	markDone func(statedb.WriteTxn)
	initOf   statedb.TableMeta // the table markDone initializes
	paused   bool
}

// chaosDep is a dependency: kM depends on d(M % chaosDeps).
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

func depOf(key string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
	return fmt.Sprintf("d%d", n%chaosDeps)
}

func dependents(d *chaosDep, _ bool) (qs []statedb.Query[*item]) {
	n, _ := strconv.Atoi(strings.TrimPrefix(d.ID, "d"))
	for k := n; k < chaosKeys; k += chaosDeps {
		qs = append(qs, itemID.Query(fmt.Sprintf("k%02d", k)))
	}
	return qs
}

// chaosChange inserts obj as it is, or key=value ("" deletes key).
type chaosChange struct {
	key, value string
	obj        *item
}

// reinserted tells every target that obj's statuses are written again.
func (r *chaosRun) reinserted(obj *item) {
	var ids []uint64
	for _, rec := range r.recs {
		ids = append(ids, rec.getStatus(obj).ID())
	}
	for _, rec := range r.recs {
		rec.target.reinserted(ids...)
	}
}

// write applies changes in one transaction and keeps the model.
func (r *chaosRun) write(changes ...chaosChange) statedb.Revision {
	g := r.gen
	wtxn := g.db.WriteTxn(g.table)
	for _, ch := range changes {
		var err error
		switch {
		case ch.obj != nil:
			_, _, err = g.table.Insert(wtxn, ch.obj.clone()) // StateDB refuses the pointer it holds
			r.model[ch.key] = ch.obj.Value
			r.depStale[ch.key] = r.depStale[ch.key] || r.writeBackUndoesMark(ch.key, ch.obj)
			r.reinserted(ch.obj)
		case ch.value == "":
			var old *item
			var had bool
			old, had, err = g.table.Delete(wtxn, &item{ID: ch.key})
			delete(r.model, ch.key)
			for _, rec := range r.recs {
				if had {
					id := rec.getStatus(old).ID()
					rec.target.with(func() { rec.target.deletes[id]++ })
				}
			}
		default:
			obj := &item{ID: ch.key, Value: ch.value, Status: status.Pending()}
			h := fnv.New32a()
			h.Write([]byte(ch.key + ch.value))
			if h.Sum32()%5 == 0 {
				// As decoded from YAML, or a literal: no identity. (Chosen
				// by a hash, so that the random stream is not drawn from.)
				obj.Status = status.Status{Kind: status.KindPending}
			}
			if r.cfg.set { // a new set, or the old one with every status Pending
				obj.Status, obj.Statuses = status.Status{}, status.NewSet()
				if old, _, found := g.table.Get(wtxn, itemID.Query(ch.key)); found && r.rng.IntN(2) == 0 {
					obj.Statuses = old.Statuses.Pending()
				}
			}
			_, _, err = g.table.Insert(wtxn, obj)
			r.model[ch.key] = ch.value
			r.written[ch.key] = append(r.written[ch.key], obj)
			r.writtenAt[obj] = len(r.steps)
			delete(r.depStale, ch.key)
		}
		require.NoError(r.t, err)
	}
	r.setsWrote(wtxn, changes)
	rev := g.table.Revision(wtxn)
	wtxn.Commit()
	for _, ch := range changes {
		r.lastWrite[ch.key] = rev
	}
	r.marks = append(r.marks, chaosMark{rev, ident.Last()})
	return rev
}

// chaosMark is one write of the test: its revision, and the greatest
// status identity handed out once it was made.
type chaosMark struct {
	rev statedb.Revision
	cut uint64
}

// startGen starts a hive over a new table holding desired, some objects
// restored in Error, and marks it initialized now or after a few steps.
func (r *chaosRun) startGen(desired map[string]string) {
	r.markPaused(false)
	r.gens++
	clear(r.written) // an earlier generation's statuses mean nothing here
	clear(r.lastWrite)
	clear(r.drifts) // their revisions are of the old table
	r.marks = nil
	clear(r.read)
	g := &chaosGen{}
	var indexers []statedb.Indexer[*item]
	for _, rec := range r.recs {
		g.ops = append(g.ops, &chaosOps{chaosRec: rec, gen: r.gens, inFlight: map[string]int{}, lastRev: map[string]statedb.Revision{},
			applied: map[uint64]int{}, lastApplied: map[string]uint64{}, appliedIn: map[uint64]context.Context{}, laterAsked: map[uint64]int{}, priorityReads: map[uint64]int{}})
		g.indexes = append(g.indexes, convergeindex.NewNamedStatusIndex("status-"+rec.name, rec.getStatus))
		indexers = append(indexers, g.indexes[len(g.indexes)-1])
	}
	indexers = append(indexers, r.setsIndexers()...)
	g.hive = hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell, r.commitHookCell(),
		cell.Module("test", "Chaos test module",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db *statedb.DB, p reconciler.Params, h *cell.SimpleHealth) (err error) {
				g.db, g.health = db, h
				if g.table, err = statedb.NewTable(db, "items", itemID, indexers...); err != nil {
					return err
				}
				if g.deps, err = statedb.NewTable(db, "deps", chaosDepID); err != nil {
					return err
				}
				// A third of the seeds put the initializer on deps, a table
				// of WithStartAfter given up on after 1ms: the reconcilers
				// start, but their prunes wait for it (cilium/cilium#45989).
				startAfter := r.seed%3 == 0
				g.initOf = g.table
				if startAfter {
					g.initOf = g.deps
				}
				wtxn := db.WriteTxn(g.initOf)
				if startAfter {
					g.markDone = g.deps.RegisterInitializer(wtxn, "chaos")
				} else {
					g.markDone = g.table.RegisterInitializer(wtxn, "chaos")
				}
				wtxn.Commit()
				for i, rec := range r.recs {
					ops := g.ops[i]
					ops.db, ops.table, ops.deps = db, g.table, g.deps
					batch := map[bool]reconciler.BatchOperations[*item]{true: ops}[r.cfg.batch]
					if r.cfg.process {
						batch = chaosProcessor{ops}
					}
					var single reconciler.Operations[*item] = ops
					if r.cfg.alone {
						single = nil
					}
					opts := append(slices.Clip(r.opts), reconciler.WithDependency(g.deps, dependents), r.setupOption(ops))
					opts = append(opts, ops.driftOptions()...)
					if r.priority.fn != nil {
						opts = append(opts, reconciler.WithPriority(ops.countPriority(r.priority.fn), r.priority.share))
					}
					opts = append(opts, r.guardOptions(ops)...)
					if startAfter {
						opts = append(opts, reconciler.WithStartAfter(time.Millisecond, g.deps))
					}
					if rec.name != "" {
						opts = append(opts, reconciler.WithName(rec.name))
					}
					setStatus, getStatus := rec.setStatus, rec.getStatus
					if rec.inSet != nil {
						setStatus, getStatus = nil, nil
						opts = append(opts, reconciler.WithStatusSet(getSet, rec.inSet))
					}
					rc, err := reconciler.Register(p, g.table, (*item).clone, setStatus, getStatus, single, batch, opts...)
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
	r.setsStarted()
	for keys := slices.Sorted(maps.Keys(desired)); len(keys) > 0; {
		n := min(len(keys), 1+r.rng.IntN(chaosKeys))
		changes := make([]chaosChange, n)
		for i, k := range keys[:n] {
			if changes[i] = (chaosChange{key: k, value: desired[k]}); r.rng.IntN(4) == 0 {
				changes[i].obj = r.restoredInError(k, desired[k])
			}
		}
		r.write(changes...)
		keys = keys[n:]
	}
	for range r.rng.IntN(3) { // waits for what was restored, as the backlog drains
		if len(r.marks) > 0 {
			r.reconciledTo(r.rng.IntN(len(r.recs)), r.marks[r.rng.IntN(len(r.marks))], time.Duration(1+r.rng.IntN(30))*time.Millisecond)
		}
	}
	if r.initIn = 0; r.rng.IntN(2) == 0 {
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

// restoredInError returns key=value Error for every reconciler, as loaded.
func (r *chaosRun) restoredInError(key, value string) *item {
	obj, at := &item{ID: key, Value: value, Statuses: status.NewSet()}, time.Now().Add(-time.Hour)
	for _, rec := range r.recs {
		obj = rec.setStatus(obj, status.ErrorAt(at, errors.New("restored")))
	}
	r.logf("%s=%s restored in Error", key, value)
	return obj
}

// refill makes the table of the initializer uninitialized again, as an
// initializer registered later does (a refill): prunes must wait until
// markInitialized, a few steps on; operations go on.
func (r *chaosRun) refill() {
	g := r.gen
	wtxn := g.db.WriteTxn(g.initOf)
	name := fmt.Sprintf("chaos-refill-%d", len(r.steps))
	if g.initOf == statedb.TableMeta(g.deps) {
		g.markDone = g.deps.RegisterInitializer(wtxn, name)
	} else {
		g.markDone = g.table.RegisterInitializer(wtxn, name)
	}
	wtxn.Commit()
	r.initIn = 1 + r.rng.IntN(12)
	r.logf("table %s uninitialized again (refill) for %d steps", g.initOf.Name(), r.initIn)
}

func (r *chaosRun) markInitialized() {
	for _, ops := range r.gen.ops {
		ops.target.with(func() { ops.initialized = true })
	}
	wtxn := r.gen.db.WriteTxn(r.gen.initOf)
	r.gen.markDone(wtxn)
	wtxn.Commit()
	r.initIn = -1
	r.logf("table initialized")
}

// stop stops the hive and checks that nothing runs after; a later value
// failing as it stops may be asked again after a start.
func (r *chaosRun) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(r.t, r.gen.hive.Stop(r.log, ctx), "stopping generation %d", r.gens)
	if took := time.Since(start); took > 5*time.Second {
		r.t.Errorf("seed %d: stopping generation %d took %s", r.seed, r.gens, took)
	}
	for _, ops := range r.gen.ops {
		ops.late.Wait() // each ends within 20ms
		ops.target.with(func() {
			if ops.running > 0 || ops.pruneRunning {
				ops.violate("%d operation(s) (prune: %v) still running after Stop returned", ops.running, ops.pruneRunning)
			}
			ops.stopped, ops.setupDone = true, false
			for id := range ops.laterAsked {
				ops.target.reinserts[id]++
			}
		})
	}
}

func (r *chaosRun) stopGen() {
	r.stop()
	r.gen.hive = nil
}

// restartInPlace stops the hive, makes changes and starts it again. An
// update cut short before its status was written may be applied again.
func (r *chaosRun) restartInPlace(changes func()) {
	r.stop()
	for obj := range r.gen.table.All(r.gen.db.ReadTxn()) {
		for i, rec := range r.recs {
			var last uint64
			rec.target.with(func() { last = r.gen.ops[i].lastApplied[obj.ID] })
			if st := rec.getStatus(obj); st.Kind != status.KindDone {
				rec.target.reinserted(st.ID(), last)
			} else if last != st.ID() {
				rec.target.reinserted(last)
			}
		}
	}
	r.logf("hive stopped")
	changes()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ops := range r.gen.ops {
		ops.target.with(func() {
			ops.stopped = false
			if m := ops.target.pauseMark; m != nil {
				m.none = true // paused before this run began
			}
		})
	}
	require.NoError(r.t, r.gen.hive.Start(r.log, ctx), "starting the hive again")
	r.logf("hive started again")
}
