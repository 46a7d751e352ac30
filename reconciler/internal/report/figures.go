package report

import (
	"time"

	"github.com/converge-go/converge/metrics"
)

// Figures gathers the figures of one commit, for the metrics and the
// reconcilers table. Reset it before each commit: its slices are reused
// from one commit to the next. It is not safe for concurrent use.
type Figures struct {
	Stats     metrics.CommitStats
	Converged int           // objects committed Done
	Total     time.Duration // their latencies, summed
	Longest   time.Duration // the longest of them

	succeeded  bool      // an operation succeeded
	failedLast int       // operations that failed after the last success
	lastErr    error     // the last failure's error, or nil
	lastErrAt  time.Time // when it was committed
}

// Reset empties f for a commit, keeping its slices' memory.
func (f *Figures) Reset() {
	*f = Figures{Stats: metrics.CommitStats{QueueWaits: f.Stats.QueueWaits[:0], Latencies: f.Stats.Latencies[:0]}}
}

// Count records one committed operation: its error, outcome and queue
// wait (in ns), committed at now. The slices are filled only if some
// metrics want them.
func (f *Figures) Count(isDelete bool, err error, out metrics.Outcome, wait int64, now time.Time, slices bool) {
	if isDelete {
		f.Stats.Delete.Add(out)
	} else {
		f.Stats.Update.Add(out)
	}
	if slices {
		f.Stats.QueueWaits = append(f.Stats.QueueWaits, time.Duration(max(wait, 0)))
	}
	if err == nil {
		f.succeeded, f.failedLast = true, 0
	} else {
		f.failedLast++
		f.lastErr, f.lastErrAt = err, now
	}
}

// Done records an object committed Done after latency.
func (f *Figures) Done(latency time.Duration, slices bool) {
	f.Converged++
	f.Total += latency
	f.Longest = max(f.Longest, latency)
	if slices {
		f.Stats.Latencies = append(f.Stats.Latencies, latency)
	}
}

// Totals are the running figures of a reconciler that its row in the
// reconcilers table shows, since its run started. The zero value is a
// run that committed nothing. It is not safe for concurrent use.
type Totals struct {
	Succeeded, Failed uint64
	SinceSuccess      int // failed operations since the last that succeeded
	LastErr           string
	LastErrAt         time.Time
	RefreshRepaired   int
}

// Add counts a commit's figures.
func (t *Totals) Add(f *Figures) {
	for _, c := range []*metrics.OutcomeCounts{&f.Stats.Update, &f.Stats.Delete} {
		t.Succeeded += uint64(c[metrics.OutcomeSuccess])
		t.Failed += uint64(c.Failed())
	}
	t.RefreshRepaired += f.Stats.RefreshRepaired
	if f.succeeded {
		t.SinceSuccess = 0
	}
	t.SinceSuccess += f.failedLast
	if f.lastErr != nil {
		t.LastErr, t.LastErrAt = f.lastErr.Error(), f.lastErrAt
	}
}

// Observers are the metrics a reconciler reports to: the seed's Metrics
// and whichever optional interfaces it implements (nil otherwise), found
// once, when the reconciler is registered (see NewObservers).
type Observers struct {
	metrics.Metrics
	Queue   metrics.QueueMetrics
	Round   metrics.RoundMetrics
	Commit  metrics.CommitMetrics
	Prune   metrics.PruneMetrics
	Refresh metrics.RefreshMetrics
}

// NewObservers returns the Observers of m.
func NewObservers(m metrics.Metrics) Observers {
	o := Observers{Metrics: m}
	o.Queue, _ = m.(metrics.QueueMetrics)
	o.Round, _ = m.(metrics.RoundMetrics)
	o.Commit, _ = m.(metrics.CommitMetrics)
	o.Prune, _ = m.(metrics.PruneMetrics)
	o.Refresh, _ = m.(metrics.RefreshMetrics)
	return o
}
