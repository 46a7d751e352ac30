package reconciler

import (
	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/reconciler/internal/inforows"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/report"
)

// What the report stage keeps and publishes to (reporter), the figures a
// reconciler keeps of its commits, and the metrics it reports them to.

// reporter is the state of the report stage: where it publishes (the
// metrics, the progress WaitUntilReconciled waits on, the reconciler's rows
// in the tables of Params.Tables, health) and what it keeps of a run to
// publish there (health as last reported, the round limiter's error, the
// totals of its commits, whether a round's progress is owed). Register makes it:
// the zero value is not usable. reset readies it for a run. It is not safe
// for concurrent use: the reconcile job's goroutine owns it, but for
// progress, which any goroutine may wait on, and metrics and info, which
// the workers and the refresh job also report to.
type reporter[Obj any] struct {
	metrics  report.Observers
	info     *inforows.Writer[Obj, *keyqueue.State[Obj]] // nil without Params.Tables
	progress *report.Progress

	// The state of one run of the reconcile job, reset when it starts.
	health     report.Health
	limiterErr error                           // why the round limiter's last Wait failed, or nil
	reported   struct{ failing, inFlight int } // as last given to the metrics
	totals     report.Totals                   // since the run started, for the reconcilers table
	owed       bool                            // the round's progress waits for the group's write to land (see progressOwed)
}

// reset readies it for a run of the reconcile job reporting to health.
// It writes only the state of a run: other goroutines read the rest.
func (rep *reporter[Obj]) reset(health cell.Health) {
	rep.health, rep.limiterErr = report.NewHealth(health), nil
	rep.reported, rep.totals, rep.owed = struct{ failing, inFlight int }{}, report.Totals{}, false
}

// committed counts fig, the figures of a commit of the reconciler of
// module and name (see commit.Outcome), in the totals and reports them to
// the metrics. A nil fig, of a commit without ops, reports nothing.
func (rep *reporter[Obj]) committed(module cell.FullModuleID, name string, fig *report.Figures) {
	if fig == nil {
		return
	}
	rep.totals.Add(fig)
	if rep.metrics.Commit != nil {
		rep.metrics.Commit.Committed(module, name, fig.Stats)
	}
	if fig.Converged > 0 && rep.metrics.Queue != nil {
		rep.metrics.Queue.Converged(module, name, fig.Converged, fig.Total, fig.Longest)
	}
}
