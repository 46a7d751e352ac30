package reconciler

// Benchmarks of the reconciler's hot paths, run with
//
//	go test -run '^$' -bench . -benchmem ./reconciler
//
// They drive the internal pieces directly (a round, the commit, the retry
// queue, the backoff) against a real StateDB table, without a hive. The
// end-to-end comparison with the upstream reconciler is `go run ./benchmarks`.

import (
	"context"
	"iter"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/hive/cell"

	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/status"
)

// benchRound is how many objects one benchmark round handles, the default
// round size.
const benchRound = 1000

type benchObj struct {
	id uint64
	st status.Status
}

func (o *benchObj) clone() *benchObj                        { c := *o; return &c }
func (o *benchObj) TableHeader() []string                   { return []string{"ID", "Status"} }
func (o *benchObj) TableRow() []string                      { return []string{strconv.FormatUint(o.id, 10), o.st.String()} }
func benchGetStatus(o *benchObj) status.Status              { return o.st }
func benchSetStatus(o *benchObj, s status.Status) *benchObj { o.st = s; return o }

var benchIDIndex = statedb.Index[*benchObj, uint64]{
	Name: "id",
	FromObject: func(o *benchObj) index.KeySet {
		return index.NewKeySet(index.Uint64(o.id))
	},
	FromKey: index.Uint64,
	Unique:  true,
}

// benchOps succeeds at everything, one object or a batch at a time.
type benchOps struct{}

func (benchOps) Update(context.Context, statedb.ReadTxn, statedb.Revision, *benchObj) error {
	return nil
}
func (benchOps) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *benchObj) error {
	return nil
}
func (benchOps) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*benchObj, statedb.Revision]) error {
	return nil
}
func (benchOps) UpdateBatch(context.Context, statedb.ReadTxn, []BatchEntry[*benchObj]) {}
func (benchOps) DeleteBatch(context.Context, statedb.ReadTxn, []BatchEntry[*benchObj]) {}

// benchGroup collects the jobs Register adds; the benchmarks never run them.
type benchGroup struct{}

func (benchGroup) Add(...job.Job)                  {}
func (g benchGroup) Scoped(string) job.ScopedGroup { return g }

// newBenchReconciler registers a reconciler on a fresh table through
// Register, so that it is configured as in production, and returns its
// internals.
func newBenchReconciler(b testing.TB, batch bool, opts ...Option) *reconciler[*benchObj] {
	b.Helper()
	db, tbl := newBenchTable(b)
	var batchOps BatchOperations[*benchObj]
	if batch {
		batchOps = benchOps{}
	}
	r, err := Register(Params{DB: db, JobGroup: benchGroup{}}, tbl,
		(*benchObj).clone, benchSetStatus, benchGetStatus, benchOps{}, batchOps, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return r.(*reconciler[*benchObj])
}

// newBenchTable starts a database with one table of benchObj.
func newBenchTable(b testing.TB) (*statedb.DB, statedb.RWTable[*benchObj]) {
	b.Helper()
	db := statedb.New()
	if err := db.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Stop() })
	tbl, err := statedb.NewTable(db, "bench", benchIDIndex)
	if err != nil {
		b.Fatal(err)
	}
	return db, tbl
}

// insertPending writes objects 0..n-1 as Pending in one transaction.
func insertPending(r *reconciler[*benchObj], n int) {
	wtxn := r.db.WriteTxn(r.objects.Table)
	for i := range n {
		r.objects.Table.Insert(wtxn, &benchObj{id: uint64(i), st: status.Pending()})
	}
	wtxn.Commit()
}

func reportPerObject(b *testing.B, objects int) {
	elapsed := b.Elapsed()
	n := float64(b.N) * float64(objects)
	b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/object")
	b.ReportMetric(n/elapsed.Seconds(), "objects/s")
}

// BenchmarkRoundInline measures one whole round with one worker: read 1000
// pending changes, run the no-op operations, commit 1000 Done statuses and
// report.
// Writing the pending objects is not timed.
func BenchmarkRoundInline(b *testing.B) {
	for _, batch := range []bool{false, true} {
		b.Run(map[bool]string{false: "single", true: "batch"}[batch], func(b *testing.B) {
			benchRounds(b, batch)
		})
	}
}

// BenchmarkRoundPriority is BenchmarkRoundInline with WithPriority (four
// priorities, the default share): what queueing the changes and taking
// them by priority cost a round, per object.
func BenchmarkRoundPriority(b *testing.B) {
	benchRounds(b, false, WithPriority(func(o *benchObj) int { return int(o.id % 4) }, 0))
}

// BenchmarkRoundMetrics is BenchmarkRoundInline with each kind of metrics:
// the seed's four methods doing nothing (disabled) and expvar. The
// difference per object is what metrics cost a round, measured without the
// inserter and the scheduling that make the end-to-end overhead figure of
// go run ./benchmarks noisy. The Prometheus adapter, a module of its own,
// has BenchmarkReconcile, its share of the cost measured alone.
func BenchmarkRoundMetrics(b *testing.B) {
	for _, batch := range []bool{false, true} {
		for _, v := range []struct {
			name string
			new  func() metrics.Metrics
		}{
			{"disabled", func() metrics.Metrics { return benchNoMetrics{} }},
			{"expvar", func() metrics.Metrics { return metrics.NewUnpublishedExpVar() }},
		} {
			name := map[bool]string{false: "single", true: "batch"}[batch] + "/" + v.name
			b.Run(name, func(b *testing.B) {
				benchRounds(b, batch, WithMetrics(v.new()))
			})
		}
	}
}

// benchNoMetrics implements only the seed's four methods, doing nothing.
type benchNoMetrics struct{}

func (benchNoMetrics) ReconciliationDuration(cell.FullModuleID, string, string, time.Duration) {}
func (benchNoMetrics) ReconciliationErrors(cell.FullModuleID, string, int, int)                {}
func (benchNoMetrics) PruneError(cell.FullModuleID, string, error)                             {}
func (benchNoMetrics) PruneDuration(cell.FullModuleID, string, time.Duration)                  {}

// benchRounds runs whole rounds of benchRound pending objects, written
// untimed before each, and reports the time per object.
func benchRounds(b *testing.B, batch bool, opts ...Option) {
	r := newBenchReconciler(b, batch, opts...)
	if err := r.collect.Open(); err != nil {
		b.Fatal(err)
	}
	defer r.collect.Close()
	ctx := context.Background()
	health, _ := cell.NewSimpleHealth()
	r.resetRun(health)
	l := &loop[*benchObj]{r: r, exec: newExecutor(ctx, r)}
	for b.Loop() {
		b.StopTimer()
		insertPending(r, benchRound)
		b.StartTimer()
		// Two passes, as the loop does: the second reads this round's
		// own status writes, which it skips.
		for range 2 {
			l.round(ctx, false)
		}
	}
	reportPerObject(b, benchRound)
}
