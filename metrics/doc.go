// Package metrics defines what a reconciler reports about its work and
// provides an implementation that publishes it through the standard
// library's expvar, so it can be scraped at /debug/vars.
//
// [Metrics] has the same method set as the metrics interface of the StateDB
// reconciler, so an existing implementation can be used unchanged.
// Implementations may also satisfy [QueueMetrics] to receive the figures that
// converge adds: queue lengths and the time from Pending to Done.
//
// Every figure is keyed by the hive module ID and the reconciler's name, so
// one Metrics value can serve any number of reconcilers. Methods are called
// from the reconciler's goroutines and must be safe for concurrent use and
// must not block.
package metrics
