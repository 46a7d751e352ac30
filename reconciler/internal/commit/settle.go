package commit

import (
	"time"

	"github.com/converge-go/converge/reconciler/internal/backoff"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/reconciler/internal/work"
)

// settle does what follows the writes for each op: its key's lifecycle,
// figures and failure logs, in out.
func (c *Committer[Obj]) settle(ops []work.Op[Obj], now time.Time, out *Outcome) {
	q, p := c.cfg.Queue, c.policy
	fig := &c.fig
	fig.Reset()
	slices := c.cfg.Slices
	for i := range ops {
		o := &ops[i]
		if o.Ran && c.cfg.DriftSettled != nil {
			c.cfg.DriftSettled(o) // a repair the drift check asked for counts one
		}
		fig.Stats.RefreshRepaired += int(o.Drift) // counted whatever the outcome
		if !o.Ran {
			c.requeue(o)
			continue
		}
		out.Committed++
		attempts := 0
		if o.S != nil {
			attempts = o.S.View().Attempts
		}
		terminal := o.Err != nil && work.IsTerminal(o.Err)
		fig.Count(o.Delete, o.Err, work.Outcome(o.Err, p.OperationTimeout), o.Started-o.Ready, now, slices)
		if o.Err != nil {
			out.Failed++
			c.failLog.Record(c.cfg.Log, o.Delete, c.cfg.Objects.OpKey(o), attempts+1, o.Err, terminal, now)
		}
		settled := o.Err == nil || (!o.Delete && terminal)
		written := o.Delete || o.Written
		done := keyqueue.Outcome[Obj]{Ran: true, Err: o.Err, Settled: settled, Written: written, Spared: o.Spared, Over: o.Over}
		if o.Err == nil && written && !o.Delete {
			fig.Done(now.Sub(o.Since), slices)
			if o.Recheck > 0 {
				// The re-check o's Update asked for (RecheckAfter).
				done.RecheckAt, done.Updated, done.UpdatedID = backoff.Add(now.UnixNano(), o.Recheck), o.Updated, c.cfg.Objects.GetStatus(o.Updated).ID()
			}
		}
		if o.S == nil && settled && done.RecheckAt == 0 {
			continue // untracked and done: nothing to remember, no key to compute
		}
		key := o.Key
		if o.S == nil {
			var ok bool
			if key, ok = c.cfg.Objects.KeyOf(o.Obj); !ok {
				if !settled {
					work.LogNoKey(c.cfg.Log, "a failed operation", o.Obj)
				}
				continue
			}
		}
		if !settled {
			wait, ok := work.RetryDelay(o.Err)
			if !ok {
				wait = backoff.Wait(attempts+1, p.RetryMin, p.RetryMax, p.RetryJitter, c.cfg.Rand())
			}
			done.RetryAt = backoff.Add(now.UnixNano(), wait)
			if !o.Delete {
				done.ErrID = c.cfg.Objects.GetStatus(o.Updated).ID()
			}
		}
		q.Done(o.S, key, o.Task, done, now)
	}
	out.Figures = fig
}

// requeue puts the key of o, an op that never started (the gate closed or
// the loop stopped), back in the queue.
func (c *Committer[Obj]) requeue(o *work.Op[Obj]) {
	key := o.Key
	if o.S == nil {
		var ok bool
		if key, ok = c.cfg.Objects.KeyOf(o.Obj); !ok {
			work.LogNoKey(c.cfg.Log, "an operation not started", o.Obj)
			return
		}
	}
	c.cfg.Queue.Done(o.S, key, o.Task, keyqueue.Outcome[Obj]{}, time.Time{})
}
