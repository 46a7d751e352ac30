package prometheus_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/status"
)

// BenchmarkReconciliationDuration is the per-operation cost: two
// histogram observations.
func BenchmarkReconciliationDuration(b *testing.B) {
	m := convergeprom.New()
	b.ReportAllocs()
	for b.Loop() {
		m.ReconciliationDuration(mod, "r", metrics.OpUpdate, 3*time.Millisecond)
	}
}

// BenchmarkCommitted is the per-commit cost for a commit of 1000 updates:
// the outcome counts, 1000 queue waits and 1000 latencies.
func BenchmarkCommitted(b *testing.B) {
	m := convergeprom.New()
	const n = 1000
	s := metrics.CommitStats{QueueWaits: make([]time.Duration, n), Latencies: make([]time.Duration, n)}
	s.Update[metrics.OutcomeSuccess] = n
	for i := range n {
		s.QueueWaits[i] = time.Duration(i) * time.Microsecond
		s.Latencies[i] = time.Duration(i) * 10 * time.Microsecond
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Committed(mod, "r", s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/object")
}

// BenchmarkReconcile is the adapter's cost per object reconciled: the
// calls a running reconciler made to its metrics while it reconciled 1000
// objects inserted in one transaction (single and batch operations, one
// worker), recorded once and replayed into a Metrics on every iteration.
// It stands for the Prometheus case of the reconciler's
// BenchmarkRoundMetrics, which measures a round of the same size with the
// other metrics, and which cannot import this module.
func BenchmarkReconcile(b *testing.B) {
	const n = 1000
	for _, batch := range []bool{false, true} {
		b.Run(map[bool]string{false: "single", true: "batch"}[batch], func(b *testing.B) {
			calls := recordReconcile(b, n, batch)
			m := convergeprom.New()
			b.ReportAllocs()
			for b.Loop() {
				for _, call := range calls {
					call(m)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/object")
			b.ReportMetric(float64(len(calls)), "calls/op")
		})
	}
}

// recordReconcile returns the metrics calls of a reconciler that
// reconciles n objects inserted in one transaction, up to the Round call
// of the round that committed the last Done.
func recordReconcile(b *testing.B, n int, batch bool) []func(*convergeprom.Metrics) {
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	var batchOps reconciler.BatchOperations[*item]
	if batch {
		batchOps = tgt
	}
	rec := &recorder{}
	db, table, statusIndex := startReconciler(b, tgt, batchOps, reconciler.WithMetrics(rec), reconciler.WithPruning(0))
	// Start-up's calls are not the objects'.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(b, reconciler.WaitForReconciliation(ctx, db, table, statusIndex))
	rec.reset(n)
	wtxn := db.WriteTxn(table)
	for i := range n {
		_, _, err := table.Insert(wtxn, &item{ID: strconv.Itoa(i), Value: "v", Status: status.Pending()})
		require.NoError(b, err)
	}
	wtxn.Commit()
	require.NoError(b, reconciler.WaitForReconciliation(ctx, db, table, statusIndex))
	// The commit writes the statuses, then reports.
	var calls []func(*convergeprom.Metrics)
	require.Eventually(b, func() bool { calls = rec.recorded(); return calls != nil }, 10*time.Second, time.Millisecond,
		"the round that committed the last of %d objects reported", n)
	return calls
}

// recorder records the calls a reconciler makes to its metrics, all the
// interfaces included, to replay them into a [convergeprom.Metrics]. It
// copies CommitStats' slices, which the reconciler reuses. It is safe for
// concurrent use.
type recorder struct {
	mu    sync.Mutex
	calls []func(*convergeprom.Metrics)
	done  int // objects committed Done, from Converged
	want  int // objects to record the reconciliation of; 0: none
	cut   int // the calls up to the Round after want objects were done; 0: not yet
}

func (r *recorder) add(call func(*convergeprom.Metrics)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

// reset forgets the calls so far and records from now on until the Round
// call that follows the commit of the last of want objects.
func (r *recorder) reset(want int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls, r.done, r.want, r.cut = nil, 0, want, 0
}

// recorded returns the calls of the objects' reconciliation once it is
// complete, and nil before.
func (r *recorder) recorded() []func(*convergeprom.Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut == 0 {
		return nil
	}
	return slices.Clone(r.calls[:r.cut])
}

func (r *recorder) ReconciliationDuration(id cell.FullModuleID, name, op string, d time.Duration) {
	r.add(func(m *convergeprom.Metrics) { m.ReconciliationDuration(id, name, op, d) })
}

func (r *recorder) ReconciliationErrors(id cell.FullModuleID, name string, n, c int) {
	r.add(func(m *convergeprom.Metrics) { m.ReconciliationErrors(id, name, n, c) })
}

func (r *recorder) PruneError(id cell.FullModuleID, name string, err error) {
	r.add(func(m *convergeprom.Metrics) { m.PruneError(id, name, err) })
}

func (r *recorder) PruneDuration(id cell.FullModuleID, name string, d time.Duration) {
	r.add(func(m *convergeprom.Metrics) { m.PruneDuration(id, name, d) })
}

func (r *recorder) QueueLength(id cell.FullModuleID, name string, retrying, inFlight int) {
	r.add(func(m *convergeprom.Metrics) { m.QueueLength(id, name, retrying, inFlight) })
}

func (r *recorder) Converged(id cell.FullModuleID, name string, count int, total, longest time.Duration) {
	r.add(func(m *convergeprom.Metrics) { m.Converged(id, name, count, total, longest) })
	r.mu.Lock()
	r.done += count
	r.mu.Unlock()
}

func (r *recorder) Round(id cell.FullModuleID, name string, s metrics.RoundStats) {
	r.add(func(m *convergeprom.Metrics) { m.Round(id, name, s) })
	r.mu.Lock()
	if r.want > 0 && r.done >= r.want && r.cut == 0 {
		r.cut = len(r.calls)
	}
	r.mu.Unlock()
}

func (r *recorder) Committed(id cell.FullModuleID, name string, s metrics.CommitStats) {
	s.QueueWaits, s.Latencies = slices.Clone(s.QueueWaits), slices.Clone(s.Latencies)
	r.add(func(m *convergeprom.Metrics) { m.Committed(id, name, s) })
}

func (r *recorder) Pruned(id cell.FullModuleID, name string, s metrics.PruneStats) {
	r.add(func(m *convergeprom.Metrics) { m.Pruned(id, name, s) })
}

func (r *recorder) RefreshMarked(id cell.FullModuleID, name string, marked int) {
	r.add(func(m *convergeprom.Metrics) { m.RefreshMarked(id, name, marked) })
}

var (
	_ metrics.Metrics        = (*recorder)(nil)
	_ metrics.QueueMetrics   = (*recorder)(nil)
	_ metrics.RoundMetrics   = (*recorder)(nil)
	_ metrics.CommitMetrics  = (*recorder)(nil)
	_ metrics.PruneMetrics   = (*recorder)(nil)
	_ metrics.RefreshMetrics = (*recorder)(nil)
)
