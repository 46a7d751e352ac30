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

	keys keyCache

	// fast holds the variables last used for updates ([0]) and deletes
	// ([1]), so that the per-operation call is a compare and two atomic
	// adds. Reconcilers sharing one ExpVar fall back to keys.
	fast [2]atomic.Pointer[opVars]
}

// opVars are the variables of one reconciler's operation kind.
type opVars struct {
	moduleID        cell.FullModuleID
	name, operation string
	duration        *expvar.Float
	count           *expvar.Int
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
// operation, so it avoids allocating in the steady state.
func (m *ExpVar) ReconciliationDuration(moduleID cell.FullModuleID, name, operation string, d time.Duration) {
	slot := -1
	switch operation {
	case OpUpdate:
		slot = 0
	case OpDelete:
		slot = 1
	}
	if slot >= 0 {
		if v := m.fast[slot].Load(); v != nil && v.name == name && v.operation == operation && slices.Equal(v.moduleID, moduleID) {
			v.duration.Add(d.Seconds())
			v.count.Add(1)
			return
		}
	}
	key := m.keys.get(moduleID, name, operation)
	m.ReconciliationDurationVar.AddFloat(key, d.Seconds())
	m.ReconciliationOperationsVar.Add(key, 1)
	if slot < 0 {
		return
	}
	duration, ok1 := m.ReconciliationDurationVar.Get(key).(*expvar.Float)
	count, ok2 := m.ReconciliationOperationsVar.Get(key).(*expvar.Int)
	if ok1 && ok2 && m.fast[slot].Load() == nil {
		// The first reconciler keeps the slot; others sharing this ExpVar
		// take the slower keyed path rather than evict each other.
		m.fast[slot].CompareAndSwap(nil, &opVars{slices.Clone(moduleID), name, operation, duration, count})
	}
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
	key := m.keys.get(moduleID, name, "")
	m.ConvergenceCountVar.Add(key, int64(count))
	m.ConvergenceDurationVar.AddFloat(key, total.Seconds())
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

// keyCache remembers recently built operation keys so that per-operation
// calls do not rebuild (and allocate) them.
type keyCache struct {
	mu      sync.Mutex
	entries []cachedKey
}

type cachedKey struct {
	moduleID        cell.FullModuleID
	name, operation string
	key             string
}

const keyCacheSize = 32

// get returns Key(moduleID, name), followed by "/operation" unless
// operation is empty.
func (c *keyCache) get(moduleID cell.FullModuleID, name, operation string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.name == name && e.operation == operation && slices.Equal(e.moduleID, moduleID) {
			return e.key
		}
	}
	key := Key(moduleID, name)
	if operation != "" {
		key += "/" + operation
	}
	if len(c.entries) < keyCacheSize {
		c.entries = append(c.entries, cachedKey{slices.Clone(moduleID), name, operation, key})
	}
	return key
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
