package reconciler_test

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// errKitDown is the error of a target that is down as a whole.
var errKitDown = errors.New("kit: target down")

// errKitObject is an error about one object, not the target.
var errKitObject = errors.New("kit: bad object")

// kitops is a controllable target: fail decides each call's failure
// before anything is applied; after runs after a successful Update (to ask
// for re-checks); ask gives a batch entry's RecheckAfter. It counts every
// call it is given and the most calls ever in flight at once.
type kitops struct {
	tg *reconcilertest.Target[*item]

	mu    sync.Mutex
	fail  func(op reconcilertest.Op, it *item) error
	after func(ctx context.Context, it *item)
	ask   func(it *item) time.Duration
	// gate runs at the start of an Update, outside the lock (to hold it).
	gate func(ctx context.Context, it *item)
	// afterDelete and afterPrune run after a successful Delete or Prune.
	afterDelete func(ctx context.Context, it *item)
	afterPrune  func(ctx context.Context)
	// times are when calls started, with their op.
	times []kitcall
	// started is closed and replaced whenever a call starts.
	started chan struct{}

	calls       atomic.Int64
	prunes      atomic.Int64
	maxBatch    atomic.Int64
	inflight    atomic.Int64
	maxInflight atomic.Int64
}

func newKitOps() *kitops {
	return &kitops{tg: reconcilertest.NewTarget(itemKey, itemValue), started: make(chan struct{})}
}

func (o *kitops) setFail(f func(op reconcilertest.Op, it *item) error) {
	o.mu.Lock()
	o.fail = f
	o.mu.Unlock()
}

func (o *kitops) setAfter(f func(ctx context.Context, it *item)) {
	o.mu.Lock()
	o.after = f
	o.mu.Unlock()
}

// failIDs makes every call on an object with one of ids fail with
// errKitObject, and returns o.
func (o *kitops) failIDs(ids ...string) *kitops {
	return o.failWhen(errKitObject, func(_ reconcilertest.Op, it *item) bool { return it != nil && slices.Contains(ids, it.ID) })
}

// failWhen makes every call for which when holds fail with err, and
// returns o.
func (o *kitops) failWhen(err error, when func(op reconcilertest.Op, it *item) bool) *kitops {
	o.setFail(func(op reconcilertest.Op, it *item) error {
		if when(op, it) {
			return err
		}
		return nil
	})
	return o
}

// holdUpdates holds the updates of the objects match takes at their start,
// until release is closed or their context ends; entered receives (if
// nothing waits in it already) as one is held.
func (o *kitops) holdUpdates(match func(*item) bool) (entered <-chan struct{}, release chan struct{}) {
	in, release := make(chan struct{}, 1), make(chan struct{})
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gate = func(ctx context.Context, it *item) {
		if !match(it) {
			return
		}
		select {
		case in <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	return in, release
}

func (o *kitops) down()    { o.setFail(func(reconcilertest.Op, *item) error { return errKitDown }) }
func (o *kitops) recover() { o.setFail(nil) }

// begin records a call's start and returns its fault and after hook.
func (o *kitops) begin(op reconcilertest.Op, it *item) (func(context.Context, *item), error) {
	n := o.inflight.Add(1)
	for {
		m := o.maxInflight.Load()
		if n <= m || o.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	o.calls.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.started)
	o.started = make(chan struct{})
	key := ""
	if it != nil {
		key = it.ID
	}
	o.times = append(o.times, kitcall{op: op, key: key, at: time.Now()})
	if op == reconcilertest.OpPrune {
		o.prunes.Add(1)
	}
	var err error
	if o.fail != nil {
		err = o.fail(op, it)
	}
	return o.after, err
}

func (o *kitops) startedWatch() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.started
}

func (o *kitops) end() { o.inflight.Add(-1) }

// kitcall is a call's start.
type kitcall struct {
	op  reconcilertest.Op
	key string
	at  time.Time
}

func (o *kitops) callTimes() []kitcall {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]kitcall(nil), o.times...)
}

func (o *kitops) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.mu.Lock()
	gate := o.gate
	o.mu.Unlock()
	if gate != nil {
		gate(ctx, it)
	}
	defer o.end()
	after, err := o.begin(reconcilertest.OpUpdate, it)
	if err != nil {
		return err
	}
	if err := o.tg.Update(ctx, txn, rev, it); err != nil {
		return err
	}
	if after != nil {
		after(ctx, it)
	}
	return nil
}

func (o *kitops) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	defer o.end()
	if _, err := o.begin(reconcilertest.OpDelete, it); err != nil {
		return err
	}
	if err := o.tg.Delete(ctx, txn, rev, it); err != nil {
		return err
	}
	o.mu.Lock()
	after := o.afterDelete
	o.mu.Unlock()
	if after != nil {
		after(ctx, it)
	}
	return nil
}

func (o *kitops) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	defer o.end()
	if _, err := o.begin(reconcilertest.OpPrune, nil); err != nil {
		return err
	}
	if err := o.tg.Prune(ctx, txn, objs); err != nil {
		return err
	}
	o.mu.Lock()
	after := o.afterPrune
	o.mu.Unlock()
	if after != nil {
		after(ctx)
	}
	return nil
}

func (o *kitops) batchSize(n int) {
	for {
		m := o.maxBatch.Load()
		if int64(n) <= m || o.maxBatch.CompareAndSwap(m, int64(n)) {
			return
		}
	}
}

func (o *kitops) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batchSize(len(batch))
	for i := range batch {
		batch[i].Result = o.Update(ctx, txn, batch[i].Revision, batch[i].Object)
		o.mu.Lock()
		ask := o.ask
		o.mu.Unlock()
		if batch[i].Result == nil && ask != nil {
			batch[i].RecheckAfter = ask(batch[i].Object)
		}
	}
}

func (o *kitops) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	o.batchSize(len(batch))
	for i := range batch {
		batch[i].Result = o.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

// updates returns the values of the successful updates of key, in order.
func (o *kitops) updates(key string) []string {
	var vals []string
	for _, c := range o.tg.Calls() {
		if c.Op == reconcilertest.OpUpdate && c.Key == key && c.Err == nil {
			vals = append(vals, c.Value)
		}
	}
	return vals
}

// waitUpdates waits until key has had n successful updates.
func (o *kitops) waitUpdates(t testing.TB, key string, n int) {
	t.Helper()
	waitUntil(t, key+" updated", func() (bool, <-chan struct{}) {
		_, ch := o.tg.CallsWatch()
		return len(o.updates(key)) >= n, ch
	})
}

// waitCalls waits until the ops have seen at least n calls in all.
func (o *kitops) waitCalls(t testing.TB, n int64) {
	t.Helper()
	waitUntil(t, "calls", func() (bool, <-chan struct{}) {
		ch := o.startedWatch()
		return o.calls.Load() >= n, ch
	})
}

// kitmetrics records the round figures.
type kitmetrics struct {
	mu      sync.Mutex
	last    metrics.RoundStats
	rounds  int
	changed chan struct{}
}

func newKitMetrics() *kitmetrics { return &kitmetrics{changed: make(chan struct{})} }

func (m *kitmetrics) ReconciliationDuration(cell.FullModuleID, string, string, time.Duration) {}
func (m *kitmetrics) ReconciliationErrors(cell.FullModuleID, string, int, int)                {}
func (m *kitmetrics) PruneError(cell.FullModuleID, string, error)                             {}
func (m *kitmetrics) PruneDuration(cell.FullModuleID, string, time.Duration)                  {}
func (m *kitmetrics) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) {
	m.mu.Lock()
	m.last = s
	m.rounds++
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *kitmetrics) get() (metrics.RoundStats, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.changed
}

// waitRound waits until the last round's figures satisfy cond.
func (m *kitmetrics) waitRound(t testing.TB, what string, cond func(metrics.RoundStats) bool) metrics.RoundStats {
	t.Helper()
	var s metrics.RoundStats
	waitUntil(t, what, func() (bool, <-chan struct{}) {
		var ch <-chan struct{}
		s, ch = m.get()
		return cond(s), ch
	})
	return s
}

// waitOpen waits until the breaker has been seen open with at least n
// openings.
func (m *kitmetrics) waitOpen(t testing.TB, n uint64) {
	t.Helper()
	m.waitRound(t, "breaker open", func(s metrics.RoundStats) bool { return s.BreakerOpen && s.BreakerOpened >= n })
}

func (m *kitmetrics) waitClosed(t testing.TB) {
	t.Helper()
	m.waitRound(t, "breaker closed", func(s metrics.RoundStats) bool { return !s.BreakerOpen })
}

// kititems returns objects with the given ids and value.
func kititems(value string, ids ...string) []*item {
	objs := make([]*item, len(ids))
	for i, id := range ids {
		objs[i] = &item{ID: id, Value: value}
	}
	return objs
}

// converged waits until every object is Done, every change so far handled
// with no retry left, and the target (a *target, a kitops' tg) holds
// exactly the table. On failure it logs what is not settled.
func (f *fixture) converged(tg interface {
	Diff(statedb.ReadTxn, statedb.Table[*item]) string
}) {
	f.t.Helper()
	rev := f.table.Revision(f.db.ReadTxn())
	f.t.Cleanup(func() {
		if !f.t.Failed() {
			return
		}
		txn := f.db.ReadTxn()
		for obj := range f.table.All(txn) {
			if obj.Status.Kind != status.KindDone {
				f.t.Logf("not Done: %s=%s %+v", obj.ID, obj.Value, obj.Status)
			}
		}
		if f.tables != nil {
			for r := range f.tables.Retries().All(txn) {
				f.t.Logf("retry row: %+v", *r)
			}
			for i := range f.tables.Reconcilers().All(txn) {
				f.t.Logf("info: %+v", *i)
			}
		}
	})
	f.waitTable("every object Done", func(txn statedb.ReadTxn) bool {
		return f.countKind(txn, status.KindDone) == f.table.NumObjects(txn)
	})
	waitUntil(f.t, "no retry left", func() (bool, <-chan struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, low, err := f.rec.WaitUntilReconciled(ctx, rev)
		ch := make(chan struct{})
		close(ch)
		return err == nil && low == 0, ch
	})
	if d := tg.Diff(f.db.ReadTxn(), f.table); d != "" {
		f.t.Fatalf("the target differs from the table:\n%s", d)
	}
}
