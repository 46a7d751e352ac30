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

// commitFigures gathers the figures of one commit. Its slices are reused
// from one commit to the next.
type commitFigures struct {
	stats     metrics.CommitStats
	converged int
	total     time.Duration
	longest   time.Duration
}

func (c *commitFigures) reset() {
	waits, lat := c.stats.QueueWaits[:0], c.stats.Latencies[:0]
	*c = commitFigures{}
	c.stats.QueueWaits, c.stats.Latencies = waits, lat
}

// count records one committed op with its outcome and queue wait (in ns);
// the slices are filled only if some metrics want them.
func (c *commitFigures) count(isDelete bool, out metrics.Outcome, wait int64, slices bool) {
	if isDelete {
		c.stats.Delete.Add(out)
	} else {
		c.stats.Update.Add(out)
	}
	if slices {
		c.stats.QueueWaits = append(c.stats.QueueWaits, time.Duration(max(wait, 0)))
	}
}

// done records an object committed Done after latency.
func (c *commitFigures) done(latency time.Duration, slices bool) {
	c.converged++
	c.total += latency
	c.longest = max(c.longest, latency)
	if slices {
		c.stats.Latencies = append(c.stats.Latencies, latency)
	}
}
