package prometheus_test

import (
	"testing"
	"time"

	"github.com/converge-go/converge/metrics"
	convergeprom "github.com/converge-go/converge/metrics/prometheus"
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
