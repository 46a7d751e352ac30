package reconciler

import (
	"context"
	"math"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/refresh"
	"github.com/converge-go/converge/status"
	"github.com/converge-go/converge/tracing"
)

// newRefresher returns what marks objects Refreshing (see package
// refresh): the refresh job, reading its settings from Configure's
// (settings.refreshing), not r.opts, and the re-checks' marking.
func (r *reconciler[Obj]) newRefresher() *refresh.Refresher[Obj] {
	return refresh.New(refresh.Config[Obj]{
		DB: r.db, Table: r.objects.Table,
		Status: r.objects.GetStatus, WithStatus: r.objects.WithStatus,
		NoKey:    func(obj Obj) { r.noKey("a refresh mark (setStatus removed it)", obj) },
		Now:      func() time.Time { return r.clock.now() },
		Settings: r.settings.refreshing,
		Paused:   r.gate.State,
		Swept:    func(at time.Time) { r.rep.info.Refreshed(at) },
		Failed:   func(err error) { r.log.Error("Refresh limiter fails; refresh sweeps stop early", "error", err) },
		Marked: func(n int) {
			if m := r.rep.metrics.Refresh; m != nil {
				m.RefreshMarked(r.moduleID, r.opts.name, n)
			}
		},
		Span: func(ctx context.Context) (context.Context, tracing.Span) {
			if r.opts.tracer == nil {
				return ctx, nil
			}
			return r.startSpan(ctx, tracing.Start{Kind: tracing.Refresh})
		},
	})
}

// dueRechecks takes the re-checks due at now (Unix ns, see
// keyqueue.Rechecks) and returns those whose object still carries the Done
// status they were asked with, as txn holds it, for Refresher.Mark. A
// changed or deleted object has had, or has, its own turn.
func (r *reconciler[Obj]) dueRechecks(txn statedb.ReadTxn, now int64) (due []refresh.Candidate[Obj]) {
	for _, c := range r.queue.Take(keyqueue.Rechecks, math.MaxInt, now, nil) {
		cur, rev, found := r.objects.Lookup(txn, c.Obj)
		if !found {
			continue
		}
		if st := r.objects.GetStatus(cur); st.Kind == status.KindDone && st.ID() == c.StatusID {
			due = append(due, refresh.Candidate[Obj]{Obj: cur, Rev: rev})
		}
	}
	return due
}
