package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// priorityWorkload runs only when named: it compares converge with and
// without WithPriority, not converge with upstream.
const priorityWorkload = "priority"

// lowPriority reports whether object id is of low priority in the
// priority workload: one in every lowEvery (id 0, lowEvery, 2·lowEvery...).
func lowPriority(id uint64, lowEvery int) bool {
	return id%uint64(lowEvery) == 0
}

// prioritized returns the WithPriority option of setup.priority: high
// priority but for one object in lowEvery.
func prioritized(lowEvery int) reconciler.Option {
	return reconciler.WithPriority(func(o *object) int {
		if lowPriority(o.id, lowEvery) {
			return 0
		}
		return 1
	}, 0)
}

// priorityStream measures WithPriority (on) under a stream that saturates
// the reconciler: one goroutine inserts cfg.priorityObjects pending
// objects, in transactions of cfg.txnSize, as fast as it can (faster than
// they are reconciled, so a queue builds), one in cfg.priorityLowEvery of
// low priority. A change iterator of its own sees each object become Done;
// each object's time from its insert's commit to then is recorded, and the
// run reports the median, p99 and max of the low and of the high objects
// ("low p50" ... "high max", in nanoseconds), and the objects per second.
func priorityStream(ctx context.Context, cfg config, on bool) (measurement, error) {
	m := newMeasurement()
	n := cfg.priorityObjects
	s := setup{impl: implConverge, objects: n, noPrune: true}
	if on {
		s.priorityLowEvery = cfg.priorityLowEvery
	}
	inserted, done := make([]int64, n), make([]int64, n)
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		wtxn := e.db.WriteTxn(e.tbl)
		it, err := e.tbl.Changes(wtxn)
		wtxn.Commit()
		if err != nil {
			return err
		}
		defer it.Close()
		start := time.Now()
		go func() {
			for id := 0; id < n; {
				wtxn := e.db.WriteTxn(e.tbl)
				from := id
				for end := min(id+cfg.txnSize, n); id < end; id++ {
					e.tbl.Insert(wtxn, e.pending(uint64(id)))
				}
				at := time.Now().UnixNano()
				for i := from; i < id; i++ {
					inserted[i] = at // read once every object is Done
				}
				wtxn.Commit()
			}
		}()
		for left := n; left > 0; {
			changes, watch := it.Next(e.db.ReadTxn())
			for c := range changes {
				if id := c.Object.id; !c.Deleted && c.Object.conv.Kind == status.KindDone && done[id] == 0 {
					done[id] = time.Now().UnixNano()
					left--
				}
			}
			select {
			case <-watch:
			case <-ctx.Done():
				return fmt.Errorf("priority %v: %d of %d objects not Done: %w", on, left, n, ctx.Err())
			}
		}
		m.set("obj/s", float64(n)/time.Since(start).Seconds())
		return nil
	})
	if err != nil {
		return m, err
	}
	var low, high []float64
	for id := range n {
		d := float64(done[id] - inserted[id])
		if lowPriority(uint64(id), cfg.priorityLowEvery) {
			low = append(low, d)
		} else {
			high = append(high, d)
		}
	}
	for name, ds := range map[string][]float64{"low": low, "high": high} {
		slices.Sort(ds)
		m.set(name+" p50", quantile(ds, 0.5)) // NaN if there are none
		m.set(name+" p99", quantile(ds, 0.99))
		m.set(name+" max", quantile(ds, 1))
	}
	return m, nil
}

// runPriority runs priorityStream o.repeats times each way, alternating
// which goes first, and prints the medians.
func runPriority(ctx context.Context, o options, stdout, stderr io.Writer) error {
	runs := map[bool][]measurement{}
	for i := range o.repeats {
		for _, on := range []bool{i%2 == 0, i%2 != 0} {
			m, err := priorityStream(ctx, o.cfg, on)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "[priority] run %d, WithPriority %s: %s\n", i+1, onOff(on), m)
			runs[on] = append(runs[on], m)
		}
	}
	fmt.Fprintf(stdout, "\nWithPriority under a saturating stream: %d objects inserted in transactions of %d as fast as one goroutine can, 1 in %d of low priority; time from commit to Done, medians of %d runs\n",
		o.cfg.priorityObjects, o.cfg.txnSize, o.cfg.priorityLowEvery, o.repeats)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WithPriority\tlow p50\tlow p99\tlow max\thigh p50\thigh p99\thigh max\tobj/s\t")
	for _, on := range []bool{false, true} {
		med := func(k string) float64 {
			vs := make([]float64, len(runs[on]))
			for i, m := range runs[on] {
				vs[i] = m.values[k]
			}
			slices.Sort(vs)
			return vs[len(vs)/2]
		}
		ms := func(k string) string { return fmt.Sprintf("%.1fms", med(k)/1e6) }
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t\n", onOff(on),
			ms("low p50"), ms("low p99"), ms("low max"), ms("high p50"), ms("high p99"), ms("high max"), med("obj/s"))
	}
	return tw.Flush()
}

func onOff(on bool) string {
	if on {
		return "on (share 1/8)"
	}
	return "off"
}
