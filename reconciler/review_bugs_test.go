package reconciler_test

// Regression tests for the bugs a second outside review found (numbered as
// in its report). Each drives a real hive through the public API.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/hivetest"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// startLog records operation starts and whether the reconciler was paused
// (after Pause returned, before Resume was called) or pruning when each began.
type startLog struct {
	paused, pruning atomic.Bool
	mu              sync.Mutex
	bad             []string
	started         chan string
}

func newStartLog() *startLog { return &startLog{started: make(chan string, 100)} }

func (l *startLog) start(what string) {
	if l.paused.Load() {
		l.mu.Lock()
		l.bad = append(l.bad, what+" started while paused")
		l.mu.Unlock()
	}
	if l.pruning.Load() {
		l.mu.Lock()
		l.bad = append(l.bad, what+" started while a prune ran")
		l.mu.Unlock()
	}
	select {
	case l.started <- what:
	default:
	}
}

func (l *startLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

// quiet gives a start that must not happen a chance to happen: it waits up
// to d for one and fails if one comes. A pass on a slow machine proves
// less, never more.
func (l *startLog) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case what := <-l.started:
		t.Errorf("%s started", what)
	case <-time.After(d):
	}
}

// Bug 1, with one worker: Pause called while a round runs stops the rest of
// the round from starting.
func TestReviewBug1PauseStopsTheRestOfARound(t *testing.T) {
	log := newStartLog()
	var rec atomic.Pointer[reconciler.Reconciler[*item]]
	ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		log.start("update " + it.ID)
		if it.ID == "a" && !log.paused.Load() {
			(*rec.Load()).Pause()
			log.paused.Store(true)
		}
		return nil
	}}
	f := startFixture(t, ops, nil)
	r := f.rec
	rec.Store(&r)
	f.upsert(&item{ID: "a"}, &item{ID: "b"}, &item{ID: "c"})
	recv(t, log.started, "the first update")
	log.quiet(t, 100*time.Millisecond)
	assert.Empty(t, log.violations())
	log.paused.Store(false)
	f.rec.Resume()
	f.waitReconciled()
	for _, id := range []string{"a", "b", "c"} {
		obj, _ := f.get(id)
		assert.Equal(t, status.KindDone, obj.Status.Kind, id)
	}
}

// Bug 1, with workers: after Pause, neither the version parked behind an
// operation that finishes nor work queued for the workers starts.
func TestReviewBug1PauseHoldsParkedAndQueuedWork(t *testing.T) {
	log := newStartLog()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var once sync.Once
	ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		log.start("update " + it.ID + "=" + it.Value)
		if it.ID == "a" && it.Value == "v1" {
			once.Do(func() { entered <- struct{}{} })
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}}
	f := startFixture(t, ops, nil, reconciler.WithConcurrency(2))
	f.upsert(&item{ID: "a", Value: "v1"})
	recv(t, entered, "a=v1 to start")
	recv(t, log.started, "a=v1's start")
	f.upsert(&item{ID: "a", Value: "v2"}) // parked behind v1
	f.settle(1)
	drain(log.started)

	f.rec.Pause()
	log.paused.Store(true)
	f.upsert(&item{ID: "b"})
	close(release)
	log.quiet(t, 200*time.Millisecond)
	assert.Empty(t, log.violations())

	log.paused.Store(false)
	f.rec.Resume()
	f.waitReconciled()
	obj, _ := f.get("a")
	assert.Equal(t, "v2", obj.Value)
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}

func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// Bug 2: with workers, work queued while every worker is busy does not
// start while a prune runs.
func TestReviewBug2NoStartWhilePruning(t *testing.T) {
	log := newStartLog()
	release := make(chan struct{})
	busy := make(chan string, 2)
	pruneEntered, pruneRelease := make(chan struct{}, 1), make(chan struct{})
	ops := &funcOps{
		update: func(ctx context.Context, _ statedb.Revision, it *item) error {
			log.start("update " + it.ID)
			if it.ID == "a" || it.ID == "b" {
				busy <- it.ID
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
		prune: func(ctx context.Context) error {
			log.pruning.Store(true)
			defer log.pruning.Store(false)
			select {
			case pruneEntered <- struct{}{}:
			default:
			}
			select {
			case <-pruneRelease:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		},
	}
	f := startFixture(t, ops, nil, reconciler.WithConcurrency(2), reconciler.WithPruning(0))
	f.upsert(&item{ID: "a"}, &item{ID: "b"})
	recv(t, busy, "a busy")
	recv(t, busy, "b busy")
	drain(log.started)
	f.upsert(&item{ID: "c"}) // queued: both workers are busy
	f.rec.Prune()
	recv(t, pruneEntered, "the prune")
	close(release) // the workers are free while the prune runs
	log.quiet(t, 200*time.Millisecond)
	assert.Empty(t, log.violations())
	close(pruneRelease)
	f.waitReconciled()
	obj, _ := f.get("c")
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}

// Bug 5: a delete, a new value and at once the earlier object again (status
// identity included) while the first version's update is in flight: the
// reverted object is applied, not taken as done.
func TestReviewBug5DeleteThenTheSameObjectAgain(t *testing.T) {
	for _, workers := range []int{2, 4} {
		g := newGatedTarget("a")
		f := startFixture(t, g.ops(), nil, reconciler.WithConcurrency(workers))
		f.upsert(&item{ID: "a", Value: "v1"})
		waitEntered(t, g, "v1")
		inFlight, ok := f.get("a")
		require.True(t, ok)
		f.remove("a")
		f.settle(1)
		f.upsert(&item{ID: "a", Value: "v2"})
		f.insertAs(inFlight) // back to the earlier object, status identity included
		f.settle(2)
		close(g.release)
		f.waitReconciled()
		last := f.upsert()
		_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
		require.NoError(t, err)

		obj, ok := f.get("a")
		require.True(t, ok)
		assert.Equal(t, status.KindDone, obj.Status.Kind, "workers=%d", workers)
		got, ok := g.get("a")
		assert.True(t, ok, "workers=%d: the table holds a Done, the target nothing", workers)
		assert.Equal(t, "v1", got, "workers=%d", workers)
		f.stop()
	}
}

// reorderingBatch reverses the entries it is given before setting their
// results, and fails the updates of objects whose value is "bad".
type reorderingBatch struct {
	mu      sync.Mutex
	deletes map[string]int
}

func (b *reorderingBatch) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
		batch[i], batch[j] = batch[j], batch[i]
	}
	for i := range batch {
		if batch[i].Object.Value == "bad" {
			batch[i].Result = errors.New("bad value")
		}
	}
}

func (b *reorderingBatch) DeleteBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	for i, j := 0, len(batch)-1; i < j; i, j = i+1, j-1 {
		batch[i], batch[j] = batch[j], batch[i]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range batch {
		b.deletes[batch[i].Object.ID]++
		if batch[i].Object.ID == "d1" && b.deletes["d1"] == 1 {
			batch[i].Result = errors.New("first delete of d1 fails")
		}
	}
}

// Bug 6: a BatchOperations that reorders its entries gets each result
// attributed to its own object: failures are retried, successes Done.
func TestReviewBug6BatchResultsFollowTheirEntries(t *testing.T) {
	for _, workers := range []int{1, 3} {
		b := &reorderingBatch{deletes: map[string]int{}}
		f := startFixture(t, &funcOps{}, &with{batch: b}, reconciler.WithConcurrency(workers), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
		f.upsert(&item{ID: "d1"}, &item{ID: "d2"})
		f.waitReconciled()
		wtxn := f.db.WriteTxn(f.table)
		for _, id := range []string{"d1", "d2"} {
			_, _, err := f.table.Delete(wtxn, &item{ID: id})
			require.NoError(t, err)
		}
		for _, it := range []*item{{ID: "a", Value: "ok"}, {ID: "b", Value: "bad"}, {ID: "c", Value: "ok"}} {
			it.Status = status.Pending()
			_, _, err := f.table.Insert(wtxn, it)
			require.NoError(t, err)
		}
		wtxn.Commit()
		f.waitKind("a", status.KindDone)
		f.waitKind("c", status.KindDone)
		f.waitKind("b", status.KindError)
		deadline := time.Now().Add(20 * time.Second)
		for {
			b.mu.Lock()
			n := b.deletes["d1"]
			b.mu.Unlock()
			if n >= 2 {
				break
			}
			require.True(t, time.Now().Before(deadline), "workers=%d: the failed delete of d1 was not retried", workers)
			last := f.upsert()
			_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
			require.NoError(t, err)
		}
		f.stop()
	}
}

// Bug 7: a dependency mark leaves objects whose status is Unset alone.
func TestReviewBug7DependencyLeavesUnsetAlone(t *testing.T) {
	var deps statedb.RWTable[*item]
	calls := make(chan string, 10)
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		calls <- it.ID
		return nil
	}}
	f := startFixture(t, ops, &with{setup: func(f *fixture) []reconciler.Option {
		db := f.db
		var err error
		deps, err = statedb.NewTable(db, "deps", itemID)
		require.NoError(t, err)
		return []reconciler.Option{reconciler.WithDependency(deps, func(d *item, _ bool) []statedb.Query[*item] {
			return []statedb.Query[*item]{itemID.Query(d.ID)}
		})}
	}})
	wtxn := f.db.WriteTxn(f.table)
	_, _, err := f.table.Insert(wtxn, &item{ID: "unset"}) // status Unset: never reconciled
	require.NoError(t, err)
	wtxn.Commit()
	wtxn = f.db.WriteTxn(deps)
	_, _, err = deps.Insert(wtxn, &item{ID: "unset"})
	require.NoError(t, err)
	wtxn.Commit()
	f.upsert(&item{ID: "marker"})
	f.waitKind("marker", status.KindDone)
	assert.Equal(t, "marker", recv(t, calls, "the marker's update"))
	obj, _ := f.get("unset")
	assert.Equal(t, status.KindUnset, obj.Status.Kind, "the mark changed an Unset status")
	select {
	case id := <-calls:
		t.Errorf("%s was updated", id)
	default:
	}
}

// Bug 8: WaitUntilReconciled counts work carried over a stop: a wait for a
// revision does not return while work cut short below it is not done.
func TestReviewBug8WaitCountsCarriedWork(t *testing.T) {
	entered := make(chan string, 10)
	release := make(chan struct{})
	var stopped atomic.Bool
	ops := &funcOps{update: func(ctx context.Context, _ statedb.Revision, it *item) error {
		if it.ID != "a" {
			return nil
		}
		entered <- it.ID
		if !stopped.Load() {
			<-ctx.Done() // cut short by the stop
			return ctx.Err()
		}
		select { // after the start: held until the test has checked
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	f := startFixture(t, ops, nil, reconciler.WithRoundLimits(1, nil))
	revA := f.upsert(&item{ID: "a"})
	recv(t, entered, "a's update")
	log := hivetest.Logger(t)
	require.NoError(t, f.hive.Stop(log, context.Background()))
	stopped.Store(true)
	revB := f.upsert(&item{ID: "b"})
	require.NoError(t, f.hive.Start(log, context.Background()))
	recv(t, entered, "a's update after the start")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	reached, _, err := f.rec.WaitUntilReconciled(ctx, revA)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "returned %d for a's revision %d (b's is %d) while a's update is held", reached, revA, revB)
	close(release)
	_, _, err = f.rec.WaitUntilReconciled(context.Background(), revA)
	require.NoError(t, err)
	obj, _ := f.get("a")
	assert.Equal(t, status.KindDone, obj.Status.Kind)
}

// Bug 9: option and error values at the edges neither overflow nor spin.
func TestReviewBug9ValuesAtTheEdges(t *testing.T) {
	var attempts atomic.Int32
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if it.ID == "later" {
			attempts.Add(1)
			return reconciler.RetryAfter(time.Duration(math.MaxInt64), errors.New("in 292 years"))
		}
		return nil
	}}
	f := startFixture(t, ops, nil,
		reconciler.WithRoundLimits(math.MaxInt, nil),
		reconciler.WithRetry(time.Millisecond, time.Duration(math.MaxInt64)),
		reconciler.WithRetryJitter(0.9))
	f.upsert(&item{ID: "later"}, &item{ID: "now"})
	f.waitKind("later", status.KindError)
	f.waitKind("now", status.KindDone)
	for i := range 20 { // rounds go on; the retry stays far away
		last := f.upsert(&item{ID: "tick"})
		_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
		require.NoError(t, err, "round %d", i)
	}
	assert.Equal(t, int32(1), attempts.Load(), "a retry 292 years away ran again")
}

// Bug 10: a backlog larger than any internal cap does not hold a fresh
// write back by more than a round. The backlog is what the table holds when
// the reconciler starts; the write comes once the backlog is under way.
func TestReviewBug10FreshWriteOvertakesAHugeBacklog(t *testing.T) {
	const backlog = 140_000 // more than the 1<<17 the deferred queue once held
	fresh := make(chan int64, 1)
	underWay := make(chan struct{})
	var done atomic.Int64
	ops := &funcOps{update: func(_ context.Context, _ statedb.Revision, it *item) error {
		if it.ID == "fresh" {
			fresh <- done.Load()
		}
		if done.Add(1) == 1 {
			close(underWay)
		}
		return nil
	}}
	f := startFixture(t, ops, &with{setup: func(f *fixture) []reconciler.Option {
		db, tbl := f.db, f.table
		wtxn := db.WriteTxn(tbl)
		for i := range backlog {
			_, _, err := tbl.Insert(wtxn, &item{ID: "k" + itoa(i), Status: status.Pending()})
			require.NoError(t, err)
		}
		wtxn.Commit()
		return nil
	}})
	recv(t, underWay, "the backlog's first update")
	atWrite := done.Load()
	f.upsert(&item{ID: "fresh"})
	before := recv(t, fresh, "the fresh write's update") - atWrite
	assert.LessOrEqual(t, before, int64(2000), "%d backlog updates ran between the fresh write and its update", before)
	f.waitReconciled()
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

// A prune already due in a round during which Pause is called (here from an
// Update of that round) waits for Resume: Pause holds off prunes as it holds
// off operations. The prune and the change are made ready together, and the
// loop takes one of them first at random, so the test repeats.
func TestPauseHoldsOffAPruneDueInTheRound(t *testing.T) {
	var paused atomic.Bool
	var mu sync.Mutex
	var bad int
	var rec atomic.Pointer[reconciler.Reconciler[*item]]
	blocking := make(chan struct{}, 1)
	release := make(chan struct{})
	pruned := make(chan struct{}, 1)
	ops := &funcOps{
		update: func(ctx context.Context, _ statedb.Revision, it *item) error {
			switch it.Value {
			case "block":
				blocking <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			case "pause":
				(*rec.Load()).Pause()
				paused.Store(true)
			}
			return nil
		},
		prune: func(ctx context.Context) error {
			if paused.Load() {
				mu.Lock()
				bad++
				mu.Unlock()
			}
			select {
			case pruned <- struct{}{}:
			default:
			}
			return nil
		},
	}
	f := startFixture(t, ops, nil, reconciler.WithPruning(0))
	r := f.rec
	rec.Store(&r)
	const rounds = 12
	for i := range rounds {
		drain(pruned)
		f.upsert(&item{ID: fmt.Sprintf("a%d", i), Value: "block"})
		recv(t, blocking, "the blocking update")
		f.rec.Prune() // waits in its channel while the loop is in the update
		f.upsert(&item{ID: fmt.Sprintf("b%d", i), Value: "pause"})
		release <- struct{}{}
		f.waitKind(fmt.Sprintf("b%d", i), status.KindDone)
		paused.Store(false)
		f.rec.Resume()
		recv(t, pruned, "the prune after Resume")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, bad, "prunes that ran after Pause returned, in %d rounds", rounds)
}
