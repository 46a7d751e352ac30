package reconciler

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/converge-go/converge/metrics"
)

// ReportRepaired lets an operation say that it repaired n pieces of drift:
// Prune counting what it removed from the target that should not have been
// there, or Update counting what it had to put right in the target for an
// object marked Refreshing. Call it with the context the operation was
// given, any number of times. The counts go to the metrics (drift repaired,
// by source "prune" or "refresh"; see [metrics.PruneStats] and
// [metrics.CommitStats]) and to the reconcilers table. With a context that
// does not come from a reconciler it does nothing. It is safe for
// concurrent use and does not allocate.
func ReportRepaired(ctx context.Context, n int) {
	if c, ok := ctx.Value(driftKey{}).(*driftCounter); ok && n > 0 {
		c.n.Add(int64(n))
	}
}

type driftKey struct{}

// driftCounter collects ReportRepaired calls of the operations an executor
// runs. The executor reads and resets it around each operation.
type driftCounter struct{ n atomic.Int64 }

func (c *driftCounter) take() int { return int(c.n.Swap(0)) }

// observers holds the metrics a reconciler reports to: the seed's Metrics
// and whichever optional interfaces it implements (nil otherwise), found
// once when the reconciler is registered.
type observers struct {
	metrics.Metrics
	queue   metrics.QueueMetrics
	round   metrics.RoundMetrics
	commit  metrics.CommitMetrics
	prune   metrics.PruneMetrics
	refresh metrics.RefreshMetrics
}

func newObservers(m metrics.Metrics) observers {
	o := observers{Metrics: m}
	o.queue, _ = m.(metrics.QueueMetrics)
	o.round, _ = m.(metrics.RoundMetrics)
	o.commit, _ = m.(metrics.CommitMetrics)
	o.prune, _ = m.(metrics.PruneMetrics)
	o.refresh, _ = m.(metrics.RefreshMetrics)
	return o
}

// outcome classifies how an operation ended, in the order of precedence
// metrics.Outcome documents: a panic, a timeout of the operation's own
// deadline, a terminal error, any other error.
func outcome(err error, timeout time.Duration) metrics.Outcome {
	switch {
	case err == nil:
		return metrics.OutcomeSuccess
	case errors.Is(err, ErrPanic):
		return metrics.OutcomePanic
	case timeout > 0 && errors.As(err, new(*timeoutError)):
		return metrics.OutcomeTimeout
	case IsTerminal(err):
		return metrics.OutcomeTerminal
	}
	return metrics.OutcomeError
}
