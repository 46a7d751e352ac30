package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"math"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cilium/statedb"
	upstream "github.com/cilium/statedb/reconciler"

	"github.com/converge-go/converge/reconciler"
)

// The outage workload (issue 33, item 1) asks what a reconciler does to a
// target that is down for everyone, and how fast it comes back. For each
// variant (outageVariants) it starts a hive whose target fails every call
// from the moment the first object is inserted until -outage-for later
// (the target decides from that start time, see outageTarget), inserts
// -outage-objects objects Pending, 1000 per write transaction, sleeps until
// the target's recovery, and then waits until no object is Pending,
// Refreshing or Error, as the status index shows, the same way for every
// implementation (env.waitAllDone). It measures:
//
//	calls/s        calls to the target during the outage, per second of it
//	calls/s 2nd    the same over the outage's second half, once every
//	               backoff has grown to its maximum
//	entries/s      objects handed to the target during the outage, per
//	               second: with batch operations, the entries of the
//	               batches; with single operations, the calls
//	calls, entries the totals during the outage
//	first ok s     from the target's recovery until its first successful
//	               call: how long the reconciler took to notice
//	recovery s     from the target's recovery until the status index shows
//	               every object Done (absent if not within -outage-settle)
//	calls after    calls (and entries) from the recovery until then
//	done           1 if a scan then finds every object Done, else 0
//	insert s       how long the inserts took, inside the outage
//
// Every implementation retries with WithRetry(-outage-retry-min,
// -outage-retry-max) and otherwise its defaults (converge's retry jitter of
// ±10% included); periodic pruning is off for all.

// outageConfig sizes the outage workload.
type outageConfig struct {
	objects  int           // objects inserted Pending at the start of the outage
	outage   time.Duration // how long the target fails every call
	retryMin time.Duration // WithRetry of every implementation, and the breaker's probe backoff
	retryMax time.Duration
	settle   time.Duration // bound on the wait for every object Done after the recovery
	repeats  int           // runs of each variant
}

// outageBreakerFailures is the breaker's threshold in the breaker
// variants: WithCircuitBreaker(5, retryMin, nil).
const outageBreakerFailures = 5

// outageVariant is one row of the outage table.
type outageVariant struct {
	name    string
	im      impl
	batch   bool // batch operations
	breaker bool // converge's circuit breaker
	// The target answers with RetryAfter(outageRetryAfter, ...), as a 503
	// with Retry-After or a rate limit does (converge only).
	retryAfter bool
}

var outageVariants = []outageVariant{
	{"upstream", implUpstream, false, false, false},
	{"converge", implConverge, false, false, false},
	{"converge, breaker", implConverge, false, true, false},
	{"converge batch, breaker", implConverge, true, true, false},
	{"converge, breaker, RetryAfter", implConverge, false, true, true},
	{"converge batch, breaker, RetryAfter", implConverge, true, true, true},
}

// outageRetryAfter is the time the target asks for in the RetryAfter
// variants: short, so that a reconciler that took it at its word for the
// object would call again and again.
const outageRetryAfter = 5 * time.Millisecond

func outageCaseName(v outageVariant) string { return "outage " + v.name }

// outageCases run every variant cfg.outage.repeats times (workloadRuns).
// The cases of a
// workload take turns going first (runAll), so each variant goes first in
// a different run.
func outageCases() []runCase {
	var out []runCase
	for _, v := range outageVariants {
		out = append(out, runCase{
			name: outageCaseName(v), workload: "outage", impls: []impl{v.im},
			fn: func(ctx context.Context, c config, im impl) (measurement, error) {
				return outage(ctx, c, v)
			},
		})
	}
	return out
}

// outageFlags defines the outage workload's flags on fs and returns what to
// call once fs is parsed: it sets the runs (-repeats if given, else at most
// 2), shrinks the sizes for -quick (unless set explicitly) and checks them.
func outageFlags(fs *flag.FlagSet, c *outageConfig) func(quick bool, repeats int) error {
	fs.IntVar(&c.objects, "outage-objects", 100_000, "objects in the outage workload, inserted Pending as the target goes down")
	fs.DurationVar(&c.outage, "outage-for", 10*time.Second, "outage workload: how long the target fails every call, from the first insert")
	fs.DurationVar(&c.retryMin, "outage-retry-min", 10*time.Millisecond, "outage workload: minimum retry backoff of every implementation, and the breaker's probe backoff")
	fs.DurationVar(&c.retryMax, "outage-retry-max", time.Second, "outage workload: maximum retry backoff of every implementation")
	fs.DurationVar(&c.settle, "outage-settle", time.Minute, "outage workload: how long to wait after the recovery for every object to be Done before reporting that they were not")
	return func(quick bool, repeats int) error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if quick && !set["outage-objects"] {
			c.objects = 5000
		}
		if quick && !set["outage-for"] {
			c.outage = 500 * time.Millisecond
		}
		c.repeats = repeats
		if !set["repeats"] {
			c.repeats = min(2, repeats)
		}
		switch {
		case c.objects < 1:
			return fmt.Errorf("-outage-objects must be positive, got %d", c.objects)
		case c.outage <= 0 || c.settle <= 0:
			return errors.New("-outage-for and -outage-settle must be positive")
		case c.retryMin <= 0 || c.retryMax < c.retryMin:
			return errors.New("-outage-retry-min must be positive and at most -outage-retry-max")
		}
		return nil
	}
}

// errOutage is what the target returns during the outage.
var errOutage = errors.New("benchmark: target unavailable")

// Phases of the outage, as the target sees them.
const (
	outageFirstHalf = iota
	outageSecondHalf
	outageRecovered
)

// outageTarget is the target of the outage workload: from begin until d
// later every call fails with errOutage; then every call succeeds. It
// decides by the time of each call, and counts calls and the objects in
// them by phase. Its zero value is not usable: call begin before the table
// holds anything (calls before it are counted as recovered). It implements
// the operations of both libraries; convOutageBatch and upOutageBatch are
// its batch operations. Safe for concurrent use.
type outageTarget struct {
	retryAfter bool         // fail with RetryAfter(outageRetryAfter, errOutage)
	half, end  atomic.Int64 // Unix ns: the middle and the end of the outage
	firstOK    atomic.Int64 // Unix ns: the first call that succeeded, 0 before
	calls      [3]atomic.Int64
	entries    [3]atomic.Int64
}

// begin starts an outage of d at start.
func (t *outageTarget) begin(start time.Time, d time.Duration) {
	t.half.Store(start.Add(d / 2).UnixNano())
	t.end.Store(start.Add(d).UnixNano())
}

// recovery is when the outage ends.
func (t *outageTarget) recovery() time.Time { return time.Unix(0, t.end.Load()) }

// call counts one call carrying n objects and returns its result.
func (t *outageTarget) call(n int) error {
	now := time.Now().UnixNano()
	p := outageRecovered
	switch {
	case now < t.half.Load():
		p = outageFirstHalf
	case now < t.end.Load():
		p = outageSecondHalf
	}
	t.calls[p].Add(1)
	t.entries[p].Add(int64(n))
	if p == outageRecovered {
		t.firstOK.CompareAndSwap(0, now)
		return nil
	}
	if t.retryAfter {
		return reconciler.RetryAfter(outageRetryAfter, errOutage)
	}
	return errOutage
}

func (t *outageTarget) Update(context.Context, statedb.ReadTxn, statedb.Revision, *object) error {
	return t.call(1)
}

func (t *outageTarget) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *object) error {
	return t.call(1)
}

func (t *outageTarget) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*object, statedb.Revision]) error {
	return t.call(0)
}

// convOutageBatch and upOutageBatch are the outage target's batch
// operations: one call for the whole batch, every entry with its result.
type convOutageBatch struct{ *outageTarget }

func (b convOutageBatch) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*object]) {
	b.apply(batch)
}

func (b convOutageBatch) DeleteBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*object]) {
	b.apply(batch)
}

func (b convOutageBatch) apply(batch []reconciler.BatchEntry[*object]) {
	err := b.call(len(batch))
	for i := range batch {
		batch[i].Result = err
	}
}

type upOutageBatch struct{ *outageTarget }

func (b upOutageBatch) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []upstream.BatchEntry[*object]) {
	b.apply(batch)
}

func (b upOutageBatch) DeleteBatch(_ context.Context, _ statedb.ReadTxn, batch []upstream.BatchEntry[*object]) {
	b.apply(batch)
}

func (b upOutageBatch) apply(batch []upstream.BatchEntry[*object]) {
	err := b.call(len(batch))
	for i := range batch {
		batch[i].Result = err
	}
}

// outage runs variant v once: see the top of this file.
func outage(ctx context.Context, cfg config, v outageVariant) (measurement, error) {
	c := cfg.outage
	m := newMeasurement()
	t := &outageTarget{retryAfter: v.retryAfter}
	s := setup{
		impl: v.im, batch: v.batch, statusIndex: true, objects: c.objects, noPrune: true,
		retryMin: c.retryMin, retryMax: c.retryMax, outage: t,
	}
	if v.breaker {
		s.breaker = outageBreakerFailures
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		start := time.Now()
		t.begin(start, c.outage)
		e.insert(0, c.objects, cfg.txnSize)
		m.set("insert s", time.Since(start).Seconds())
		// Let the outage run its course; the target ends it by itself.
		recovery := t.recovery()
		timer := time.NewTimer(time.Until(recovery))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%s: during the outage: %w", v.name, ctx.Err())
		}
		wctx, cancel := context.WithDeadline(ctx, recovery.Add(c.settle))
		err := e.waitAllDone(wctx)
		took := time.Since(recovery)
		cancel()
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%s: after the outage: %w", v.name, ctx.Err())
		case err == nil:
			m.set("recovery s", took.Seconds())
		}
		done := 1.0
		if e.checkAllDone(c.objects, time.Time{}) != nil {
			done = 0
		}
		m.set("done", done)
		if ok := t.firstOK.Load(); ok != 0 {
			m.set("first ok s", time.Duration(ok-recovery.UnixNano()).Seconds())
		}
		calls := float64(t.calls[outageFirstHalf].Load() + t.calls[outageSecondHalf].Load())
		entries := float64(t.entries[outageFirstHalf].Load() + t.entries[outageSecondHalf].Load())
		secs := c.outage.Seconds()
		m.set("calls", calls)
		m.set("entries", entries)
		m.set("calls/s", calls/secs)
		m.set("entries/s", entries/secs)
		m.set("calls/s 2nd", float64(t.calls[outageSecondHalf].Load())/(secs/2))
		m.set("entries/s 2nd", float64(t.entries[outageSecondHalf].Load())/(secs/2))
		m.set("calls after", float64(t.calls[outageRecovered].Load()))
		m.set("entries after", float64(t.entries[outageRecovered].Load()))
		return nil
	})
	return m, err
}

// printOutage prints the outage workload's table: medians over runs per
// variant, and how many runs ended with every object Done.
func printOutage(w io.Writer, o options, res results) {
	c := o.cfg.outage
	if res[outageCaseName(outageVariants[0])] == nil && res[outageCaseName(outageVariants[1])] == nil {
		return
	}
	fmt.Fprintf(w, "\nOutage (issue 33): %s objects inserted Pending, %d per txn, while the target fails every call for %s from the first insert; then it recovers.\n",
		count(c.objects), o.cfg.txnSize, c.outage)
	fmt.Fprintf(w, "Every implementation has WithRetry(%s, %s), its other options at their defaults, pruning off; the breaker is WithCircuitBreaker(%d, %s, nil).\n",
		c.retryMin, c.retryMax, outageBreakerFailures, c.retryMin)
	fmt.Fprintln(w, "calls/s: calls to the target during the outage per second (whole outage; 2nd half); entries/s: objects in them (batch entries);")
	fmt.Fprintln(w, "1st success: from the end of the outage until the first call that succeeded; recovery: until the status index shows every object Done;")
	fmt.Fprintln(w, "after: calls (entries) from the end of the outage until then;")
	fmt.Fprintf(w, "all Done: runs whose table scan found every object Done. Medians over %d run(s) of each variant.\n", c.repeats)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "variant\tcalls/s\t2nd half\tentries/s\t2nd half\tcalls\tentries\t1st success\trecovery\tcalls after\tentries after\tall Done\t")
	for _, v := range outageVariants {
		cs := outageCaseName(v)
		runs := len(res[cs][v.im]["done"])
		if runs == 0 {
			continue
		}
		med := func(metric string) float64 { return res.median(cs, v.im, metric) }
		done := 0
		for _, d := range res[cs][v.im]["done"] {
			if d == 1 {
				done++
			}
		}
		secs := func(metric string) string {
			if r := med(metric); !math.IsNaN(r) {
				return fmtDuration(time.Duration(r * 1e9))
			}
			return "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d of %d runs\t\n", v.name,
			fmtCalls(med("calls/s")), fmtCalls(med("calls/s 2nd")), fmtCalls(med("entries/s")), fmtCalls(med("entries/s 2nd")),
			fmtCalls(med("calls")), fmtCalls(med("entries")), secs("first ok s"), secs("recovery s"),
			fmtCalls(med("calls after")), fmtCalls(med("entries after")), done, runs)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nGoal (issue 33): during the outage one probe per breaker backoff step (today about one call per object per backoff step);\n")
	fmt.Fprintf(w, "after it, every object Done within one backoff step (%s) plus the time to apply %s objects.\n", c.retryMax, count(c.objects))
}

// fmtCalls formats a count or rate of calls: 3, 45.6, 12.3k, 1.23M.
func fmtCalls(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
