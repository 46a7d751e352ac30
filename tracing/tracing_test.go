package tracing_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type item struct {
	ID     string
	Status status.Status
}

func (it *item) clone() *item                    { c := *it; return &c }
func (it *item) getStatus() status.Status        { return it.Status }
func (it *item) setStatus(s status.Status) *item { it.Status = s; return it }
func (it *item) TableHeader() []string           { return []string{"ID"} }
func (it *item) TableRow() []string              { return []string{it.ID} }
func itemKey(it *item) string                    { return it.ID }

// recorder records the spans started, each in the context it returns, and
// how many times each ended.
type recorder struct {
	mu    sync.Mutex
	spans []*span
}

type span struct {
	r    *recorder
	s    tracing.Start
	ends int
	end  tracing.End
}

type spanKey struct{}

func (r *recorder) Start(ctx context.Context, s tracing.Start) (context.Context, tracing.Span) {
	sp := &span{r: r, s: s}
	r.mu.Lock()
	r.spans = append(r.spans, sp)
	r.mu.Unlock()
	return context.WithValue(ctx, spanKey{}, sp), sp
}

func (sp *span) End(e tracing.End) {
	sp.r.mu.Lock()
	sp.ends++
	sp.end = e
	sp.r.mu.Unlock()
}

// ops checks that every call's context carries a span of its kind, and
// closes entered when the update of "slow" starts.
type ops struct {
	*reconcilertest.FaultyOps[*item]
	t       *testing.T
	entered chan struct{}
	once    sync.Once
}

func (o *ops) check(ctx context.Context, kind tracing.Kind, key string) {
	if sp, _ := ctx.Value(spanKey{}).(*span); sp == nil || sp.s.Kind != kind || sp.s.Key != key {
		o.t.Errorf("%s of %q: the context carries no span of it", kind, key)
	}
	if key == "slow" {
		o.once.Do(func() { close(o.entered) })
	}
}

func (o *ops) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.check(ctx, tracing.Update, it.ID)
	return o.FaultyOps.Update(ctx, txn, rev, it)
}

func (o *ops) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, it *item) error {
	o.check(ctx, tracing.Delete, it.ID)
	return o.FaultyOps.Delete(ctx, txn, rev, it)
}

func (o *ops) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	o.check(ctx, tracing.Prune, "")
	return o.FaultyOps.Prune(ctx, txn, objs)
}

// The reconciler ends every span it starts exactly once, those of a round,
// a refresh sweep and an operation that a stop cuts short included, and
// each operation runs with its own span in its context. (The module
// tracing/otel tests what the spans say.)
func TestEverySpanEndsOnce(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			o := &ops{FaultyOps: reconcilertest.NewFaultyOps(itemKey, reconcilertest.NewTarget(itemKey, itemKey), nil), t: t, entered: make(chan struct{})}
			rec := &recorder{}
			var (
				db  *statedb.DB
				tbl statedb.RWTable[*item]
				r   reconciler.Reconciler[*item]
			)
			h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), cell.Module("test", "test", cell.Provide(job.Registry.NewGroup),
				cell.Invoke(func(p reconciler.Params) (err error) {
					db = p.DB
					tbl, err = statedb.NewTable(p.DB, "items", statedb.Index[*item, string]{Name: "id", Unique: true,
						FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) }, FromKey: index.String})
					if err != nil {
						return err
					}
					r, err = reconciler.Register(p, tbl, (*item).clone, (*item).setStatus, (*item).getStatus, o, nil,
						reconciler.WithTracer(rec), reconciler.WithConcurrency(workers), reconciler.WithPruning(0),
						reconciler.WithRefreshing(time.Hour, nil))
					return err
				})))
			log := hivetest.Logger(t)
			require.NoError(t, h.Start(log, context.Background()))
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					assert.NoError(t, h.Stop(log, context.Background()))
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			write := func(del bool, ids ...string) {
				wtxn := db.WriteTxn(tbl)
				for _, id := range ids {
					var err error
					if del {
						_, _, err = tbl.Delete(wtxn, &item{ID: id})
					} else {
						_, _, err = tbl.Insert(wtxn, &item{ID: id, Status: status.Pending()})
					}
					require.NoError(t, err)
				}
				_, _, err := r.WaitUntilReconciled(ctx, tbl.Revision(wtxn.Commit()))
				require.NoError(t, err)
			}
			write(false, "a", "b", "c", "d")
			write(true, "b", "c")
			r.Prune()
			for pruned := false; !pruned; {
				calls, changed := o.CallsWatch()
				for _, c := range calls {
					pruned = pruned || c.Op == reconcilertest.OpPrune
				}
				if !pruned {
					select {
					case <-changed:
					case <-ctx.Done():
						t.Fatal("timed out waiting for the prune")
					}
				}
			}
			require.NoError(t, o.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Key: "slow"}))
			wtxn := db.WriteTxn(tbl)
			_, _, err := tbl.Insert(wtxn, &item{ID: "slow", Status: status.Pending()})
			require.NoError(t, err)
			wtxn.Commit()
			select {
			case <-o.entered:
			case <-ctx.Done():
				t.Fatal("timed out waiting for the update of slow to start")
			}
			require.NoError(t, h.Stop(log, context.Background())) // cuts the update of slow short
			stopped = true

			rec.mu.Lock()
			defer rec.mu.Unlock()
			kinds := map[tracing.Kind]int{}
			for _, sp := range rec.spans {
				kinds[sp.s.Kind]++
				assert.Equal(t, 1, sp.ends, "%s span of %q ended once", sp.s.Kind, sp.s.Key)
				assert.Equal(t, "test", sp.s.Module)
			}
			assert.Positive(t, kinds[tracing.Round])
			assert.Equal(t, 1, kinds[tracing.Refresh], "the sweep at the start")
			assert.Equal(t, 5, kinds[tracing.Update], "a, b, c, d and slow")
			assert.Equal(t, 2, kinds[tracing.Delete])
			assert.Equal(t, 1, kinds[tracing.Prune])
		})
	}
}

// A round that did nothing makes no span: writing objects one at a time,
// waiting for each, makes one round span per object that collected it
// (with workers, the round that commits its result may be another), and
// none for the rounds that wake for the reconciler's own status writes.
func TestEmptyRoundsMakeNoSpan(t *testing.T) {
	const n = 20
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			tgt := reconcilertest.NewTarget(itemKey, itemKey)
			rec := &recorder{}
			var (
				db  *statedb.DB
				tbl statedb.RWTable[*item]
				r   reconciler.Reconciler[*item]
			)
			h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), cell.Module("test", "test", cell.Provide(job.Registry.NewGroup),
				cell.Invoke(func(p reconciler.Params) (err error) {
					db = p.DB
					tbl, err = statedb.NewTable(p.DB, "items", statedb.Index[*item, string]{Name: "id", Unique: true,
						FromObject: func(it *item) index.KeySet { return index.NewKeySet(index.String(it.ID)) }, FromKey: index.String})
					if err != nil {
						return err
					}
					r, err = reconciler.Register(p, tbl, (*item).clone, (*item).setStatus, (*item).getStatus, tgt, nil,
						reconciler.WithTracer(rec), reconciler.WithConcurrency(workers), reconciler.WithPruning(0))
					return err
				})))
			log := hivetest.Logger(t)
			require.NoError(t, h.Start(log, context.Background()))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range n {
				wtxn := db.WriteTxn(tbl)
				_, _, err := tbl.Insert(wtxn, &item{ID: fmt.Sprintf("k%02d", i), Status: status.Pending()})
				require.NoError(t, err)
				_, _, err = r.WaitUntilReconciled(ctx, tbl.Revision(wtxn.Commit()))
				require.NoError(t, err)
			}
			require.NoError(t, h.Stop(log, context.Background()))

			rec.mu.Lock()
			defer rec.mu.Unlock()
			rounds, collected, committed := 0, 0, 0
			for _, sp := range rec.spans {
				if sp.s.Kind != tracing.Round {
					continue
				}
				rounds++
				collected += sp.end.Collected
				committed += sp.end.Committed
				assert.False(t, sp.s.Time.IsZero(), "a round span is dated from the round's start")
				assert.True(t, sp.end.Collected > 0 || sp.end.Committed > 0, "round span %d did nothing: %+v", rounds, sp.end)
			}
			assert.Equal(t, n, collected, "objects collected")
			assert.Equal(t, n, committed, "outcomes committed")
			if workers == 1 {
				assert.Equal(t, n, rounds, "round spans: one per object, which its round collects, runs and commits")
			} else {
				assert.LessOrEqual(t, rounds, 2*n, "round spans: at most one that collects and one that commits per object")
			}
		})
	}
}
