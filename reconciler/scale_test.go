package reconciler_test

// TestScale reconciles a million objects of which 1% fail permanently, and
// reports figures: throughput and round time with and without 10,000
// objects waiting for a retry, heap in use after reconciliation, and the
// size of the Degraded health report. It is skipped unless CONVERGE_SCALE is
// set, as it needs a few GB of memory and a minute or so:
//
//	CONVERGE_SCALE=1 go test -run TestScale -v -timeout 30m ./reconciler/
//
// CONVERGE_SCALE_OBJECTS=N changes the number of objects (default 1000000).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// roundMetrics counts rounds: the reconciler reports errors once per round.
type roundMetrics struct {
	*metrics.ExpVar
	rounds  atomic.Int64
	failing atomic.Int64
}

func (m *roundMetrics) ReconciliationErrors(id cell.FullModuleID, name string, new, current int) {
	m.rounds.Add(1)
	m.failing.Store(int64(current))
	m.ExpVar.ReconciliationErrors(id, name, new, current)
}

var errScale = errors.New("permanently failing")

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func TestScale(t *testing.T) {
	if os.Getenv("CONVERGE_SCALE") == "" {
		t.Skip("set CONVERGE_SCALE=1 to reconcile a million objects")
	}
	n := 1_000_000
	if s := os.Getenv("CONVERGE_SCALE_OBJECTS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	for _, cfg := range []struct {
		name    string
		workers int
		batch   bool
	}{
		{"workers=1-single", 1, false},
		{"workers=1-batch", 1, true},
		{"workers=4-single", 4, false},
	} {
		t.Run(cfg.name, func(t *testing.T) { runScale(t, n, cfg.workers, cfg.batch) })
	}
}

// tableHeap returns the heap that n objects take in a table with the same
// indexes and no reconciler, for comparison.
func tableHeap(t *testing.T, n int) uint64 {
	before := heapAlloc()
	db := statedb.New()
	require.NoError(t, db.Start())
	defer db.Stop()
	table, err := statedb.NewTable(db, "items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
	require.NoError(t, err)
	for lo := 0; lo < n; lo += 10_000 {
		wtxn := db.WriteTxn(table)
		for i := lo; i < min(lo+10_000, n); i++ {
			_, _, err := table.Insert(wtxn, &item{ID: fmt.Sprintf("o%07d", i), Value: "v1", Status: status.Done()})
			require.NoError(t, err)
		}
		wtxn.Commit()
	}
	used := heapAlloc() - before
	runtime.KeepAlive(table)
	return used
}

func runScale(t *testing.T, n, workers int, batch bool) {
	const txnSize = 10_000
	failing := n / 100
	increment := n / 10

	alone := tableHeap(t, n)
	before := heapAlloc()
	// A target that keeps nothing, so that the heap is the reconciler's;
	// it fails objects whose value is "fail" while failOn is set.
	var failOn atomic.Bool
	failOn.Store(true)
	ops := newTarget()
	ops.Target = nil
	ops.update = func(_ context.Context, it *item) error {
		if it.Value == "fail" && failOn.Load() {
			return errScale
		}
		return nil
	}
	w := &with{}
	if batch {
		w.batch = ops
	}
	m := &roundMetrics{ExpVar: metrics.NewUnpublishedExpVar()}
	f := startFixture(t, ops, w,
		reconciler.WithMetrics(m),
		reconciler.WithConcurrency(workers),
		reconciler.WithRetry(10*time.Millisecond, 2*time.Second),
		reconciler.WithPruning(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	id := func(i int) string { return fmt.Sprintf("o%07d", i) }
	// write writes objects from..to-1 (skipping the failing ones if
	// skipFailing) with value, in transactions of txnSize, and waits until
	// the reconciler has handled them. It returns the time taken and the
	// number of rounds.
	write := func(from, to int, value func(i int) string, skipFailing bool) (time.Duration, int64, int) {
		rounds := m.rounds.Load()
		start := time.Now()
		var rev statedb.Revision
		written := 0
		for lo := from; lo < to; lo += txnSize {
			wtxn := f.db.WriteTxn(f.table)
			for i := lo; i < min(lo+txnSize, to); i++ {
				if skipFailing && i%100 == 0 {
					continue
				}
				_, _, err := f.table.Insert(wtxn, &item{ID: id(i), Value: value(i), Status: status.Pending()})
				require.NoError(t, err)
				written++
			}
			rev = f.table.Revision(wtxn)
			wtxn.Commit()
		}
		_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
		require.NoError(t, err)
		return time.Since(start), m.rounds.Load() - rounds, written
	}
	valueOf := func(round string) func(int) string {
		return func(i int) string {
			if i%100 == 0 {
				return "fail"
			}
			return round
		}
	}

	// Initial reconciliation of n objects, 1% failing permanently.
	took, rounds, written := write(0, n, valueOf("v1"), false)
	t.Logf("initial: %d objects reconciled in %s (%.0f objects/s), %d rounds (%s per round)",
		written, took.Round(time.Millisecond), float64(written)/took.Seconds(), rounds, (took / time.Duration(max(rounds, 1))).Round(time.Microsecond))
	require.Eventually(t, func() bool { return m.failing.Load() == int64(failing) }, time.Minute, 10*time.Millisecond,
		"failing objects: %d, want %d", m.failing.Load(), failing)
	errored := f.countKind(f.db.ReadTxn(), status.KindError)
	done := f.countKind(f.db.ReadTxn(), status.KindDone)
	assert.Equal(t, failing, errored)
	assert.Equal(t, n-failing, done)

	heap := heapAlloc()
	t.Logf("heap after reconciling %d objects (%d failing): %.1f MiB, %.0f bytes/object (%.1f MiB before start); the table alone: %.1f MiB, %.0f bytes/object",
		n, failing, float64(heap)/(1<<20), float64(heap-before)/float64(n), float64(before)/(1<<20),
		float64(alone)/(1<<20), float64(alone)/float64(n))

	// Health lists at most 10 errors and counts the rest.
	h := f.health.GetChild("job-reconcile")
	require.NotNil(t, h)
	h.Lock()
	level, reason, herr := h.Level, h.Status, h.Error
	h.Unlock()
	require.Equal(t, cell.StatusDegraded, level)
	require.Error(t, herr)
	msg := herr.Error()
	lines := strings.Split(msg, "\n")
	t.Logf("health: %s %q; error of %d bytes in %d lines, ending %q", level, reason, len(msg), len(lines), lines[len(lines)-1])
	// With workers, a few failing objects may be in flight rather than
	// waiting for their retry, and so not counted.
	var errs, listed, omitted int
	_, err := fmt.Sscanf(reason, "%d error(s): %d object(s) failing", &errs, &listed)
	require.NoError(t, err, "health reason %q", reason)
	assert.GreaterOrEqual(t, listed, failing-workers)
	assert.LessOrEqual(t, listed, failing)
	assert.Equal(t, listed, errs, "nothing but objects fails")
	require.Len(t, lines, 11)
	_, err = fmt.Sscanf(lines[10], "%d more error(s) omitted", &omitted)
	require.NoError(t, err, "last line %q", lines[10])
	assert.Equal(t, listed-10, omitted)
	assert.Less(t, len(msg), 2000)

	// Incremental updates of 10% of the objects, with 1% waiting for retry.
	measure := func(label string) float64 {
		best := 0.0
		for attempt := range 3 {
			took, rounds, written := write(0, increment, func(i int) string { return fmt.Sprintf("%s.%d", label, attempt) }, true)
			rate := float64(written) / took.Seconds()
			t.Logf("%s: %d updates in %s (%.0f objects/s), %d rounds (%s per round), %d failing",
				label, written, took.Round(time.Millisecond), rate, rounds,
				(took / time.Duration(max(rounds, 1))).Round(time.Microsecond), m.failing.Load())
			best = max(best, rate)
		}
		return best
	}
	withFailing := measure("with failing")

	// Heal: the failing objects succeed once they change.
	failOn.Store(false)
	var ids []int
	for i := 0; i < n; i += 100 {
		ids = append(ids, i)
	}
	for lo := 0; lo < len(ids); lo += txnSize {
		wtxn := f.db.WriteTxn(f.table)
		for _, i := range ids[lo:min(lo+txnSize, len(ids))] {
			_, _, err := f.table.Insert(wtxn, &item{ID: id(i), Value: "fail", Status: status.Pending()})
			require.NoError(t, err)
		}
		wtxn.Commit()
	}
	require.NoError(t, reconciler.WaitForReconciliation(ctx, f.db, f.table, f.index))
	require.Eventually(t, func() bool {
		h.Lock()
		defer h.Unlock()
		return h.Level == cell.StatusOK && m.failing.Load() == 0
	}, time.Minute, 10*time.Millisecond, "health did not recover")
	errored = f.countKind(f.db.ReadTxn(), status.KindError)
	assert.Zero(t, errored)

	withoutFailing := measure("without failing")
	t.Logf("throughput with %d failing / without: %.0f / %.0f objects/s = %.2f", failing, withFailing, withoutFailing, withFailing/withoutFailing)
	assert.Greater(t, withFailing, withoutFailing/3, "throughput collapses with %d objects failing", failing)
	f.stop()
}
