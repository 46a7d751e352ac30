package reconciler

import "github.com/converge-go/converge/metrics"

// Metrics receives a reconciler's figures: converge's [metrics.Metrics],
// with the StateDB reconciler's method set, so an implementation of the
// StateDB reconciler's Metrics satisfies it unchanged. A value that also
// implements the optional interfaces of package metrics receives their
// figures too.
type Metrics = metrics.Metrics

// ExpVarMetrics keeps the figures in expvar maps: converge's
// [metrics.ExpVar]. It has the StateDB reconciler's fields
// (ReconciliationCountVar, PruneDurationVar, ...) and Map method, and more
// maps of its own. The zero ExpVarMetrics is not usable: build one with
// NewExpVarMetrics or NewUnpublishedExpVarMetrics. Its methods are safe for
// concurrent use.
type ExpVarMetrics = metrics.ExpVar

// NewExpVarMetrics returns metrics published as top-level expvar variables
// under the StateDB reconciler's names ("reconciliation_count", ...). It is
// [metrics.NewExpVar]: unlike the StateDB reconciler's, calling it twice
// shares the published variables instead of panicking.
func NewExpVarMetrics() *ExpVarMetrics { return metrics.NewExpVar() }

// NewUnpublishedExpVarMetrics returns metrics whose variables are not
// published; read them through ExpVarMetrics.Map. It is
// [metrics.NewUnpublishedExpVar].
func NewUnpublishedExpVarMetrics() *ExpVarMetrics { return metrics.NewUnpublishedExpVar() }

// The operation names given to Metrics.ReconciliationDuration.
const (
	OpUpdate = metrics.OpUpdate
	OpDelete = metrics.OpDelete
)
