package prometheus_test

// An outside reviewer's checks of the worker gauges of the Prometheus
// adapter: converge_max_concurrent_reconciles and converge_active_workers
// follow RoundStats.Workers and BusyWorkers, per reconciler.

import (
	"testing"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/metrics/prometheus"
)

func TestOutsiderWorkerGauges(t *testing.T) {
	m := prometheus.New()
	mod := cell.FullModuleID{"agent", "pool"}
	m.Round(mod, "", metrics.RoundStats{Workers: 8, BusyWorkers: 5, InFlight: 6, Depth: 1})
	m.Round(mod, "other", metrics.RoundStats{Workers: 1})
	fams := gather(t, m)
	l := map[string]string{"module": "agent.pool", "name": ""}
	require.Equal(t, 8.0, value(t, fams, "converge_max_concurrent_reconciles", l))
	require.Equal(t, 5.0, value(t, fams, "converge_active_workers", l))
	lo := map[string]string{"module": "agent.pool", "name": "other"}
	require.Equal(t, 1.0, value(t, fams, "converge_max_concurrent_reconciles", lo))
	require.Equal(t, 0.0, value(t, fams, "converge_active_workers", lo))

	m.Round(mod, "", metrics.RoundStats{Workers: 8})
	fams = gather(t, m)
	require.Equal(t, 0.0, value(t, fams, "converge_active_workers", l))
	require.Equal(t, 8.0, value(t, fams, "converge_max_concurrent_reconciles", l))

}
