package reconciler

import (
	"errors"
	"time"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/metrics"
)

// What the report stage keeps and publishes to (reporter), the figures a
// reconciler keeps of its commits, and the metrics it reports them to.

// reporter is the state of the report stage: where it publishes (the
// metrics, the progress WaitUntilReconciled waits on, the reconciler's rows
// in the tables of Params.Tables, health) and what it keeps of a run to
// publish there (health as last reported, the round limiter's error, the
// commits' figures and the failure logs' rate limit). Register makes it:
// the zero value is not usable. reset readies it for a run. It is not safe
// for concurrent use: the reconcile job's goroutine owns it, but for
// progress, which any goroutine may wait on, and metrics and info, which
// the workers and the refresh job also report to.
type reporter[Obj any] struct {
	metrics  observers
	info     *infoWriter[Obj] // nil without Params.Tables
	progress *progress

	// The state of one run of the reconcile job, reset when it starts.
	health     healthReporter
	limiterErr error                           // why the round limiter's last Wait failed, or nil
	reported   struct{ failing, inFlight int } // as last given to the metrics
	figures    commitFigures                   // of the last commit, which filled it (see settle)
	totals     totals                          // since the run started, for the reconcilers table
	failLog    failLog                         // of the failures commit logs
}

// reset readies it for a run of the reconcile job reporting to health.
// It writes only the state of a run: other goroutines read the rest.
func (rep *reporter[Obj]) reset(health cell.Health) {
	rep.health, rep.limiterErr = healthReporter{health: health}, nil
	rep.reported, rep.figures, rep.totals, rep.failLog = struct{ failing, inFlight int }{}, commitFigures{}, totals{}, failLog{}
}

// committed counts fig, the figures of a commit of the reconciler of
// module and name (see commitOutcome), in the totals and reports them to
// the metrics. A nil fig, of a commit without ops, reports nothing.
func (rep *reporter[Obj]) committed(module cell.FullModuleID, name string, fig *commitFigures) {
	if fig == nil {
		return
	}
	rep.totals.add(fig)
	if rep.metrics.commit != nil {
		rep.metrics.commit.Committed(module, name, fig.stats)
	}
	if fig.converged > 0 && rep.metrics.queue != nil {
		rep.metrics.queue.Converged(module, name, fig.converged, fig.total, fig.longest)
	}
}

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

// commitFigures gathers the figures of one commit, for the metrics and
// the reconcilers table. Its slices are reused from one commit to the next.
type commitFigures struct {
	stats     metrics.CommitStats
	converged int
	total     time.Duration
	longest   time.Duration

	succeeded  bool      // an operation succeeded
	failedLast int       // operations that failed after the last success
	lastErr    error     // the last failure's error, or nil
	lastErrAt  time.Time // when it was committed
}

// count records one committed op: its error, outcome and queue wait (in
// ns), committed at now. The slices are filled only if some metrics want
// them.
func (c *commitFigures) count(isDelete bool, err error, out metrics.Outcome, wait int64, now time.Time, slices bool) {
	if isDelete {
		c.stats.Delete.Add(out)
	} else {
		c.stats.Update.Add(out)
	}
	if slices {
		c.stats.QueueWaits = append(c.stats.QueueWaits, time.Duration(max(wait, 0)))
	}
	if err == nil {
		c.succeeded, c.failedLast = true, 0
	} else {
		c.failedLast++
		c.lastErr, c.lastErrAt = err, now
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

// totals are the running figures of a reconciler that its row in the
// reconcilers table shows. The reporter owns them.
type totals struct {
	succeeded, failed uint64
	sinceSuccess      int // failed operations since the last that succeeded
	lastErr           string
	lastErrAt         time.Time
	refreshRepaired   int
}

// add counts a commit's figures.
func (t *totals) add(fig *commitFigures) {
	for _, c := range []*metrics.OutcomeCounts{&fig.stats.Update, &fig.stats.Delete} {
		t.succeeded += uint64(c[metrics.OutcomeSuccess])
		t.failed += uint64(c.Failed())
	}
	t.refreshRepaired += fig.stats.RefreshRepaired
	if fig.succeeded {
		t.sinceSuccess = 0
	}
	t.sinceSuccess += fig.failedLast
	if fig.lastErr != nil {
		t.lastErr, t.lastErrAt = fig.lastErr.Error(), fig.lastErrAt
	}
}
