package metrics_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
)

func TestBuckets(t *testing.T) {
	d, c := metrics.DurationBuckets(), metrics.ConvergenceBuckets()
	for _, b := range [][]float64{d, c} {
		require.NotEmpty(t, b)
		assert.True(t, slices.IsSorted(b), "%v", b)
		assert.Len(t, slices.Compact(slices.Clone(b)), len(b), "no duplicate bound")
		assert.Positive(t, b[0])
	}
	assert.Equal(t, 0.00001, d[0], "10µs, below the idle latency of a reconciler")
	assert.Equal(t, 60.0, d[len(d)-1])
	assert.Equal(t, d, c[:len(d)], "convergence extends the duration buckets")
	assert.Equal(t, 3600.0, c[len(c)-1], "up to an hour")

	// Callers get copies.
	d[0], c[0] = -1, -1
	assert.Equal(t, 0.00001, metrics.DurationBuckets()[0])
	assert.Equal(t, 0.00001, metrics.ConvergenceBuckets()[0])
}
