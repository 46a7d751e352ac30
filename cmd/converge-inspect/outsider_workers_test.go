package main

// An outside reviewer's checks of the worker gauges: RoundStats.Workers
// and BusyWorkers, expvar "workers"/"busy_workers", the reconcilers
// table's Workers/BusyWorkers and converge-inspect's WORKERS/BUSY columns.

import (
	"context"
	"expvar"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/hivetest"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	convergeindex "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
	"github.com/converge-go/converge/tables"
)

// roundRecorder is metrics that keeps every RoundStats it is given, on top
// of unpublished expvar metrics.
type roundRecorder struct {
	*metrics.ExpVar
	mu     sync.Mutex
	rounds []metrics.RoundStats
}

func (r *roundRecorder) Round(m cell.FullModuleID, name string, s metrics.RoundStats) {
	r.ExpVar.Round(m, name, s)
	r.mu.Lock()
	r.rounds = append(r.rounds, s)
	r.mu.Unlock()
}

func (r *roundRecorder) all() []metrics.RoundStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]metrics.RoundStats(nil), r.rounds...)
}

// pool is an agent with one reconciler of n workers (module "pool"),
// batched or not, whose hive the test stops.
type pool struct {
	*agent
	h       *hive.Hive
	stopped bool
	rec     *roundRecorder
	key     string // metrics.Key of the reconciler
}

func startPool(t *testing.T, workers int, batch bool) *pool {
	t.Helper()
	p := &pool{rec: &roundRecorder{ExpVar: metrics.NewUnpublishedExpVar()}}
	a := &agent{t: t, tables: map[string]statedb.RWTable[*item]{}, faults: map[string]*reconcilertest.FaultyOps[*item]{},
		recs: map[string]reconciler.Reconciler[*item]{}, token: testToken, dir: t.TempDir()}
	p.agent = a
	p.h = hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth), tables.Cell,
		cell.Invoke(func(db *statedb.DB, i statedb.Table[*tables.Info], r statedb.Table[*tables.RetryInfo]) {
			a.db, a.infos, a.retries = db, i, r
		}),
		cell.Module("pool", "Pool",
			cell.ProvidePrivate(job.Registry.NewGroup),
			cell.Invoke(func(params reconciler.Params) error {
				table, err := statedb.NewTable(params.DB, "pool-items", itemID, convergeindex.NewStatusIndex((*item).getStatus))
				if err != nil {
					return err
				}
				ops := reconcilertest.NewFaultyOps(itemKey, reconcilertest.NewTarget(itemKey, itemKey), nil)
				a.tables["pool"], a.faults["pool"] = table, ops
				var bops reconciler.BatchOperations[*item]
				if batch {
					bops = ops.Batch()
				}
				p.key = metrics.Key(params.ModuleID, "")
				a.recs["pool"], err = reconciler.Register(params, table, (*item).clone, (*item).setStatus, (*item).getStatus, ops, bops,
					reconciler.WithConcurrency(workers), reconciler.WithMetrics(p.rec),
					reconciler.WithRetry(20*time.Millisecond, 200*time.Millisecond))
				return err
			})))
	log := hivetest.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, p.h.Start(log, ctx))
	t.Cleanup(func() { p.stop() })
	handler := http.StripPrefix("/statedb", a.db.HTTPHandler())
	a.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+a.token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		a.server.CloseClientConnections()
		a.server.Close()
	})
	a.url = a.server.URL + "/statedb"
	require.NoError(t, os.WriteFile(filepath.Join(a.dir, "token"), []byte(a.token+"\n"), 0o600))
	return p
}

func (p *pool) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(p.t, p.h.Stop(hivetest.Logger(p.t), ctx))
}

// hold makes every Update wait until release.
func (p *pool) hold() {
	p.t.Helper()
	require.NoError(p.t, p.faults["pool"].Inject(reconcilertest.Fault{Mode: reconcilertest.ModeDelay, Op: reconcilertest.OpUpdate}))
}

func (p *pool) release() { p.faults["pool"].Clear("") }

// waitRunningCalls waits until n calls of the operations are in flight
// (for batches: n distinct batch calls).
func (p *pool) waitRunningCalls(n int) {
	p.t.Helper()
	deadline := time.After(waitFor)
	for {
		calls, watch := p.faults["pool"].InFlightWatch()
		distinct := map[string]bool{}
		for _, c := range calls {
			if c.Batch != 0 {
				distinct[fmt.Sprint("batch", c.Batch)] = true
			} else {
				distinct[fmt.Sprint("key", c.Key)] = true
			}
		}
		if len(distinct) == n {
			return
		}
		select {
		case <-watch:
		case <-deadline:
			p.t.Fatalf("timed out waiting for %d running calls; in flight: %v", n, calls)
		}
	}
}

// waitKeysInFlight waits until the operations of n objects are in flight,
// in batches or not.
func (p *pool) waitKeysInFlight(n int) {
	p.t.Helper()
	deadline := time.After(waitFor)
	for {
		calls, watch := p.faults["pool"].InFlightWatch()
		keys := map[string]bool{}
		for _, c := range calls {
			if c.Op == reconcilertest.OpUpdate {
				keys[c.Key] = true
			}
		}
		if len(keys) == n {
			return
		}
		select {
		case <-watch:
		case <-deadline:
			p.t.Fatalf("timed out waiting for %d objects in flight; in flight: %v", n, calls)
		}
	}
}

func (p *pool) expvarInt(m *expvar.Map) string {
	v := m.Get(p.key)
	if v == nil {
		return "<none>"
	}
	return v.String()
}

func (p *pool) info() *tables.Info {
	info, _, _ := p.infos.Get(p.db.ReadTxn(), tables.InfoByID.Query("pool"))
	return info
}

// With N workers and operations held running, every gauge says how many
// workers are busy; once they finish, zero.
func TestOutsiderBusyWorkersHeld(t *testing.T) {
	p := startPool(t, 4, false)
	p.hold()
	p.insert("pool", "a", "b", "c")
	p.waitRunningCalls(3)
	p.waitInfo("pool", "three in flight", func(i *tables.Info) bool { return i.Workers == 4 && i.InFlight == 3 })
	require.Equal(t, "4", p.expvarInt(p.rec.WorkersVar))
	require.LessOrEqual(t, p.info().BusyWorkers, 3)

	code, stdout, stderr := runInspect(t, nil, p.args()...)
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^pool +running +3 +0 +3 +4 +[0-3] `, stdout)

	p.release()
	p.waitInfo("pool", "no busy workers", func(i *tables.Info) bool {
		return i.Workers == 4 && i.BusyWorkers == 0 && i.InFlight == 0 && i.Succeeded == 3
	})
	require.Equal(t, "0", p.expvarInt(p.rec.BusyWorkersVar))
	for _, s := range p.rec.all() {
		require.LessOrEqual(t, s.BusyWorkers, s.Workers, "%+v", s)
		require.LessOrEqual(t, s.BusyWorkers, s.InFlight, "%+v", s)
	}
}

// More operations than workers, held: busy workers are the workers, not
// the operations.
func TestOutsiderBusyWorkersSaturated(t *testing.T) {
	p := startPool(t, 2, false)
	p.hold()
	p.insert("pool", "a", "b", "c", "d", "e")
	p.waitRunningCalls(2)
	// That the figure reaches 2 is TestOutsiderBusyWorkersWhileHeldRunning's
	// matter; here, that it never exceeds the workers.
	p.waitInfo("pool", "five in flight", func(i *tables.Info) bool { return i.InFlight == 5 })
	for _, s := range p.rec.all() {
		require.LessOrEqual(t, s.BusyWorkers, s.Workers, "%+v", s)
	}
	p.release()
	p.waitInfo("pool", "done", func(i *tables.Info) bool {
		return i.BusyWorkers == 0 && i.InFlight == 0 && i.Succeeded == 5
	})
}

// With batches, a busy worker runs a batch: the gauge counts workers.
func TestOutsiderBusyWorkersBatches(t *testing.T) {
	p := startPool(t, 2, true)
	p.hold()
	p.insert("pool", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	p.waitRunningCalls(2)
	p.waitInfo("pool", "ten in flight", func(i *tables.Info) bool { return i.Workers == 2 && i.InFlight == 10 })
	require.LessOrEqual(t, p.info().BusyWorkers, 2)
	for _, s := range p.rec.all() {
		require.LessOrEqual(t, s.BusyWorkers, s.Workers, "%+v", s)
	}
	p.release()
	p.waitInfo("pool", "done", func(i *tables.Info) bool {
		return i.BusyWorkers == 0 && i.InFlight == 0 && i.Succeeded == 10
	})
	require.Equal(t, "0", p.expvarInt(p.rec.BusyWorkersVar))
}

// One worker: Workers 1, BusyWorkers always zero, before, during and after.
func TestOutsiderOneWorker(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			p := startPool(t, 1, batch)
			p.waitInfo("pool", "a row", func(i *tables.Info) bool { return i.Workers == 1 })
			p.hold()
			p.insert("pool", "a", "b")
			p.waitRunningCalls(1)
			p.release()
			p.waitInfo("pool", "done", func(i *tables.Info) bool { return i.Succeeded == 2 && i.InFlight == 0 })
			require.Equal(t, "1", p.expvarInt(p.rec.WorkersVar))
			require.Equal(t, "0", p.expvarInt(p.rec.BusyWorkersVar))
			for _, s := range p.rec.all() {
				require.Equal(t, 1, s.Workers, "%+v", s)
				require.Zero(t, s.BusyWorkers, "%+v", s)
			}
		})
	}
}

// Stopping the hive while operations are held: they are cancelled, and the
// gauges left behind say nothing runs (the row says stopped). Whether the
// loop runs one more round as the cancelled operations return is a race,
// so each case runs five times: any of them may show the stale gauge.
func TestOutsiderBusyWorkersAfterStop(t *testing.T) {
	for i, batch := range []bool{false, false, false, false, false, true, true, true, true, true} {
		t.Run(fmt.Sprintf("batch=%v/%d", batch, i), func(t *testing.T) {
			p := startPool(t, 3, batch)
			p.hold()
			p.insert("pool", "a", "b", "c")
			p.waitKeysInFlight(3)
			p.waitInfo("pool", "busy", func(i *tables.Info) bool { return i.BusyWorkers > 0 })
			p.stop()
			info := p.info()
			t.Logf("after stop: %+v", info)
			require.Equal(t, tables.StateStopped, info.State)
			require.Zero(t, info.BusyWorkers, "no worker runs once the hive stopped")
			require.Zero(t, info.InFlight, "no operation is in flight once the hive stopped")
			rounds := p.rec.all()
			t.Logf("after stop: expvar busy_workers %s, in-flight %s; last RoundStats %+v", p.expvarInt(p.rec.BusyWorkersVar),
				p.expvarInt(p.rec.QueueInFlightVar), rounds[len(rounds)-1])
			require.Equal(t, "0", p.expvarInt(p.rec.BusyWorkersVar), "expvar busy_workers after the stop")

			// converge-inspect against the stopped agent: stopped, exit 0.
			code, stdout, stderr := runInspect(t, nil, p.args()...)
			t.Logf("inspect: %d\n%s%s", code, stdout, stderr)
			require.Equal(t, exitHealthy, code, stderr)
			require.Regexp(t, `(?m)^pool +stopped +3 +0 +0 +3 +0 `, stdout)
		})
	}
}

// docs/observability.md: "`workers` and `busy_workers` give the workers
// configured and those running an operation" (converge_active_workers
// likewise). Sometimes the round that hands operations out takes its
// figures before the workers have picked them up (BusyWorkers below the
// operations in flight). With three operations held running, the gauges
// must still come to say three while they run. The scenario runs a hundred
// times; whenever the round lost that race, the test waits, up to waitFor,
// for the row and expvar to say three. Often a later round (for some other
// reason) corrects them; sometimes none comes, and they stay wrong.
func TestOutsiderBusyWorkersWhileHeldRunning(t *testing.T) {
	for i := range 100 {
		p := startPool(t, 4, false)
		p.hold()
		p.insert("pool", "a", "b", "c")
		p.waitRunningCalls(3)
		p.waitInfo("pool", "three in flight", func(i *tables.Info) bool { return i.InFlight == 3 })
		if p.info().BusyWorkers == 3 {
			p.release()
			p.stop()
			continue
		}
		t.Logf("iteration %d: three operations running, row says BusyWorkers %d; waiting for it to say 3", i, p.info().BusyWorkers)
		p.waitInfo("pool", "three busy workers while three operations run", func(i *tables.Info) bool { return i.BusyWorkers == 3 })
		require.Equal(t, "3", p.expvarInt(p.rec.BusyWorkersVar))
		p.release()
		p.stop()
	}
}

// RoundStats: "UnfinishedWork is the sum, over the operations running
// now, of how long each has been running", LongestRunning "how long the
// longest running operation has been running": never negative, and the
// sum is at least its largest term. An operation that starts as the round
// takes its figures must not count a negative time.
func TestOutsiderUnfinishedWorkNeverNegative(t *testing.T) {
	var bad []metrics.RoundStats
	for i := range 100 {
		p := startPool(t, 4, false)
		p.hold()
		p.insert("pool", "a", "b", "c")
		p.waitRunningCalls(3)
		p.waitInfo("pool", "three in flight", func(i *tables.Info) bool { return i.InFlight == 3 })
		p.release()
		p.waitInfo("pool", "done", func(i *tables.Info) bool { return i.InFlight == 0 && i.Succeeded == 3 })
		p.stop()
		for _, s := range p.rec.all() {
			if s.UnfinishedWork < 0 || s.LongestRunning < 0 || s.UnfinishedWork < s.LongestRunning {
				bad = append(bad, s)
			}
		}
		_ = i
	}
	require.Empty(t, bad, "rounds with a negative running time, or a sum below its largest term")
}

// Paused with operations running: they finish and are recorded; the
// gauges come back to zero busy while paused.
func TestOutsiderBusyWorkersPaused(t *testing.T) {
	p := startPool(t, 4, false)
	p.hold()
	p.insert("pool", "a", "b", "c")
	p.waitRunningCalls(3)
	p.recs["pool"].Pause()
	p.release()
	p.waitInfo("pool", "paused, none busy", func(i *tables.Info) bool {
		return i.State == tables.StatePaused && i.BusyWorkers == 0 && i.InFlight == 0 && i.Succeeded == 3
	})
	require.Equal(t, "0", p.expvarInt(p.rec.BusyWorkersVar))
	code, stdout, stderr := runInspect(t, nil, p.args()...)
	require.Equal(t, exitHealthy, code, stderr)
	require.Regexp(t, `(?m)^pool +paused +3 +0 +0 +4 +0 `, stdout)
	p.recs["pool"].Resume()
}
