package reconciler_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/tables"
)

// Each failing object's recent errors (tables.RetryInfo.Errors), checked
// after every step against what the chaos target returned: at most four
// records, oldest first, no two in a row with the same text, attempts and
// times in order, the newest being the row's last error at its attempt
// count; and without batches (where an entry's outcome is not its
// operation's), every record but an adopted first one is an error the
// key's operations returned since one success and before the next, in
// order.

// historyLog is what the operations of one target returned, per key: the
// texts of their errors as the reconciler records them, in segments cut
// by each success. Guarded by the target's mu.
type historyLog struct {
	segments map[string][][]string
}

// noteOutcome records the outcome of an operation on key (*errp, or the
// panic it is unwinding with, which goes on), for checkHistory. It must be
// deferred by the operation itself.
func (o *chaosOps) noteOutcome(key string, errp *error) {
	p := recover()
	o.note(key, p, *errp)
	if p != nil {
		panic(p)
	}
}

// noteCheck records the outcome of a drift check of key, for
// checkHistory: its error or, in sync, a success (the reconciler records
// the object Done); a drift found is no outcome, the Update that follows
// has its own.
func (o *chaosOps) noteCheck(key string, inSync bool, err error) {
	if err != nil || inSync {
		o.note(key, nil, err)
	}
}

// note records an outcome: the panic p, else err, else a success.
func (o *chaosOps) note(key string, p any, err error) {
	o.target.with(func() {
		c := o.target
		if c.hist == nil {
			c.hist = &historyLog{segments: map[string][][]string{}}
		}
		segs := c.hist.segments[key]
		if len(segs) == 0 {
			segs = [][]string{nil}
		}
		switch {
		case p != nil:
			segs[len(segs)-1] = append(segs[len(segs)-1], fmt.Errorf("%w: %v", reconciler.ErrPanic, p).Error())
		case err != nil:
			segs[len(segs)-1] = append(segs[len(segs)-1], err.Error())
		default:
			segs = append(segs, nil)
		}
		c.hist.segments[key] = segs
	})
}

// failingStreak makes a key's next calls fail (with one text: a streak the
// history keeps as one record) and writes it a new value.
func (r *chaosRun) failingStreak() {
	k, n := r.key(), 2+r.rng.IntN(6)
	for _, rec := range r.recs {
		rec.target.failNextN(k, n)
	}
	r.set(k, r.value(), fmt.Sprintf(", its next %d calls failing", n))
}

// checkHistory checks every row of the retries table (see the top of the
// file).
func (r *chaosRun) checkHistory() {
	if r.gen == nil || r.gen.db == nil {
		return
	}
	txn := r.gen.db.ReadTxn()
	retries, _ := r.gen.db.GetTable(txn, tables.RetriesTableName).(statedb.Table[*tables.RetryInfo])
	if retries == nil {
		return
	}
	for row := range retries.All(txn) {
		if row.Drifted && row.Attempts == 0 {
			continue // drifted and left so (WithDriftReportOnly): not failing
		}
		for _, rec := range r.recs {
			if row.Reconciler != "test" && !strings.HasSuffix(row.Reconciler, "/"+rec.name) || row.Reconciler == "test" && rec.name != "" {
				continue
			}
			rec.target.with(func() {
				if problem := historyProblem(row, rec.target.hist, !r.cfg.batch); problem != "" {
					rec.target.violate("gen %d: %sthe retries row of %s (%s, attempts=%d, last error %q) has the history %s: %s",
						r.gens, rec.label(), row.Key, map[bool]string{false: "update", true: "delete"}[row.Delete], row.Attempts, row.LastError, describeHistory(row.Errors), problem)
				}
			})
		}
	}
}

// historyProblem returns what is wrong with the history of row, or "".
// With ops, it is checked against what the operations returned (log).
func historyProblem(row *tables.RetryInfo, log *historyLog, ops bool) string {
	h := row.Errors
	switch {
	case len(h) == 0:
		return "a failing object without a history"
	case len(h) > 4:
		return "more than 4 records"
	}
	for i := 1; i < len(h); i++ {
		switch {
		case h[i].Error == h[i-1].Error:
			return fmt.Sprintf("records %d and %d have the same text", i-1, i)
		case h[i].Attempt < h[i-1].Attempt:
			return fmt.Sprintf("record %d's attempt is before record %d's: errors of another failure kept", i, i-1)
		case h[i].At.Before(h[i-1].At):
			return fmt.Sprintf("record %d is older than record %d", i, i-1)
		}
	}
	last := h[len(h)-1]
	switch {
	case last.Attempt != row.Attempts:
		return fmt.Sprintf("the newest record is of attempt %d", last.Attempt)
	case last.Error != bounded(row.LastError):
		return "the newest record is not the last error"
	case !ops:
		return ""
	}
	var segs [][]string
	if log != nil {
		segs = log.segments[row.Key]
	}
	texts := make([]string, 0, len(h))
	for i, rec := range h {
		switch {
		case rec.Error == "context canceled":
			// A stop's, which the operations may return without its
			// being recorded (carried over); not looked for.
		case i == 0 && (rec.Error == "restored" || slices.ContainsFunc(segs, func(s []string) bool { return slices.Contains(s, rec.Error) })):
			// The first may be adopted from an Error status found (a
			// restore, or written back): its error is from any time.
		default:
			texts = append(texts, rec.Error)
		}
	}
	if len(texts) > 0 && !slices.ContainsFunc(segs, func(s []string) bool { return isSubsequence(texts, s) }) {
		return fmt.Sprintf("not errors its operations returned in order between two successes (they returned, per success: %q)", segs)
	}
	return ""
}

// bounded is text as a history keeps it (keyqueue.MaxErrorText).
func bounded(text string) string {
	if len(text) <= 256 {
		return text
	}
	cut := 256
	for cut > 0 && text[cut]&0xC0 == 0x80 {
		cut--
	}
	return text[:cut] + "…"
}

// isSubsequence reports whether sub is in s, in order.
func isSubsequence(sub, s []string) bool {
	for _, e := range s {
		if len(sub) > 0 && e == sub[0] {
			sub = sub[1:]
		}
	}
	return len(sub) == 0
}

func describeHistory(h []tables.ErrorRecord) string {
	parts := make([]string, len(h))
	for i, e := range h {
		parts[i] = fmt.Sprintf("#%d %q at %s", e.Attempt, e.Error, e.At.Format(time.StampMicro))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
