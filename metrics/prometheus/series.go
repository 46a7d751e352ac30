package prometheus

import (
	"sync/atomic"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/metrics/internal/histogram"
)

// Operations with series created up front, and their index in series.ops.
var operations = [...]string{metrics.OpUpdate, metrics.OpDelete, metrics.OpPrune}

const (
	opUpdate = iota
	opDelete
	opPrune
)

// series holds the children of every family for one reconciler, resolved
// once so that a call does not hash label values. They are all created
// when the reconciler first reports, so that every series exists, at zero,
// from then on.
type series struct {
	depth, unfinishedWork, longestRunning        prom.Gauge
	adds, retries                                prom.Counter
	queueDuration, convergence, pruneDuration    *histogram.Histogram
	reconcileErrors, rounds, prunes, pruneErrors prom.Counter
	refreshMarks, driftPrune, driftRefresh       prom.Counter
	failing, retryQueue, inFlight, oldestPending prom.Gauge
	pruneFailing, maxConcurrent, activeWorkers   prom.Gauge
	breakerOpen                                  prom.Gauge
	breakerOpened                                prom.Counter
	breakerSeen                                  atomic.Uint64 // openings already counted
	ops                                          [len(operations)]operationSeries
}

// operationSeries are the outcome counters of one operation.
type operationSeries struct {
	results                   [len(metrics.OutcomeCounts{})]prom.Counter
	terminal, panics, timeout prom.Counter
}

// outcomeNames are the result label values, indexed by metrics.Outcome.
var outcomeNames = func() []string {
	var names []string
	for _, o := range metrics.Outcomes() {
		names = append(names, o.String())
	}
	return names
}()

func newSeries(f *families, module, name string) *series {
	s := &series{
		depth:           f.depth.WithLabelValues(module, name),
		unfinishedWork:  f.unfinishedWork.WithLabelValues(module, name),
		longestRunning:  f.longestRunning.WithLabelValues(module, name),
		adds:            f.adds.WithLabelValues(module, name),
		retries:         f.retries.WithLabelValues(module, name),
		queueDuration:   f.queueDuration.with(module, name),
		convergence:     f.convergence.with(module, name),
		pruneDuration:   f.pruneDuration.with(module, name),
		reconcileErrors: f.reconcileErrors.WithLabelValues(module, name),
		rounds:          f.rounds.WithLabelValues(module, name),
		prunes:          f.prunes.WithLabelValues(module, name),
		pruneErrors:     f.pruneErrors.WithLabelValues(module, name),
		refreshMarks:    f.refreshMarks.WithLabelValues(module, name),
		driftPrune:      f.drift.WithLabelValues(module, name, metrics.DriftPrune),
		driftRefresh:    f.drift.WithLabelValues(module, name, metrics.DriftRefresh),
		failing:         f.failing.WithLabelValues(module, name),
		retryQueue:      f.retryQueue.WithLabelValues(module, name),
		inFlight:        f.inFlight.WithLabelValues(module, name),
		oldestPending:   f.oldestPending.WithLabelValues(module, name),
		pruneFailing:    f.pruneFailing.WithLabelValues(module, name),
		maxConcurrent:   f.maxConcurrent.WithLabelValues(module, name),
		activeWorkers:   f.activeWorkers.WithLabelValues(module, name),
		breakerOpen:     f.breakerOpen.WithLabelValues(module, name),
		breakerOpened:   f.breakerOpened.WithLabelValues(module, name),
	}
	for i, op := range operations {
		o := &s.ops[i]
		for j, result := range outcomeNames {
			o.results[j] = f.reconcileTotal.WithLabelValues(module, name, op, result)
		}
		o.terminal = f.terminalErrors.WithLabelValues(module, name, op)
		o.panics = f.panics.WithLabelValues(module, name, op)
		o.timeout = f.timeouts.WithLabelValues(module, name, op)
	}
	return s
}

// count adds the outcome counts c of an operation.
func (o *operationSeries) count(c *metrics.OutcomeCounts) {
	for i, n := range c {
		if n > 0 {
			o.results[i].Add(float64(n))
		}
	}
	if n := c[metrics.OutcomeTerminal]; n > 0 {
		o.terminal.Add(float64(n))
	}
	if n := c[metrics.OutcomePanic]; n > 0 {
		o.panics.Add(float64(n))
	}
	if n := c[metrics.OutcomeTimeout]; n > 0 {
		o.timeout.Add(float64(n))
	}
}
