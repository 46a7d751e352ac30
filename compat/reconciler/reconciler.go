package reconciler

import (
	"context"
	"time"

	"github.com/cilium/statedb"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
)

// Reconciler is a registered reconciler, as the StateDB reconciler defines
// it: Prune and WaitUntilReconciled. It is an interface of its own rather
// than converge's reconciler.Reconciler so that an agent's own
// implementation with just these two methods (a no-op reconciler on a
// platform without the target, a fake in tests) keeps satisfying it.
//
// The value [Register] returns is converge's reconciler and also implements
// converge's reconciler.Reconciler: assert to it for Pause and Resume. Its
// methods are safe for concurrent use.
type Reconciler[Obj any] interface {
	// Prune asks for a prune as soon as the table is initialized, whatever
	// the prune interval. It never blocks; requests made while one is
	// waiting are merged into it.
	Prune()

	// WaitUntilReconciled blocks until every change of the table up to
	// untilRevision has been attempted, or ctx ends. It returns the
	// revision reached, the lowest revision among objects still failing
	// (zero if none) and ctx's error if ctx ended first. Wait again until
	// both revisions are past untilRevision to wait for success.
	WaitUntilReconciled(ctx context.Context, untilRevision statedb.Revision) (revision statedb.Revision, retryLowWatermark statedb.Revision, err error)
}

// Params holds what a reconciler needs from the hive: converge's
// reconciler.Params. Take it as an argument of a cell.Invoke or constructor
// and pass it to [Register]. It has the StateDB reconciler's fields (Log,
// DB, JobGroup, ModuleID, DefaultMetrics) and an optional Tables; hive
// fills them in.
type Params = reconciler.Params

// Operations applies objects to the target: converge's
// reconciler.Operations, with the StateDB reconciler's method set, so an
// existing implementation satisfies it unchanged.
type Operations[Obj any] = reconciler.Operations[Obj]

// BatchOperations applies many objects in one call: converge's
// reconciler.BatchOperations, with the StateDB reconciler's method set.
type BatchOperations[Obj any] = reconciler.BatchOperations[Obj]

// BatchEntry is one object of a batch and its result: converge's
// reconciler.BatchEntry, with the StateDB reconciler's fields Object,
// Revision and Result.
type BatchEntry[Obj any] = reconciler.BatchEntry[Obj]

// Option configures a reconciler registered with [Register]: converge's
// reconciler.Option, so converge's own options can be given here too.
// Options apply in order, a later one overriding an earlier one; Register
// returns an error wrapping converge's reconciler.ErrInvalidConfig for a
// value out of range or a nil Option.
//
// Register starts from the StateDB reconciler's defaults, which differ from
// those of converge's own Register in refreshing, round rate and retry
// jitter. Defaults, and the option that changes each:
//
//	name               ""                         (WithName)
//	metrics            Params.DefaultMetrics, else unpublished expvar metrics (WithMetrics)
//	prune interval     1h, and once the table is initialized (WithPruning, WithoutPruning)
//	refresh            every 30m, marking at most 100 objects/s (WithRefreshing)
//	retry backoff      100ms to 1m, doubling per failure, no jitter (WithRetry)
//	round size         1000 objects               (WithRoundLimits)
//	round rate limit   1000 rounds/s, burst 1     (WithRoundLimits)
//
// Each reconciler gets limiters of its own. The settings converge adds keep
// converge's defaults: one operation at a time, no operation timeout,
// panics in operations recovered, start at once, no dependencies (see
// converge's reconciler.Option).
type Option = reconciler.Option

// The StateDB reconciler's defaults, where they differ from converge's.
const (
	defaultRefreshInterval = 30 * time.Minute
	defaultRefreshRate     = 100  // objects marked per second
	defaultRoundRate       = 1000 // rounds per second
	defaultRoundSize       = 1000
)

// upstreamDefaults returns the options that turn converge's defaults into
// the StateDB reconciler's, as listed in the doc of Option. The limiters are
// new on every call: a limiter shared between reconcilers would share its
// budget.
func upstreamDefaults() []Option {
	return []Option{
		reconciler.WithRefreshing(defaultRefreshInterval, rate.NewLimiter(defaultRefreshRate, 1)),
		reconciler.WithRoundLimits(defaultRoundSize, rate.NewLimiter(defaultRoundRate, 1)),
		reconciler.WithRetryJitter(0),
	}
}

// Register creates a reconciler for table and adds its jobs to
// params.JobGroup, so that it starts and stops with the hive, as the
// StateDB reconciler's Register does, and with its defaults (see [Option]).
// Call it from a cell.Invoke of the module that owns the table, or later,
// from a start hook or once the hive runs.
//
// clone copies an object before it is handed to Update; setStatus returns
// the object with this reconciler's status replaced; getStatus reads it.
// batchOps may be nil; if not, it is used instead of ops for updates and
// deletes. Unlike the StateDB reconciler's, Obj need not be comparable, and
// batchOps may implement converge's reconciler.BatchProcessor or serve
// alone, with ops nil (see converge's reconciler.Register).
//
// Register returns an error wrapping converge's reconciler.ErrInvalidConfig
// if an argument is nil or an option out of range. It does not block.
func Register[Obj any](
	params Params,
	table statedb.RWTable[Obj],
	clone func(Obj) Obj,
	setStatus func(Obj, Status) Obj,
	getStatus func(Obj) Status,
	ops Operations[Obj],
	batchOps BatchOperations[Obj],
	options ...Option,
) (Reconciler[Obj], error) {
	r, err := reconciler.Register(params, table, clone, setStatus, getStatus, ops, batchOps,
		append(upstreamDefaults(), options...)...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// WithName names the reconciler, to tell apart several in one module. The
// name scopes its jobs ("reconcile-<name>", "refresh-<name>"), health and
// metrics.
func WithName(name string) Option { return reconciler.WithName(name) }

// WithMetrics sets where figures are reported, instead of
// Params.DefaultMetrics.
func WithMetrics(m Metrics) Option { return reconciler.WithMetrics(m) }

// WithPruning calls Operations.Prune every interval, and once when the
// table is initialized. An interval of zero disables periodic pruning, like
// [WithoutPruning]; Reconciler.Prune still prunes on request. A failed
// prune is tried again after the retry backoff.
func WithPruning(interval time.Duration) Option { return reconciler.WithPruning(interval) }

// WithoutPruning disables periodic pruning, including the prune once the
// table is initialized; Reconciler.Prune still prunes on request.
func WithoutPruning() Option { return reconciler.WithPruning(0) }

// WithRefreshing marks Done objects whose status is older than interval as
// Refreshing, so that Update is called for them again, at most as fast as
// limiter allows (nil: no bound). An interval of zero disables refreshing,
// which is on by default here (see [Option]).
func WithRefreshing(interval time.Duration, limiter *rate.Limiter) Option {
	return reconciler.WithRefreshing(interval, limiter)
}

// WithRetry sets the backoff between attempts on a failing object:
// minBackoff after the first failure, doubling up to maxBackoff. Both must
// be positive, and minBackoff at most maxBackoff.
func WithRetry(minBackoff, maxBackoff time.Duration) Option {
	return reconciler.WithRetry(minBackoff, maxBackoff)
}

// WithRoundLimits handles at most numObjects objects per round before their
// statuses are written, and, if limiter is not nil, starts rounds at most as
// fast as it allows (nil: no bound, where the StateDB reconciler would
// crash).
func WithRoundLimits(numObjects int, limiter *rate.Limiter) Option {
	return reconciler.WithRoundLimits(numObjects, limiter)
}
