package metrics

import "slices"

// durationBuckets are the upper bounds, in seconds, of the histograms of
// operation durations and queue waits: 10µs to 1m in steps of 1, 2.5, 5.
var durationBuckets = []float64{
	0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5,
	10, 30, 60,
}

// convergenceBuckets are the upper bounds, in seconds, of the Pending-to-Done
// latency histograms: those of durationBuckets, then up to an hour, since
// an object that fails is retried with a backoff of up to a minute by
// default.
var convergenceBuckets = append(slices.Clip(durationBuckets), 120, 300, 600, 1800, 3600)

// DurationBuckets returns the upper bounds, in seconds, of the buckets of
// the operation duration and queue wait histograms, in increasing order:
//
//	0.00001 0.000025 0.00005 0.0001 0.00025 0.0005 0.001 0.0025 0.005
//	0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60
//
// A last bucket, +Inf, holds every observation. Both the expvar and the
// Prometheus implementations use these bounds. The slice is a copy.
func DurationBuckets() []float64 { return slices.Clone(durationBuckets) }

// ConvergenceBuckets returns the upper bounds, in seconds, of the buckets of
// the Pending-to-Done latency histograms, in increasing order: those of
// [DurationBuckets], then 120 300 600 1800 3600. A last bucket, +Inf, holds
// every observation. Both the expvar and the Prometheus implementations use
// these bounds. The slice is a copy.
func ConvergenceBuckets() []float64 { return slices.Clone(convergenceBuckets) }
