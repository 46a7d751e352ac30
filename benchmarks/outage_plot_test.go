package main

import "testing"

// Every variant of the outage workload has a label and a colour in its
// plot (two variants added without them made the plot panic).
func TestOutageVariantsHaveLabelsAndColors(t *testing.T) {
	if len(outageLabels) != len(outageVariants) || len(outageColors) != len(outageVariants) {
		t.Errorf("%d outage variants, %d labels, %d colours", len(outageVariants), len(outageLabels), len(outageColors))
	}
}
