package reconciler_test

// Claim 6 of the guarantee review: the health tree has
// job-reconcile-<name> and job-refresh-<name> (refreshing off included),
// and metrics.RoundStats.Depth counts versions parked behind an operation
// in flight.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
)

// Health children as the StateDB reconciler names them, with refreshing
// off, for an unnamed and a named reconciler, and the dependency job's.
func TestGuaranteeHealthTree(t *testing.T) {
	for _, name := range []string{"", "foo"} {
		for _, refresh := range []bool{false, true} {
			t.Run(fmt.Sprintf("name=%q,refresh=%v", name, refresh), func(t *testing.T) {
				var opts []reconciler.Option
				if name != "" {
					opts = append(opts, reconciler.WithName(name))
				}
				if refresh {
					opts = append(opts, reconciler.WithRefreshing(time.Hour, nil))
				}
				cfg := o30Config{opts: opts, setup: func(db *statedb.DB, _ statedb.RWTable[*o30Obj]) []reconciler.Option {
					deps, err := o30NewTable(db, "o30-deps")
					require.NoError(t, err)
					return []reconciler.Option{reconciler.WithDependency(deps, func(d *o30Obj, _ bool) []statedb.Query[*o30Obj] {
						return []statedb.Query[*o30Obj]{o30ByID.Query(d.ID)}
					})}
				}}
				e := newO30Env(t, newO30Target(), cfg)
				e.start()
				e.put(&o30Obj{ID: "a", Value: "1"})
				e.settle()
				suffix := ""
				if name != "" {
					suffix = "-" + name
				}
				for _, child := range []string{"job-reconcile" + suffix, "job-refresh" + suffix, "job-dependency-o30-deps" + suffix} {
					o30WaitHealth(t, e.health, child)
				}
				e.stop()
			})
		}
	}
}

// o30WaitHealth waits for the health child to exist and report a level.
func o30WaitHealth(t *testing.T, h *cell.SimpleHealth, child string) {
	t.Helper()
	// SimpleHealth has no watch channel: poll, with a deadline.
	require.Eventually(t, func() bool { return h.GetChild(child) != nil }, 10*time.Second, 5*time.Millisecond,
		"no health child %q", child)
}

// o30RoundRecorder records RoundStats.
type o30RoundRecorder struct {
	mu     sync.Mutex
	rounds []metrics.RoundStats
	ch     chan struct{}
}

func (r *o30RoundRecorder) ReconciliationDuration(cell.FullModuleID, string, string, time.Duration) {}
func (r *o30RoundRecorder) ReconciliationErrors(cell.FullModuleID, string, int, int)                {}
func (r *o30RoundRecorder) PruneError(cell.FullModuleID, string, error)                             {}
func (r *o30RoundRecorder) PruneDuration(cell.FullModuleID, string, time.Duration)                  {}
func (r *o30RoundRecorder) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) {
	r.mu.Lock()
	r.rounds = append(r.rounds, s)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *o30RoundRecorder) last() (metrics.RoundStats, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rounds) == 0 {
		return metrics.RoundStats{}, 0
	}
	return r.rounds[len(r.rounds)-1], len(r.rounds)
}

// waitFor waits for a round whose stats satisfy ok.
func (r *o30RoundRecorder) waitFor(t *testing.T, what string, ok func(metrics.RoundStats) bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	seen := 0
	for {
		r.mu.Lock()
		rounds := r.rounds[seen:]
		seen = len(r.rounds)
		for _, s := range rounds {
			if ok(s) {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
		select {
		case <-r.ch:
		case <-deadline.C:
			last, n := r.last()
			t.Fatalf("%s: no such round within 10s; %d rounds, last %+v", what, n, last)
		}
	}
}

// o30Gate holds updates of chosen IDs until released.
type o30Gate struct {
	mu      sync.Mutex
	held    map[string]chan struct{}
	entered chan string
}

func newO30Gate(ids ...string) *o30Gate {
	g := &o30Gate{held: map[string]chan struct{}{}, entered: make(chan string, 100)}
	for _, id := range ids {
		g.held[id] = make(chan struct{})
	}
	return g
}

func (g *o30Gate) hook(ctx context.Context, o *o30Obj) error {
	g.mu.Lock()
	ch := g.held[o.ID]
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	g.entered <- o.ID
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *o30Gate) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, ch := range g.held {
		close(ch)
		delete(g.held, id)
	}
}

func (g *o30Gate) waitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("operations did not enter the gate")
		}
	}
}

// Newer versions and deletes parked behind operations in flight count in
// Depth; so do operations waiting for a worker.
func TestGuaranteeRoundDepthCountsParked(t *testing.T) {
	rec := &o30RoundRecorder{ch: make(chan struct{}, 1)}
	gate := newO30Gate("a", "b", "c")
	tgt := newO30Target()
	tgt.beforeUpdate = gate.hook
	e := newO30Env(t, tgt, o30Config{opts: []reconciler.Option{
		reconciler.WithConcurrency(4), reconciler.WithMetrics(rec), reconciler.WithPruning(0),
	}})
	e.start()
	e.put(&o30Obj{ID: "a", Value: "1"}, &o30Obj{ID: "b", Value: "1"}, &o30Obj{ID: "c", Value: "1"})
	gate.waitEntered(t, 3)
	rec.waitFor(t, "three in flight", func(s metrics.RoundStats) bool { return s.InFlight == 3 })

	// a: two newer versions (the second replaces the first), b: one newer
	// version, c: a delete. Three operations parked.
	e.put(&o30Obj{ID: "a", Value: "2"})
	e.put(&o30Obj{ID: "a", Value: "3"}, &o30Obj{ID: "b", Value: "2"})
	e.del("c")
	rec.waitFor(t, "three parked", func(s metrics.RoundStats) bool { return s.Depth == 3 && s.InFlight == 3 })

	gate.releaseAll()
	e.settle()
	rec.waitFor(t, "nothing parked", func(s metrics.RoundStats) bool { return s.Depth == 0 && s.InFlight == 0 })
	_, ok := tgt.get("c")
	require.False(t, ok)
	v, _ := tgt.get("a")
	require.Equal(t, "3", v)
	e.stop()
}

// With every worker busy, operations of other objects wait for a worker
// and count in Depth.
func TestGuaranteeRoundDepthCountsWaitingForWorker(t *testing.T) {
	rec := &o30RoundRecorder{ch: make(chan struct{}, 1)}
	gate := newO30Gate("a", "b")
	tgt := newO30Target()
	tgt.beforeUpdate = gate.hook
	e := newO30Env(t, tgt, o30Config{opts: []reconciler.Option{
		reconciler.WithConcurrency(2), reconciler.WithMetrics(rec), reconciler.WithPruning(0),
	}})
	e.start()
	e.put(&o30Obj{ID: "a", Value: "1"}, &o30Obj{ID: "b", Value: "1"})
	gate.waitEntered(t, 2)
	e.put(&o30Obj{ID: "c", Value: "1"}, &o30Obj{ID: "d", Value: "1"})
	rec.waitFor(t, "two waiting for a worker", func(s metrics.RoundStats) bool { return s.Depth == 2 })
	gate.releaseAll()
	e.settle()
	e.requireConverged("after the release")
	e.stop()
}
