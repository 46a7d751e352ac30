package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/converge-go/converge/metrics"
)

func TestOutcomeNames(t *testing.T) {
	want := []string{"success", "error", "terminal", "panic", "timeout"}
	var got []string
	for _, o := range metrics.Outcomes() {
		got = append(got, o.String())
	}
	assert.Equal(t, want, got)
	assert.Equal(t, "unknown", metrics.Outcome(200).String())
	var c metrics.OutcomeCounts
	assert.Len(t, c, len(want), "OutcomeCounts has one slot per outcome")
}

func TestOutcomeCounts(t *testing.T) {
	var c metrics.OutcomeCounts
	assert.Zero(t, c.Total())
	c.Add(metrics.OutcomeSuccess)
	c.Add(metrics.OutcomeSuccess)
	c.Add(metrics.OutcomeTerminal)
	c.Add(metrics.OutcomePanic)
	c.Add(metrics.OutcomeTimeout)
	c.Add(metrics.Outcome(99)) // unknown: counted as an error
	assert.Equal(t, 2, c[metrics.OutcomeSuccess])
	assert.Equal(t, 1, c[metrics.OutcomeError])
	assert.Equal(t, 1, c[metrics.OutcomeTerminal])
	assert.Equal(t, 6, c.Total())
	assert.Equal(t, 4, c.Failed())
}
