package metrics

import (
	"expvar"
	"sync"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/metrics/internal/keycache"
)

// ExpVar implements [Metrics], [QueueMetrics], [RoundMetrics],
// [CommitMetrics], [PruneMetrics] and [RefreshMetrics] with expvar maps.
// Each map is keyed by "<module ID>" or "<module ID>/<name>", with
// "/<operation>" appended for figures per operation ("/<operation>/<outcome>"
// for outcomes, "/prune" or "/refresh" for drift). Durations are in seconds.
// Histograms are maps of each bucket's upper bound ("0.001", ..., "+Inf") to
// the cumulative count of observations up to it, plus "count" and "sum"; the
// bounds are [DurationBuckets] and [ConvergenceBuckets].
//
// The zero ExpVar is not usable; build one with [NewExpVar],
// [NewExpVarWithPrefix] or [NewUnpublishedExpVar]. Its methods are safe for
// concurrent use, and in the steady state they do not allocate.
type ExpVar struct {
	root *expvar.Map

	ReconciliationCountVar         *expvar.Map // rounds (wake-ups of the reconcile loop)
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

	ReconciliationDurationHistogramVar *expvar.Map // histogram of operation (or batch) seconds per operation
	ReconciliationOutcomesVar          *expvar.Map // operations per operation and outcome
	ConvergenceDurationHistogramVar    *expvar.Map // histogram of seconds from Pending to Done

	QueueDepthVar          *expvar.Map // operations collected, not started
	QueueOldestPendingVar  *expvar.Map // seconds since the oldest unfinished object was written Pending
	QueueUnfinishedWorkVar *expvar.Map // sum of seconds the running operations have run
	QueueLongestRunningVar *expvar.Map // seconds the longest running operation has run
	QueueAddsVar           *expvar.Map // objects taken for work since start
	QueueRetriesVar        *expvar.Map // of those, retries
	QueueWaitHistogramVar  *expvar.Map // histogram of seconds from ready to started
	WorkersVar             *expvar.Map // operations run at once, as configured
	BusyWorkersVar         *expvar.Map // workers running an operation at the end of the last round
	BreakerOpenVar         *expvar.Map // 1 while the circuit breaker is open, else 0
	BreakerOpeningsVar     *expvar.Map // circuit breaker openings since registration

	RefreshMarksVar  *expvar.Map // objects marked Refreshing since start
	DriftRepairedVar *expvar.Map // drift repaired since start, per "prune" and "refresh"

	// convergenceMaxMu serialises the read-compare-write of the maximum.
	// Instances that share ConvergenceMaxDurationVar (every published one)
	// must share the mutex too, or two of them could both see a smaller
	// figure and the smaller report would overwrite the larger.
	convergenceMaxMu *sync.Mutex

	// Per reconciler (and operation or outcome), the variables each method
	// updates, so that calls neither build keys nor look them up in maps.
	ops          keycache.Cache[*opVars]
	errs         keycache.Cache[*errorVars]
	prunes       keycache.Cache[*pruneVars]
	pruneSeconds keycache.Cache[*expvar.Float]
	queueLengths keycache.Cache[*queueLengthVars]
	converged    keycache.Cache[*convergedVars]
	rounds       keycache.Cache[*roundVars]
	commits      keycache.Cache[*commitVars]
	outcomes     keycache.Cache[*outcomeVars]
	drift        keycache.Cache[*expvar.Int]
	refreshes    keycache.Cache[*expvar.Int]
}

var (
	_ Metrics        = (*ExpVar)(nil)
	_ QueueMetrics   = (*ExpVar)(nil)
	_ RoundMetrics   = (*ExpVar)(nil)
	_ CommitMetrics  = (*ExpVar)(nil)
	_ PruneMetrics   = (*ExpVar)(nil)
	_ RefreshMetrics = (*ExpVar)(nil)
)

// Names of the expvar variables, as published by [NewExpVar], in the order
// of ExpVar's fields.
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
	"reconciliation_duration_histogram",
	"reconciliation_outcomes",
	"convergence_duration_histogram",
	"queue_depth",
	"queue_oldest_pending",
	"queue_unfinished_work",
	"queue_longest_running",
	"queue_adds",
	"queue_retries",
	"queue_wait_histogram",
	"refresh_marks",
	"drift_repaired",
	"workers",
	"busy_workers",
	"breaker_open",
	"breaker_openings",
}

// NewExpVar returns metrics published as top-level expvar variables
// ("reconciliation_count", "prune_duration", ...), visible at /debug/vars.
// Calling it again returns metrics backed by the same, already published
// variables instead of panicking as expvar.Publish would. A name already
// published by other code as something other than a map is left alone and
// the variable is kept unpublished (it is still in [ExpVar.Map]).
//
// Eight of the names are those of the StateDB reconciler's
// NewExpVarMetrics, which panics if they are taken. In a program that uses
// both, call the StateDB reconciler's NewExpVarMetrics first (NewExpVar then
// shares its maps, and both reconcilers' figures appear under the same
// names) or use [NewExpVarWithPrefix], which works in either order.
func NewExpVar() *ExpVar { return newExpVar(true, "") }

// NewExpVarWithPrefix is [NewExpVar] with every name published with prefix
// in front ("converge_reconciliation_count" for prefix "converge_"). Names
// no other package uses coexist with the StateDB reconciler's
// NewExpVarMetrics whichever is created first. [ExpVar.Map] keys the
// variables by their names without the prefix.
func NewExpVarWithPrefix(prefix string) *ExpVar { return newExpVar(true, prefix) }

// NewUnpublishedExpVar returns metrics whose variables are not published;
// read them through [ExpVar.Map]. Use it in tests and when several
// independent instances must not share figures.
func NewUnpublishedExpVar() *ExpVar { return newExpVar(false, "") }

// publishMu serialises the check-then-publish of shared variables.
var publishMu sync.Mutex

// publishedMaxMu is the convergenceMaxMu of every published instance.
var publishedMaxMu sync.Mutex

func newExpVar(publish bool, prefix string) *ExpVar {
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
			m = publishedMap(prefix + name)
		} else {
			m = new(expvar.Map).Init()
		}
		root.Set(name, m)
		maps[i] = m
	}
	return &ExpVar{
		root:                               root,
		ReconciliationCountVar:             maps[0],
		ReconciliationDurationVar:          maps[1],
		ReconciliationOperationsVar:        maps[2],
		ReconciliationTotalErrorsVar:       maps[3],
		ReconciliationCurrentErrorsVar:     maps[4],
		PruneCountVar:                      maps[5],
		PruneDurationVar:                   maps[6],
		PruneTotalErrorsVar:                maps[7],
		PruneCurrentErrorsVar:              maps[8],
		QueueRetryingVar:                   maps[9],
		QueueInFlightVar:                   maps[10],
		ConvergenceCountVar:                maps[11],
		ConvergenceDurationVar:             maps[12],
		ConvergenceMaxDurationVar:          maps[13],
		ReconciliationDurationHistogramVar: maps[14],
		ReconciliationOutcomesVar:          maps[15],
		ConvergenceDurationHistogramVar:    maps[16],
		QueueDepthVar:                      maps[17],
		QueueOldestPendingVar:              maps[18],
		QueueUnfinishedWorkVar:             maps[19],
		QueueLongestRunningVar:             maps[20],
		QueueAddsVar:                       maps[21],
		QueueRetriesVar:                    maps[22],
		QueueWaitHistogramVar:              maps[23],
		RefreshMarksVar:                    maps[24],
		DriftRepairedVar:                   maps[25],
		WorkersVar:                         maps[26],
		BusyWorkersVar:                     maps[27],
		BreakerOpenVar:                     maps[28],
		BreakerOpeningsVar:                 maps[29],
		convergenceMaxMu:                   maxMu,
	}
}

// Map returns a map holding every variable of m by name (without a
// prefix). Its String method renders them all as JSON.
func (m *ExpVar) Map() *expvar.Map { return m.root }

// Key returns the key under which figures of the named reconciler in the
// given module are stored.
func Key(moduleID cell.FullModuleID, name string) string {
	return keycache.Key(moduleID, name, "")
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

// floatVar returns the Float under key in m, creating it if needed. A
// variable of another kind under key is replaced.
func floatVar(m *expvar.Map, key string) *expvar.Float {
	if v, ok := m.Get(key).(*expvar.Float); ok {
		return v
	}
	m.AddFloat(key, 0) // creates it, unless another caller just did
	if v, ok := m.Get(key).(*expvar.Float); ok {
		return v
	}
	v := new(expvar.Float)
	m.Set(key, v)
	return v
}

// unpublished holds the variables made for a new key until they hold their
// first values, so that a reader never sees a count at zero after the event
// it counts (a prune that ran shown as prune_count 0). The zero value is
// empty.
type unpublished struct {
	maps []*expvar.Map
	keys []string
	vars []*expvar.Int
}

// intVar returns the Int under key in m, or a new one that publish will
// add to m.
func (u *unpublished) intVar(m *expvar.Map, key string) *expvar.Int {
	if v, ok := m.Get(key).(*expvar.Int); ok {
		return v
	}
	v := new(expvar.Int)
	u.maps, u.keys, u.vars = append(u.maps, m), append(u.keys, key), append(u.vars, v)
	return v
}

// publish adds the new variables to their maps.
func (u *unpublished) publish() {
	for i, v := range u.vars {
		u.maps[i].Set(u.keys[i], v)
	}
}

// intVar returns the Int under key in m, creating it if needed. A variable
// of another kind under key is replaced.
func intVar(m *expvar.Map, key string) *expvar.Int {
	if v, ok := m.Get(key).(*expvar.Int); ok {
		return v
	}
	m.Add(key, 0)
	if v, ok := m.Get(key).(*expvar.Int); ok {
		return v
	}
	v := new(expvar.Int)
	m.Set(key, v)
	return v
}
