package metrics_test

import (
	"testing"
	"time"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/metrics"
)

// BenchmarkExpVarReconciliationDuration is the per-operation cost: the
// only call made once per operation (or batch).
func BenchmarkExpVarReconciliationDuration(b *testing.B) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "mod"}
	b.ReportAllocs()
	for b.Loop() {
		m.ReconciliationDuration(mod, "r", metrics.OpUpdate, 3*time.Millisecond)
	}
}

// BenchmarkExpVarCommitted is the per-commit cost for a commit of 1000
// updates: the outcome counts, 1000 queue waits and 1000 latencies.
func BenchmarkExpVarCommitted(b *testing.B) {
	m := metrics.NewUnpublishedExpVar()
	mod := cell.FullModuleID{"agent", "mod"}
	s := commitOf(1000)
	b.ReportAllocs()
	for b.Loop() {
		m.Committed(mod, "r", s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/object")
}

func commitOf(n int) metrics.CommitStats {
	s := metrics.CommitStats{QueueWaits: make([]time.Duration, n), Latencies: make([]time.Duration, n)}
	s.Update[metrics.OutcomeSuccess] = n
	for i := range n {
		s.QueueWaits[i] = time.Duration(i) * time.Microsecond
		s.Latencies[i] = time.Duration(i) * 10 * time.Microsecond
	}
	return s
}
