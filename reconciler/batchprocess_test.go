package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// batchOnly is batch operations without Operations: UpdateBatch and
// DeleteBatch over a target, and no Prune.
type batchOnly struct{ tg *target }

func (b batchOnly) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.tg.UpdateBatch(ctx, txn, batch)
}

func (b batchOnly) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*item]) {
	b.tg.DeleteBatch(ctx, txn, batch)
}

// processor is batch operations implementing BatchProcessor over a target.
// ProcessBatch records each call's keys, reverses both slices, applies each
// entry, then lets the hook, if set, change the entries and choose the
// error to return. Calls from the blockFrom-th on (if not 0) wait for block
// to close before doing anything (set blockFrom under mu once calls may
// run). UpdateBatch and DeleteBatch must not be called.
type processor struct {
	tg *target
	t  testing.TB

	mu        sync.Mutex
	calls     [][2][]string // per call, the keys deleted and upserted
	hook      func(ctx context.Context, call int, deleted, upserted []reconciler.BatchEntry[*item]) error
	done      chan struct{} // closed and replaced when a call returns
	blockFrom int
	block     chan struct{}
}

func newProcessor(t testing.TB) *processor {
	return &processor{tg: newTarget(), t: t, done: make(chan struct{}), block: make(chan struct{})}
}

func (p *processor) UpdateBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*item]) {
	p.t.Error("UpdateBatch called on a BatchProcessor")
}

func (p *processor) DeleteBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*item]) {
	p.t.Error("DeleteBatch called on a BatchProcessor")
}

func keysOf(entries []reconciler.BatchEntry[*item]) []string {
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Object.ID
	}
	return keys
}

func (p *processor) ProcessBatch(ctx context.Context, txn statedb.ReadTxn, deleted, upserted []reconciler.BatchEntry[*item]) (err error) {
	p.mu.Lock()
	p.calls = append(p.calls, [2][]string{keysOf(deleted), keysOf(upserted)})
	call, hook, blockFrom := len(p.calls), p.hook, p.blockFrom
	p.mu.Unlock()
	if blockFrom > 0 && call >= blockFrom {
		select {
		case <-p.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() {
		p.mu.Lock()
		close(p.done)
		p.done = make(chan struct{})
		p.mu.Unlock()
	}()
	slices.Reverse(deleted)
	slices.Reverse(upserted)
	p.tg.DeleteBatch(ctx, txn, deleted)
	p.tg.UpdateBatch(ctx, txn, upserted)
	if hook != nil {
		return hook(ctx, call, deleted, upserted)
	}
	return nil
}

// called returns the calls so far.
func (p *processor) called() [][2][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// waitCalls waits until cond holds of the calls, checking again as a call
// returns.
func (p *processor) waitCalls(t testing.TB, what string, cond func(calls [][2][]string) bool) {
	t.Helper()
	waitUntil(t, what, func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return cond(p.calls), p.done
	})
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// Register takes batch operations without Operations when they can prune,
// or when pruning is off, where a requested prune does nothing and the
// reconciler works on; otherwise it says what is missing. (Batch
// operations that prune: testdata/batch_only.txtar.)
func TestRegisterBatchOnly(t *testing.T) {
	db := statedb.New()
	table, err := statedb.NewTable(db, "items", itemID)
	require.NoError(t, err)
	tg := newTarget()
	noPrune := []string{"no Prune method", "WithPruning(0)", "reconciler_test.batchOnly"} // it names the type
	for _, c := range []struct {
		name    string
		batch   reconciler.BatchOperations[*item]
		opts    []reconciler.Option
		refused []string // what the error says; nil: accepted
	}{
		{"neither", nil, []reconciler.Option{reconciler.WithPruning(0)}, []string{"Operations must not be nil when BatchOperations is nil"}},
		{"no Prune, pruning by default", batchOnly{tg}, nil, noPrune},
		{"no Prune, pruning on", batchOnly{tg}, []reconciler.Option{reconciler.WithPruning(time.Minute)}, noPrune},
		{"no Prune, pruning off", batchOnly{tg}, []reconciler.Option{reconciler.WithPruning(0)}, nil},
		{"with Prune", tg, nil, nil},
		{"processor without Prune, pruning off", newProcessor(t), []reconciler.Option{reconciler.WithPruning(0)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var (
				r   reconciler.Reconciler[*item]
				err error
			)
			require.NotPanics(t, func() {
				p := reconciler.Params{Log: slog.Default(), DB: db, JobGroup: &fakeGroup{}}
				r, err = reconciler.Register(p, table, (*item).clone, (*item).setStatus, (*item).getStatus, nil, c.batch, c.opts...)
			})
			if c.refused == nil {
				require.NoError(t, err)
				require.NotNil(t, r)
				assert.NotPanics(t, r.Prune)
				return
			}
			require.ErrorIs(t, err, reconciler.ErrInvalidConfig)
			assert.Nil(t, r)
			for _, s := range c.refused {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	t.Run("no Prune, pruning off, running", func(t *testing.T) {
		tg := newTarget()
		f := startFixture(t, nil, &with{batch: batchOnly{tg}}, reconciler.WithPruning(0))
		tg.Set("stray", "1")
		f.rec.Prune()
		f.upsert(items("a", 3, "1")...)
		f.waitReconciled()
		f.rec.Prune()
		f.remove("a-00000")
		f.caughtUp()
		assert.True(t, tg.has("stray", "1"), "nothing pruned")
		assert.True(t, tg.has("a-00001", "1"))
		assert.False(t, tg.has("a-00000", "1"), "deleted through DeleteBatch")
	})
}

// With workers too, a BatchProcessor gets every delete and update once,
// through ProcessBatch only. (With one worker, one call for the round's
// deletes and updates: testdata/process_batch.txtar.)
func TestProcessBatchWithWorkers(t *testing.T) {
	p := newProcessor(t)
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithConcurrency(4), reconciler.WithPruning(0))
	f.upsert(kititems("1", "a", "b")...)
	f.waitReconciled()
	calls := len(p.called())
	f.rec.Pause()
	f.remove("a")
	f.put("c", "1")
	f.rec.Resume()
	f.caughtUp()
	var deleted, upserted []string
	for _, c := range p.called()[calls:] {
		deleted, upserted = append(deleted, c[0]...), append(upserted, c[1]...)
	}
	assert.Equal(t, []string{"a"}, deleted)
	assert.Equal(t, []string{"c"}, upserted)
	assert.Equal(t, sorted([]string{"update a=1", "update b=1", "delete a", "update c=1"}), sorted(p.tg.applied()))
}

// Results bind to entries, not to positions, when ProcessBatch reorders
// both slices and overwrites an entry: each object gets its own result,
// and the object of the overwritten entry is tried again.
func TestProcessBatchResultsBindToEntries(t *testing.T) {
	p := newProcessor(t)
	var (
		lost  string
		uCall int // the call that got the u entries: one transaction, one call
	)
	p.hook = func(_ context.Context, call int, deleted, upserted []reconciler.BatchEntry[*item]) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if uCall != 0 || !slices.ContainsFunc(upserted, func(e reconciler.BatchEntry[*item]) bool { return e.Object.ID == "u-00000" }) {
			return nil
		}
		uCall, p.blockFrom = call, call+1 // the retries wait until the test has looked
		for i, e := range upserted {
			if e.Object.ID == "u-00002" {
				upserted[i].Result = errors.New("u-00002 failed")
			}
		}
		for i, e := range deleted {
			if e.Object.ID == "d-00001" {
				deleted[i].Result = errors.New("d-00001 failed")
			}
		}
		// Overwrite an entry that succeeded with a copy the reconciler
		// cannot bind.
		i := slices.IndexFunc(upserted, func(e reconciler.BatchEntry[*item]) bool { return e.Result == nil })
		lost = upserted[i].Object.ID
		upserted[i] = reconciler.BatchEntry[*item]{Object: upserted[i].Object, Revision: upserted[i].Revision}
		return nil
	}
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithRetry(time.Millisecond, 10*time.Millisecond))
	f.upsert(items("d", 3, "1")...)
	f.waitReconciled()
	p.waitCalls(t, "a call", func(calls [][2][]string) bool { return len(calls) >= 1 })
	before := len(p.called()) // the d objects may have come in more than one call

	// One transaction, one round, one call: deletes d-0..2, updates u-0..3.
	wtxn := f.db.WriteTxn(f.table)
	for _, it := range items("d", 3, "1") {
		_, _, err := f.table.Delete(wtxn, it)
		require.NoError(t, err)
	}
	us := items("u", 4, "1")
	for _, it := range us {
		it.Status = status.Pending()
		_, _, err := f.table.Insert(wtxn, it)
		require.NoError(t, err)
	}
	wtxn.Commit()
	p.waitCalls(t, "the transaction's call", func(calls [][2][]string) bool { return len(calls) > before })
	p.mu.Lock()
	require.Equal(t, before+1, uCall, "the transaction's call comes next")
	p.mu.Unlock()
	got := p.called()[before]
	assert.Equal(t, ids(items("d", 3, "1")), sorted(got[0]))
	assert.Equal(t, ids(us), sorted(got[1]))
	require.NotEmpty(t, lost)
	assert.Equal(t, "u-00002 failed", f.waitKind("u-00002", status.KindError).Status.GetError())
	assert.Contains(t, f.waitKind(lost, status.KindError).Status.GetError(), "lost the entry")
	for _, id := range ids(us) {
		if id != "u-00002" && id != lost {
			f.waitKind(id, status.KindDone)
		}
	}

	// The failed delete, the failed update and the lost entry are tried
	// again through ProcessBatch; nothing else is.
	close(p.block)
	for _, id := range ids(us) {
		f.waitKind(id, status.KindDone)
	}
	p.waitCalls(t, "the failed delete tried again", func(calls [][2][]string) bool {
		return slices.ContainsFunc(calls[before+1:], func(c [2][]string) bool { return slices.Contains(c[0], "d-00001") })
	})
	f.caughtUp()
	var deleted, upserted []string
	for _, c := range p.called()[before+1:] {
		deleted, upserted = append(deleted, c[0]...), append(upserted, c[1]...)
	}
	assert.Equal(t, []string{"d-00001"}, deleted)
	assert.Equal(t, sorted([]string{"u-00002", lost}), sorted(upserted))
}

// What ProcessBatch returns, panics with or runs out of time with is the
// outcome of every entry without a Result; those are tried again through
// the batch.
func TestProcessBatchCallOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		hook    func(ctx context.Context) error
		want    string // the error of the entries without a Result
	}{
		{"error", 0, func(context.Context) error { return errors.New("target down") }, "target down"},
		{"panic", 0, func(context.Context) error { panic("boom") }, "operation panicked: boom"},
		{"timeout returned", 50 * time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, "context deadline exceeded"},
		{"timeout ignored", 50 * time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return nil }, "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProcessor(t)
			p.hook = func(ctx context.Context, call int, _, upserted []reconciler.BatchEntry[*item]) error {
				if call != 1 {
					return nil
				}
				for i := range upserted {
					if upserted[i].Object.ID == "a-00000" {
						upserted[i].Result = errors.New("own result")
					}
				}
				return tc.hook(ctx)
			}
			p.blockFrom = 2
			f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0),
				reconciler.WithRetry(time.Millisecond, 10*time.Millisecond), reconciler.WithOperationTimeout(tc.timeout))
			f.upsert(items("a", 3, "1")...)
			assert.Equal(t, "own result", f.waitKind("a-00000", status.KindError).Status.GetError())
			for _, id := range []string{"a-00001", "a-00002"} {
				assert.Contains(t, f.waitKind(id, status.KindError).Status.GetError(), tc.want, id)
			}
			close(p.block)
			for _, id := range ids(items("a", 3, "1")) {
				f.waitKind(id, status.KindDone)
			}
			f.waitReconciled()
			for _, c := range p.called() {
				assert.Empty(t, c[0])
			}
		})
	}
}

// spanLog is a tracing.Tracer that records the batch spans: how each
// started and ended, and whether ProcessBatch's context carried it.
type spanLog struct {
	mu    sync.Mutex
	spans []*batchSpan
}

type batchSpan struct {
	log   *spanLog
	start tracing.Start
	end   *tracing.End
}

type batchSpanKey struct{}

func (l *spanLog) Start(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	sp := &batchSpan{log: l, start: s}
	if s.Kind == tracing.Round {
		return ctx, sp
	}
	l.mu.Lock()
	l.spans = append(l.spans, sp)
	l.mu.Unlock()
	return context.WithValue(ctx, batchSpanKey{}, sp), sp
}

func (sp *batchSpan) End(e tracing.End) {
	sp.log.mu.Lock()
	defer sp.log.mu.Unlock()
	if sp.end != nil && sp.start.Kind != tracing.Round {
		panic("span ended twice")
	}
	sp.end = &e
}

// durations is metrics.Metrics recording the operation names of
// ReconciliationDuration.
type durations struct {
	mu  sync.Mutex
	ops []string
}

func (d *durations) ReconciliationDuration(_ cell.FullModuleID, _, operation string, _ time.Duration) {
	d.mu.Lock()
	d.ops = append(d.ops, operation)
	d.mu.Unlock()
}
func (d *durations) ReconciliationErrors(cell.FullModuleID, string, int, int) {}
func (d *durations) PruneError(cell.FullModuleID, string, error)              {}
func (d *durations) PruneDuration(cell.FullModuleID, string, time.Duration)   {}

// A ProcessBatch call has one span of kind ProcessBatch, in the context
// ProcessBatch gets, with the entries and deletes it was given and the
// entries that failed; no UpdateBatch or DeleteBatch span. Its duration is
// reported as an update if it has updates, else as a delete.
func TestProcessBatchSpansAndMetrics(t *testing.T) {
	p := newProcessor(t)
	spans := &spanLog{}
	p.hook = func(ctx context.Context, call int, deleted, upserted []reconciler.BatchEntry[*item]) error {
		if sp, _ := ctx.Value(batchSpanKey{}).(*batchSpan); sp == nil || sp.start.Kind != tracing.ProcessBatch {
			t.Errorf("call %d: ProcessBatch's context carries no span of its kind", call)
		}
		if call == 2 {
			upserted[0].Result = errors.New("one failed")
		}
		return nil
	}
	m := &durations{}
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithTracer(spans),
		reconciler.WithMetrics(m), reconciler.WithRetry(time.Hour, time.Hour))
	f.upsert(items("a", 3, "1")...)
	f.waitReconciled()
	f.rec.Pause()
	f.remove("a-00000", "a-00001")
	f.put("b", "")
	f.rec.Resume()
	f.waitKind("b", status.KindError)
	f.rec.Pause()
	f.remove("a-00002")
	f.rec.Resume()
	f.caughtUp()

	spans.mu.Lock()
	defer spans.mu.Unlock()
	var all []string
	for _, sp := range spans.spans {
		require.NotNil(t, sp.end, "every span ends")
		all = append(all, fmt.Sprint(sp.start.Kind, sp.start.Objects, sp.start.Deletes, sp.end.Failed, sp.end.Outcome))
	}
	assert.Equal(t, []string{
		fmt.Sprint(tracing.ProcessBatch, 3, 0, 0, metrics.OutcomeSuccess),
		fmt.Sprint(tracing.ProcessBatch, 3, 2, 1, metrics.OutcomeSuccess),
		fmt.Sprint(tracing.ProcessBatch, 1, 1, 0, metrics.OutcomeSuccess),
	}, all)
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, []string{metrics.OpUpdate, metrics.OpUpdate, metrics.OpDelete}, m.ops)
}

// An entry a batch operation lost or overwrote is the implementation's
// fault, neither the object's nor the target's: the object is tried again,
// WithMaxAttempts does not give up on it (a579e17), and it never opens the
// breaker (e6a60c9).
func TestLostBatchEntriesAreTriedAgainAndBlameNoOne(t *testing.T) {
	p := newProcessor(t)
	p.hook = func(_ context.Context, call int, _, upserted []reconciler.BatchEntry[*item]) error {
		for i, e := range upserted {
			if call <= 5 {
				upserted[i] = reconciler.BatchEntry[*item]{Object: e.Object, Revision: e.Revision}
			}
		}
		return nil
	}
	m := newKitMetrics()
	f := startFixture(t, p.tg, &with{batch: p}, reconciler.WithPruning(0), reconciler.WithMetrics(m), reconciler.WithMaxAttempts(1),
		reconciler.WithCircuitBreaker(2, time.Millisecond, nil), reconciler.WithRetry(time.Millisecond, 4*time.Millisecond))
	f.upsert(items("l", 10, "1")...)
	f.converged(p.tg)
	assert.Greater(t, len(p.called()), 5, "the lost entries tried again")
	s, _ := m.get()
	assert.Zero(t, s.BreakerOpened, "lost entries opened the breaker")
}
