package prometheus_test

import (
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// gather registers c on a fresh registry and returns its families by name.
func gather(t testing.TB, c prom.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	return byName
}

// find returns the metric of family name whose labels are exactly labels.
func find(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "no family %s", name)
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(labels) && func() bool {
			for k, v := range labels {
				if got[k] != v {
					return false
				}
			}
			return true
		}() {
			return m
		}
	}
	require.Failf(t, "no such series", "%s%v", name, labels)
	return nil
}

// value returns the counter or gauge value of a series.
func value(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, fams, name, labels)
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	require.Failf(t, "not a counter or gauge", "%s%v", name, labels)
	return 0
}

// histogram returns the histogram of a series.
func histogram(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	h := find(t, fams, name, labels).GetHistogram()
	require.NotNil(t, h, "%s is not a histogram", name)
	return h
}

// cumulative returns the cumulative count of h's bucket with upper bound le.
func cumulative(t testing.TB, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	require.Failf(t, "no bucket", "le=%v", le)
	return 0
}

func rec(name string) map[string]string {
	return map[string]string{"module": "agent.routes", "name": name}
}

func withOp(labels map[string]string, op string) map[string]string {
	out := map[string]string{"operation": op}
	for k, v := range labels {
		out[k] = v
	}
	return out
}

func withResult(labels map[string]string, op, result string) map[string]string {
	out := withOp(labels, op)
	out["result"] = result
	return out
}

// counterOf returns a collector of the single series of family name in c,
// for testutil.ToFloat64.
func counterOf(t testing.TB, c prom.Collector, name string) prom.Collector {
	t.Helper()
	return filtered{c, name}
}

// filtered collects only the metrics of family name from c.
type filtered struct {
	c    prom.Collector
	name string
}

func (f filtered) Describe(ch chan<- *prom.Desc) { prom.DescribeByCollect(f, ch) }

func (f filtered) Collect(ch chan<- prom.Metric) {
	all := make(chan prom.Metric)
	go func() {
		f.c.Collect(all)
		close(all)
	}()
	for m := range all {
		if strings.Contains(m.Desc().String(), `fqName: "`+f.name+`"`) {
			ch <- m
		}
	}
}
