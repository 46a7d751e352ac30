// Package agent is written for the StateDB reconciler v0.9.4 and uses every
// name of it that converge honours, as an agent does. The tests of package
// compat/reconciler build and vet it as it is, against the StateDB
// reconciler, and with only its import path changed, against converge.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"iter"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"github.com/cilium/statedb/reconciler"
	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"
)

// DesiredDevice is a device the agent wants to exist, with one reconciler.
type DesiredDevice struct {
	Name   string
	MTU    int
	Status reconciler.Status
}

func (d *DesiredDevice) Clone() *DesiredDevice                        { c := *d; return &c }
func (d *DesiredDevice) GetStatus() reconciler.Status                 { return d.Status }
func (d *DesiredDevice) SetStatus(s reconciler.Status) *DesiredDevice { d.Status = s; return d }

func (d *DesiredDevice) TableHeader() []string { return []string{"Name", "MTU", "Status"} }
func (d *DesiredDevice) TableRow() []string {
	return []string{d.Name, fmt.Sprint(d.MTU), d.Status.String()}
}

// DeviceNameIndex is the primary index of the devices table.
var DeviceNameIndex = statedb.Index[*DesiredDevice, string]{
	Name:       "name",
	FromObject: func(d *DesiredDevice) index.KeySet { return index.NewKeySet(index.String(d.Name)) },
	FromKey:    index.String,
	Unique:     true,
}

// Route is reconciled by several reconcilers, each with its own status.
type Route struct {
	Prefix   string
	Statuses reconciler.StatusSet
}

// deviceOps applies devices one by one or in batches.
type deviceOps struct{ metrics reconciler.Metrics }

func (o deviceOps) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, d *DesiredDevice) error {
	start := time.Now()
	defer func() {
		o.metrics.ReconciliationDuration(cell.FullModuleID{"agent"}, "devices", reconciler.OpUpdate, time.Since(start))
	}()
	if d.MTU <= 0 {
		return errors.New("bad MTU")
	}
	return ctx.Err()
}

func (o deviceOps) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, d *DesiredDevice) error {
	o.metrics.ReconciliationDuration(cell.FullModuleID{"agent"}, "devices", reconciler.OpDelete, 0)
	return nil
}

func (o deviceOps) Prune(ctx context.Context, txn statedb.ReadTxn, objs iter.Seq2[*DesiredDevice, statedb.Revision]) error {
	for d, rev := range objs {
		_, _ = d, rev
	}
	return nil
}

func (o deviceOps) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*DesiredDevice]) {
	for i := range batch {
		batch[i].Result = o.Update(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

func (o deviceOps) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[*DesiredDevice]) {
	for i := range batch {
		batch[i].Result = o.Delete(ctx, txn, batch[i].Revision, batch[i].Object)
	}
}

var (
	_ reconciler.Operations[*DesiredDevice]      = deviceOps{}
	_ reconciler.BatchOperations[*DesiredDevice] = deviceOps{}
)

// noopReconciler stands in on platforms without devices: it implements
// the Reconciler interface itself and does nothing.
type noopReconciler struct{}

func (noopReconciler) Prune() {}

func (noopReconciler) WaitUntilReconciled(ctx context.Context, untilRevision statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	return untilRevision, 0, nil
}

var _ reconciler.Reconciler[*DesiredDevice] = noopReconciler{}

// NewDeviceReconciler registers the devices reconciler where devices
// exist, and returns the no-op one elsewhere.
func NewDeviceReconciler(params reconciler.Params, devices statedb.RWTable[*DesiredDevice], supported bool) (reconciler.Reconciler[*DesiredDevice], error) {
	if !supported {
		return noopReconciler{}, nil
	}
	ops := deviceOps{metrics: params.DefaultMetrics}
	return reconciler.Register(
		params,
		devices,
		(*DesiredDevice).Clone,
		(*DesiredDevice).SetStatus,
		(*DesiredDevice).GetStatus,
		ops,
		ops,
		Options(params.DefaultMetrics)...,
	)
}

// Options uses every option.
func Options(m reconciler.Metrics) []reconciler.Option {
	var opts []reconciler.Option
	opts = append(opts,
		reconciler.WithName("devices"),
		reconciler.WithMetrics(m),
		reconciler.WithPruning(time.Minute),
		reconciler.WithoutPruning(),
		reconciler.WithRefreshing(time.Minute, rate.NewLimiter(10, 1)),
		reconciler.WithRetry(time.Millisecond, time.Second),
		reconciler.WithRoundLimits(100, rate.NewLimiter(100, 1)),
	)
	return opts
}

// countingMetrics is an agent's own Metrics.
type countingMetrics struct{ rounds, prunes int }

func (m *countingMetrics) ReconciliationDuration(moduleID cell.FullModuleID, name, operation string, duration time.Duration) {
}

func (m *countingMetrics) ReconciliationErrors(moduleID cell.FullModuleID, name string, new, current int) {
	m.rounds++
}

func (m *countingMetrics) PruneError(moduleID cell.FullModuleID, name string, err error) { m.prunes++ }

func (m *countingMetrics) PruneDuration(moduleID cell.FullModuleID, name string, duration time.Duration) {
}

var (
	_ reconciler.Metrics = &countingMetrics{}
	_ reconciler.Metrics = &reconciler.ExpVarMetrics{}

	// NewPublishedMetrics is not called here: expvar names are process-wide.
	NewPublishedMetrics func() *reconciler.ExpVarMetrics = reconciler.NewExpVarMetrics
)

// ExpVars returns the maps of unpublished expvar metrics.
func ExpVars() []*expvar.Map {
	m := reconciler.NewUnpublishedExpVarMetrics()
	return []*expvar.Map{
		m.Map(),
		m.ReconciliationCountVar,
		m.ReconciliationDurationVar,
		m.ReconciliationTotalErrorsVar,
		m.ReconciliationCurrentErrorsVar,
		m.PruneCountVar,
		m.PruneDurationVar,
		m.PruneTotalErrorsVar,
		m.PruneCurrentErrorsVar,
	}
}

// Describe uses every kind and every method of Status and StatusKind.
func Describe(s reconciler.Status) string {
	var what string
	switch s.Kind {
	case reconciler.StatusKindUnset:
		what = "unset"
	case reconciler.StatusKindPending, reconciler.StatusKindRefreshing:
		what = "to do"
	case reconciler.StatusKindDone:
		what = "done"
	case reconciler.StatusKindError:
		what = "failed: " + s.GetError()
	}
	var key index.Key = s.Kind.Key()
	return fmt.Sprintf("%s %s %s %v %s %s", what, s.Kind.String(), key, s.IsPendingOrRefreshing(), s.UpdatedAt, s)
}

// Statuses builds every kind of status and encodes them.
func Statuses() ([]string, error) {
	byKind := map[reconciler.StatusKind]reconciler.Status{}
	for _, s := range []reconciler.Status{
		reconciler.StatusPending(),
		reconciler.StatusRefreshing(),
		reconciler.StatusDone(),
		reconciler.StatusError(errors.New("no such device")),
	} {
		byKind[s.Kind] = s
	}
	var out []string
	for _, s := range byKind {
		b, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		var back reconciler.Status
		if err := json.Unmarshal(b, &back); err != nil {
			return nil, err
		}
		out = append(out, Describe(back))
	}
	return out, nil
}

// Sets uses every method of StatusSet.
func Sets() (string, error) {
	set := reconciler.NewStatusSet()
	set = set.Set("routes", reconciler.StatusDone())
	set = set.Set("neighbors", reconciler.StatusError(errors.New("unreachable")))
	set = set.Pending("bgp")
	set = set.Delete("neighbors")
	r := Route{Prefix: "10.0.0.0/8", Statuses: set}
	names := ""
	for name, s := range r.Statuses.All() {
		names += name + "=" + s.Kind.String() + " "
	}
	j, err := r.Statuses.MarshalJSON()
	if err != nil {
		return "", err
	}
	var back reconciler.StatusSet
	if err := json.Unmarshal(j, &back); err != nil {
		return "", err
	}
	y, err := yaml.Marshal(back)
	if err != nil {
		return "", err
	}
	if _, err := back.MarshalYAML(); err != nil {
		return "", err
	}
	return fmt.Sprint(names, back.Get("routes").Kind, back.IsDone(), back.IsPendingOrRefreshing(), back.String(), string(y)), nil
}
