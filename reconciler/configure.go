package reconciler

import (
	"github.com/converge-go/converge/reconciler/internal/collect"
	"github.com/converge-go/converge/reconciler/internal/commit"
)

// Configure implements Reconciler.
func (r *reconciler[Obj]) Configure(opts ...Option) error {
	return r.settings.configure(r.target.pruner != nil, opts)
}

// applySettings takes the options Configure accepted since the last call,
// if any, sets those of them the reconcile job reads in r.opts, and the
// circuit breaker's probe maximum, which is the retry maximum, and returns
// the settings they replaced. It runs on the reconcile job's goroutine,
// between rounds: workers read none of these fields, and the refresh job
// reads its own (settings.refreshing).
func (r *reconciler[Obj]) applySettings() (old options, ok bool) {
	o, ok := r.settings.take()
	if !ok {
		return options{}, false
	}
	old = r.opts
	r.opts.concurrency = o.concurrency
	r.opts.roundSize, r.opts.roundLimiter = o.roundSize, o.roundLimiter
	r.opts.pruneInterval = o.pruneInterval
	r.opts.retryMin, r.opts.retryMax, r.opts.retryJitter = o.retryMin, o.retryMax, o.retryJitter
	if old.retryMax != o.retryMax {
		// Else a breaker registered with a long retry maximum keeps
		// doubling its probes' backoff towards it, hours apart.
		r.breaker.SetProbeMax(o.retryMax, r.clock.now())
	}
	r.commit.SetPolicy(r.opts.commitPolicy())
	r.collect.SetLimits(r.opts.collectLimits())
	return old, true
}

// collectLimits is what the collect stage takes rounds within.
func (o *options) collectLimits() collect.Limits {
	return collect.Limits{Concurrency: o.concurrency, RoundSize: o.roundSize}
}

// commitPolicy is what the commit stage settles outcomes by.
func (o *options) commitPolicy() commit.Policy {
	return commit.Policy{MaxAttempts: o.maxAttempts, RetryMin: o.retryMin, RetryMax: o.retryMax, RetryJitter: o.retryJitter, OperationTimeout: o.operationTimeout}
}
