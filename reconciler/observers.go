package reconciler

import (
	"errors"
	"time"

	"github.com/converge-go/converge/metrics"
)

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
