package reconciler_test

// TestScale reconciles a million objects, 1% failing permanently, and
// reports throughput and round time with and without them waiting for a
// retry, the heap in use, and the size of the Degraded health report. It
// needs a few GB and a minute, so it runs only with CONVERGE_SCALE set:
//
//	CONVERGE_SCALE=1 go test -run TestScale -v -timeout 30m ./reconciler/
//
// CONVERGE_SCALE_OBJECTS=N changes the number of objects (default 1000000).

import (
	"cmp"
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
	rounds, failing atomic.Int64
}

func (m *roundMetrics) ReconciliationErrors(id cell.FullModuleID, name string, new, current int) {
	m.rounds.Add(1)
	m.failing.Store(int64(current))
	m.ExpVar.ReconciliationErrors(id, name, new, current)
}

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
	n, err := strconv.Atoi(cmp.Or(os.Getenv("CONVERGE_SCALE_OBJECTS"), "1000000"))
	require.NoError(t, err)
	for _, v := range []variant{{1, false}, {1, true}, {4, false}} {
		t.Run(v.String(), func(t *testing.T) { runScale(t, n, v) })
	}
}

// writeScale inserts the objects i in [0, to) for which which(i) with
// value(i), Pending, in transactions of 10,000; it returns how many.
func writeScale(t *testing.T, db *statedb.DB, table statedb.RWTable[*item], to int, which func(i int) bool, value func(i int) string) (rev statedb.Revision, written int) {
	for lo := 0; lo < to; lo += 10_000 {
		wtxn := db.WriteTxn(table)
		for i := lo; i < min(lo+10_000, to); i++ {
			if which(i) {
				_, _, err := table.Insert(wtxn, &item{ID: fmt.Sprintf("o%07d", i), Value: value(i), Status: status.Pending()})
				require.NoError(t, err)
				written++
			}
		}
		rev = table.Revision(wtxn)
		wtxn.Commit()
	}
	return rev, written
}

func runScale(t *testing.T, n int, v variant) {
	failing, increment := n/100, n/10
	all := func(int) bool { return true }
	isFailing := func(i int) bool { return i%100 == 0 }
	// The heap that the objects take in a table alone, for comparison.
	before := heapAlloc()
	db := statedb.New()
	require.NoError(t, db.Start())
	table, err := statedb.NewTable(db, "items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
	require.NoError(t, err)
	writeScale(t, db, table, n, all, func(int) string { return "v1" })
	alone := heapAlloc() - before
	runtime.KeepAlive(table)
	db.Stop()

	// A target that keeps nothing, so that the heap is the reconciler's; it
	// fails objects whose value is "fail" while failOn is set.
	before = heapAlloc()
	var failOn atomic.Bool
	failOn.Store(true)
	ops := newTarget()
	ops.Target = nil
	ops.update = func(_ context.Context, it *item) error {
		if it.Value == "fail" && failOn.Load() {
			return errors.New("permanently failing")
		}
		return nil
	}
	m := &roundMetrics{ExpVar: metrics.NewUnpublishedExpVar()}
	f := v.start(t, ops, nil, reconciler.WithMetrics(m), reconciler.WithRetry(10*time.Millisecond, 2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// write writes, waits until the reconciler has handled the objects and
	// logs the rate, which it returns.
	write := func(label string, to int, which func(i int) bool, value func(i int) string) float64 {
		rounds, start := m.rounds.Load(), time.Now()
		rev, written := writeScale(t, f.db, f.table, to, which, value)
		_, _, err := f.rec.WaitUntilReconciled(ctx, rev)
		require.NoError(t, err)
		took, rounds := time.Since(start), m.rounds.Load()-rounds
		t.Logf("%s: %d objects in %s (%.0f objects/s), %d rounds (%s per round), %d failing", label, written,
			took.Round(time.Millisecond), float64(written)/took.Seconds(), rounds, (took / time.Duration(max(rounds, 1))).Round(time.Microsecond), m.failing.Load())
		return float64(written) / took.Seconds()
	}
	write("initial", n, all, func(i int) string { return map[bool]string{true: "fail", false: "v1"}[isFailing(i)] })
	require.Eventually(t, func() bool { return m.failing.Load() == int64(failing) }, time.Minute, 10*time.Millisecond,
		"failing objects: %d, want %d", m.failing.Load(), failing)
	assert.Equal(t, failing, f.countKind(f.db.ReadTxn(), status.KindError))
	assert.Equal(t, n-failing, f.countKind(f.db.ReadTxn(), status.KindDone))
	heap := heapAlloc()
	t.Logf("heap after reconciling %d objects (%d failing): %.1f MiB, %.0f bytes/object (%.1f MiB before start); the table alone: %.1f MiB, %.0f bytes/object",
		n, failing, float64(heap)/(1<<20), float64(heap-before)/float64(n), float64(before)/(1<<20), float64(alone)/(1<<20), float64(alone)/float64(n))

	// Health lists at most 10 errors and counts the rest. With workers, a
	// few failing objects may be in flight rather than waiting for a retry.
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
	var errs, listed, omitted int
	_, err = fmt.Sscanf(reason, "%d error(s): %d object(s) failing", &errs, &listed)
	require.NoError(t, err, "health reason %q", reason)
	assert.GreaterOrEqual(t, listed, failing-v.workers)
	assert.LessOrEqual(t, listed, failing)
	assert.Equal(t, listed, errs, "nothing but objects fails")
	require.Len(t, lines, 11)
	_, err = fmt.Sscanf(lines[10], "%d more error(s) omitted", &omitted)
	require.NoError(t, err, "last line %q", lines[10])
	assert.Equal(t, listed-10, omitted)
	assert.Less(t, len(msg), 2000)

	// Updates of 10% of the objects, with and without 1% waiting for retry:
	// the best of three each.
	measure := func(label string) (best float64) {
		for attempt := range 3 {
			best = max(best, write(label, increment, func(i int) bool { return !isFailing(i) }, func(int) string { return fmt.Sprint(label, ".", attempt) }))
		}
		return best
	}
	withFailing := measure("with failing")
	failOn.Store(false) // heal: the failing objects succeed once they change
	writeScale(t, f.db, f.table, n, isFailing, func(int) string { return "fail" })
	require.NoError(t, reconciler.WaitForReconciliation(ctx, f.db, f.table, f.index))
	require.Eventually(t, func() bool {
		h.Lock()
		defer h.Unlock()
		return h.Level == cell.StatusOK && m.failing.Load() == 0
	}, time.Minute, 10*time.Millisecond, "health did not recover")
	assert.Zero(t, f.countKind(f.db.ReadTxn(), status.KindError))
	withoutFailing := measure("without failing")
	t.Logf("throughput with %d failing / without: %.0f / %.0f objects/s = %.2f", failing, withFailing, withoutFailing, withFailing/withoutFailing)
	assert.Greater(t, withFailing, withoutFailing/3, "throughput collapses with %d objects failing", failing)
	f.stop()
}
