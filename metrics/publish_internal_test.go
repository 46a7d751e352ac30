package metrics

import (
	"expvar"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPublishedMapToleratesNameTakenByAnotherKind(t *testing.T) {
	const name = "converge_metrics_test_taken"
	if expvar.Get(name) == nil { // not yet published by an earlier -count run
		expvar.NewString(name).Set("someone else's")
	}
	var m *expvar.Map
	require.NotPanics(t, func() { m = publishedMap(name) })
	require.NotNil(t, m)
	m.Add("k", 1)
	_, isString := expvar.Get(name).(*expvar.String)
	assert.True(t, isString, "the other variable is left alone")

	const fresh = "converge_metrics_test_fresh"
	first := publishedMap(fresh)
	assert.Same(t, first, expvar.Get(fresh), "a free name is published")
	assert.Same(t, first, publishedMap(fresh), "a published map is reused")
}
