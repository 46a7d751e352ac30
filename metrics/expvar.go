package metrics

import (
	"expvar"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/hive/cell"
)

// ExpVar implements [Metrics] and [QueueMetrics] with expvar maps. Each map
// is keyed by "<module ID>" or "<module ID>/<name>" (with "/<operation>"
// appended for durations and operation counts). Durations are in seconds.
//
// The zero ExpVar is not usable; build one with [NewExpVar] or
// [NewUnpublishedExpVar]. Its methods are safe for concurrent use.
type ExpVar struct {
	root *expvar.Map

	ReconciliationCountVar         *expvar.Map // rounds that ran operations
	ReconciliationDurationVar      *expvar.Map // total seconds per operation
	ReconciliationOperationsVar    *expvar.Map // operation (or batch) count per operation
	ReconciliationTotalErrorsVar   *expvar.Map // failed operations since start
	ReconciliationCurrentErrorsVar *expvar.Map // objects failing now

	PruneCountVar         *expvar.Map // prunes run
	PruneDurationVar      *expvar.Map // total seconds pruning
	PruneTotalErrorsVar   *expvar.Map // failed prunes since start
	PruneCurrentErrorsVar *expvar.Map // 1 if the last prune failed, else 0

	QueueRetryingVar          *expvar.Map // objects waiting for a retry
	QueueInFlightVar          *expvar.Map // operations started, not yet committed
	ConvergenceCountVar       *expvar.Map // objects that reached Done
	ConvergenceDurationVar    *expvar.Map // total seconds from Pending to Done
	ConvergenceMaxDurationVar *expvar.Map // longest seconds from Pending to Done

	// convergenceMaxMu serialises the read-compare-write of the maximum.
	// Instances that share ConvergenceMaxDurationVar (every published one)
	// must share the mutex too, or two of them could both see no figure
	// (or a smaller one) and the smaller report would overwrite the larger.
	convergenceMaxMu *sync.Mutex

	// counters caches, per reconciler and operation, the pair of variables
	// that the frequent calls add to.
	counters counterCache
}

var (
	_ Metrics      = (*ExpVar)(nil)
	_ QueueMetrics = (*ExpVar)(nil)
)

// Names of the expvar variables, as published by [NewExpVar].
var varNames = []string{
	"reconciliation_count",
	"reconciliation_duration",
	"reconciliation_operations",
	"reconciliation_total_errors",
	"reconciliation_current_errors",
	"prune_count",
	"prune_duration",
	"prune_total_errors",
	"prune_current_errors",
	"queue_retrying",
	"queue_in_flight",
	"convergence_count",
	"convergence_duration",
	"convergence_max_duration",
}

// NewExpVar returns metrics published as top-level expvar variables
// ("reconciliation_count", "prune_duration", ...), visible at /debug/vars.
// Calling it again returns metrics backed by the same, already published
// variables instead of panicking as expvar.Publish would. A name already
// published by other code as something other than a map is left alone and
// the variable is kept unpublished (it is still in [ExpVar.Map]).
func NewExpVar() *ExpVar { return newExpVar(true) }

// NewUnpublishedExpVar returns metrics whose variables are not published;
// read them through [ExpVar.Map]. Use it in tests and when several
// independent instances must not share figures.
func NewUnpublishedExpVar() *ExpVar { return newExpVar(false) }

// publishMu serialises the check-then-publish of shared variables.
var publishMu sync.Mutex

// publishedMaxMu is the convergenceMaxMu of every published instance.
var publishedMaxMu sync.Mutex

func newExpVar(publish bool) *ExpVar {
	root := new(expvar.Map).Init()
	maps := make([]*expvar.Map, len(varNames))
	maxMu := new(sync.Mutex)
	if publish {
		maxMu = &publishedMaxMu
		publishMu.Lock()
		defer publishMu.Unlock()
	}
	for i, name := range varNames {
		var m *expvar.Map
		if publish {
			m = publishedMap(name)
		} else {
			m = new(expvar.Map).Init()
		}
		root.Set(name, m)
		maps[i] = m
	}
	return &ExpVar{
		root:                           root,
		ReconciliationCountVar:         maps[0],
		ReconciliationDurationVar:      maps[1],
		ReconciliationOperationsVar:    maps[2],
		ReconciliationTotalErrorsVar:   maps[3],
		ReconciliationCurrentErrorsVar: maps[4],
		PruneCountVar:                  maps[5],
		PruneDurationVar:               maps[6],
		PruneTotalErrorsVar:            maps[7],
		PruneCurrentErrorsVar:          maps[8],
		QueueRetryingVar:               maps[9],
		QueueInFlightVar:               maps[10],
		ConvergenceCountVar:            maps[11],
		ConvergenceDurationVar:         maps[12],
		ConvergenceMaxDurationVar:      maps[13],
		convergenceMaxMu:               maxMu,
	}
}

// Map returns a map holding every variable of m by name. Its String method
// renders them all as JSON.
func (m *ExpVar) Map() *expvar.Map { return m.root }

// Key returns the key under which figures of the named reconciler in the
// given module are stored.
func Key(moduleID cell.FullModuleID, name string) string {
	if name == "" {
		return moduleID.String()
	}
	return moduleID.String() + "/" + name
}

// ReconciliationDuration implements [Metrics]. It is called for every
// operation, so in the steady state it is a lock-free lookup and two atomic
// adds, and does not allocate.
func (m *ExpVar) ReconciliationDuration(moduleID cell.FullModuleID, name, operation string, d time.Duration) {
	c := m.counters.get(moduleID, name, operation, m.ReconciliationDurationVar, m.ReconciliationOperationsVar)
	c.total.Add(d.Seconds())
	c.count.Add(1)
}

// ReconciliationErrors implements [Metrics].
func (m *ExpVar) ReconciliationErrors(moduleID cell.FullModuleID, name string, new, current int) {
	key := Key(moduleID, name)
	m.ReconciliationCountVar.Add(key, 1)
	m.ReconciliationTotalErrorsVar.Add(key, int64(new))
	setInt(m.ReconciliationCurrentErrorsVar, key, int64(current))
}

// PruneError implements [Metrics].
func (m *ExpVar) PruneError(moduleID cell.FullModuleID, name string, err error) {
	key := Key(moduleID, name)
	m.PruneCountVar.Add(key, 1)
	var failing int64
	if err != nil {
		failing = 1
	}
	m.PruneTotalErrorsVar.Add(key, failing)
	setInt(m.PruneCurrentErrorsVar, key, failing)
}

// PruneDuration implements [Metrics].
func (m *ExpVar) PruneDuration(moduleID cell.FullModuleID, name string, d time.Duration) {
	m.PruneDurationVar.AddFloat(Key(moduleID, name), d.Seconds())
}

// QueueLength implements [QueueMetrics].
func (m *ExpVar) QueueLength(moduleID cell.FullModuleID, name string, retrying, inFlight int) {
	key := Key(moduleID, name)
	setInt(m.QueueRetryingVar, key, int64(retrying))
	setInt(m.QueueInFlightVar, key, int64(inFlight))
}

// Converged implements [QueueMetrics].
func (m *ExpVar) Converged(moduleID cell.FullModuleID, name string, count int, total, longest time.Duration) {
	if count <= 0 {
		return
	}
	c := m.counters.get(moduleID, name, "", m.ConvergenceDurationVar, m.ConvergenceCountVar)
	c.total.Add(total.Seconds())
	c.count.Add(int64(count))
	key := c.key
	m.convergenceMaxMu.Lock()
	defer m.convergenceMaxMu.Unlock()
	if cur, ok := m.ConvergenceMaxDurationVar.Get(key).(*expvar.Float); ok {
		if cur.Value() >= longest.Seconds() {
			return
		}
		cur.Set(longest.Seconds())
		return
	}
	v := new(expvar.Float)
	v.Set(longest.Seconds())
	m.ConvergenceMaxDurationVar.Set(key, v)
}

// setInt stores v under key, reusing the existing variable when there is one
// so that steady-state updates do not allocate.
func setInt(m *expvar.Map, key string, v int64) {
	if cur, ok := m.Get(key).(*expvar.Int); ok {
		cur.Set(v)
		return
	}
	n := new(expvar.Int)
	n.Set(v)
	m.Set(key, n)
}

// counterCache maps (module ID, name, operation) to the variables that
// count and time it, so that frequent calls neither rebuild the key (which
// allocates) nor look it up in the expvar maps. Lookups read an immutable
// slice without locking; additions copy it under mu. Past counterCacheSize
// entries, counters are built afresh on each call.
type counterCache struct {
	mu      sync.Mutex
	entries atomic.Pointer[[]*counters]
}

// counters are the variables of one reconciler and operation (operation is
// empty for per-reconciler figures).
type counters struct {
	moduleID        cell.FullModuleID
	name, operation string
	key             string
	total           *expvar.Float
	count           *expvar.Int
}

const counterCacheSize = 32

func (c *counters) is(moduleID cell.FullModuleID, name, operation string) bool {
	return c.name == name && c.operation == operation && slices.Equal(c.moduleID, moduleID)
}

// get returns the counters keyed Key(moduleID, name), followed by
// "/operation" unless operation is empty, in the totals and counts maps.
func (cc *counterCache) get(moduleID cell.FullModuleID, name, operation string, totals, counts *expvar.Map) *counters {
	if entries := cc.entries.Load(); entries != nil {
		for _, c := range *entries {
			if c.is(moduleID, name, operation) {
				return c
			}
		}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	var entries []*counters
	if p := cc.entries.Load(); p != nil {
		entries = *p
		for _, c := range entries {
			if c.is(moduleID, name, operation) {
				return c
			}
		}
	}
	key := Key(moduleID, name)
	if operation != "" {
		key += "/" + operation
	}
	c := &counters{
		moduleID:  slices.Clone(moduleID),
		name:      name,
		operation: operation,
		key:       key,
		total:     floatVar(totals, key),
		count:     intVar(counts, key),
	}
	if len(entries) < counterCacheSize {
		grown := append(slices.Clip(entries), c)
		cc.entries.Store(&grown)
	}
	return c
}

// floatVar returns the Float under key in m, creating it if needed.
func floatVar(m *expvar.Map, key string) *expvar.Float {
	if v, ok := m.Get(key).(*expvar.Float); ok {
		return v
	}
	m.AddFloat(key, 0) // creates it, unless another caller just did
	return m.Get(key).(*expvar.Float)
}

// intVar returns the Int under key in m, creating it if needed.
func intVar(m *expvar.Map, key string) *expvar.Int {
	if v, ok := m.Get(key).(*expvar.Int); ok {
		return v
	}
	m.Add(key, 0)
	return m.Get(key).(*expvar.Int)
}

// publishedMap returns the published map called name, publishing a new one
// if there is none. If the name is taken by a variable of another kind, it
// returns an unpublished map rather than panic. publishMu must be held.
func publishedMap(name string) *expvar.Map {
	switch existing := expvar.Get(name).(type) {
	case *expvar.Map:
		return existing
	case nil:
		return expvar.NewMap(name)
	default:
		return new(expvar.Map).Init()
	}
}
