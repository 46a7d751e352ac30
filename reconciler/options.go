package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"

	"golang.org/x/time/rate"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/tracing"
)

// Option configures a reconciler. Options are applied in order; a later
// option overrides an earlier one. Values are checked by [Register], which
// returns an error wrapping [ErrInvalidConfig] for any out of range.
//
// Defaults, and the option that changes each:
//
//	name               ""              (WithName; jobs are "reconcile" and "refresh")
//	metrics            Params.DefaultMetrics, else unpublished expvar metrics (WithMetrics)
//	tracing            off             (WithTracer)
//	prune interval     1h              (WithPruning; 0: only on request)
//	refresh            off             (WithRefreshing)
//	retry backoff      100ms to 1m     (WithRetry), doubling per failure
//	retry jitter       0.1             (WithRetryJitter): ±10% of the backoff
//	attempts           no limit        (WithMaxAttempts)
//	circuit breaker    off             (WithCircuitBreaker)
//	round size         1000 objects    (WithRoundLimits)
//	round rate limit   none            (WithRoundLimits)
//	concurrency        1               (WithConcurrency)
//	operation timeout  none            (WithOperationTimeout)
//	panic recovery     on              (WithoutPanicRecovery)
//	start              at once         (WithStartAfter)
//	dependencies       none            (WithDependency)
//	priority           off             (WithPriority; arrival-order share 1/8)
//	setup step         none            (WithSetup)
//	drift check        off             (WithDriftCheck; WithDriftReportOnly: detect, not repair)
//	while running      as registered   (Reconciler.Configure: concurrency, round limits, refresh, pruning, retry)
//	prune guard        off             (WithPruneGuard)
//	status             Register's setStatus and getStatus (WithStatusSet: an entry of a status.Set)
type Option func(*options)

// options holds every setting. defaultOptions documents the defaults in one
// place; the With* docs refer to it.
type options struct {
	// by is the With constructor of the option applied last, which each
	// sets first: what Configure checks an option against.
	by string

	name    string
	metrics metrics.Metrics
	tracer  tracing.Tracer

	pruneInterval time.Duration

	refreshInterval time.Duration
	refreshLimiter  *rate.Limiter

	retryMin, retryMax time.Duration
	retryJitter        float64
	maxAttempts        int

	breakerFailures int
	breakerBackoff  time.Duration
	breakerIsTarget func(error) bool

	roundSize    int
	roundLimiter *rate.Limiter

	concurrency      int
	operationTimeout time.Duration
	recoverPanics    bool

	startAfter   bool
	startTimeout time.Duration
	startTables  []statedb.TableMeta

	// dependencies register the jobs of WithDependency, given the
	// *reconciler[Obj]; they refuse one of another object type.
	dependencies []func(r any) (job.Job, error)

	// priority applies WithPriority to the *reconciler[Obj] it is given;
	// it refuses one of another object type. nil: priorities off.
	priority      func(r any) error
	priorityShare float64

	// setup is WithSetup's function; nil: no setup step.
	setup func(ctx context.Context, txn statedb.ReadTxn) error
	// driftCheck applies WithDriftCheck to the *reconciler[Obj] it is
	// given; it refuses one of another object type. nil: no check.
	driftCheck      func(r any) error
	driftReportOnly bool
	// statusSet applies WithStatusSet to the *reconciler[Obj] it is given;
	// it refuses one of another object type. nil: Register's setStatus and
	// getStatus.
	statusSet func(r any) error
	// pruneGuard applies WithPruneGuard to the *reconciler[Obj] it is
	// given, checking its values; nil: no guard.
	pruneGuard func(r any) error
}

// defaultOptions returns the defaults listed in the doc of [Option]; keep
// the two in step.
//
// Rounds are not rate limited by default: a round starts as soon as there is
// work, and changes that arrive while a round runs are gathered into the
// next, so rounds grow with load by themselves.
func defaultOptions() options {
	return options{
		pruneInterval: time.Hour,
		retryMin:      100 * time.Millisecond,
		retryMax:      time.Minute,
		retryJitter:   0.1,
		roundSize:     1000,
		concurrency:   1,
		recoverPanics: true,
	}
}

func (o *options) validate() error {
	switch {
	case o.pruneInterval < 0:
		return fmt.Errorf("%T: prune interval must not be negative, got %s: %w", *o, o.pruneInterval, ErrInvalidConfig)
	case o.refreshInterval < 0:
		return fmt.Errorf("%T: refresh interval must not be negative, got %s: %w", *o, o.refreshInterval, ErrInvalidConfig)
	case o.retryMin <= 0:
		return fmt.Errorf("%T: minimum retry backoff must be positive, got %s: %w", *o, o.retryMin, ErrInvalidConfig)
	case o.retryMax < o.retryMin:
		return fmt.Errorf("%T: maximum retry backoff %s is below the minimum %s: %w", *o, o.retryMax, o.retryMin, ErrInvalidConfig)
	case !(o.retryJitter >= 0 && o.retryJitter < 1):
		return fmt.Errorf("%T: retry jitter must be in [0, 1), got %v: %w", *o, o.retryJitter, ErrInvalidConfig)
	case o.maxAttempts < 0:
		return fmt.Errorf("%T: maximum attempts must not be negative, got %d: %w", *o, o.maxAttempts, ErrInvalidConfig)
	case o.breakerFailures < 0:
		return fmt.Errorf("%T: circuit breaker failures must not be negative, got %d: %w", *o, o.breakerFailures, ErrInvalidConfig)
	case o.breakerFailures > 0 && o.breakerBackoff <= 0:
		return fmt.Errorf("%T: circuit breaker probe backoff must be positive, got %s: %w", *o, o.breakerBackoff, ErrInvalidConfig)
	case o.roundSize <= 0:
		return fmt.Errorf("%T: round size must be positive, got %d: %w", *o, o.roundSize, ErrInvalidConfig)
	case o.concurrency <= 0 || o.concurrency > maxConcurrency:
		return fmt.Errorf("%T: concurrency must be in [1, %d], got %d: %w", *o, maxConcurrency, o.concurrency, ErrInvalidConfig)
	case o.operationTimeout < 0:
		return fmt.Errorf("%T: operation timeout must not be negative, got %s: %w", *o, o.operationTimeout, ErrInvalidConfig)
	case o.startTimeout < 0:
		return fmt.Errorf("%T: start timeout must not be negative, got %s: %w", *o, o.startTimeout, ErrInvalidConfig)
	case o.priority != nil && !(o.priorityShare >= 0 && o.priorityShare <= 1):
		return fmt.Errorf("%T: priority share must be in [0, 1], got %v: %w", *o, o.priorityShare, ErrInvalidConfig)
	case strings.IndexFunc(o.name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("%T: name %q holds white space or a control character: %w", *o, o.name, ErrInvalidConfig)
	case slices.Contains(o.startTables, nil):
		return fmt.Errorf("%T: WithStartAfter given a nil table: %w", *o, ErrInvalidConfig)
	}
	if err := checkLimiter("round", o.roundLimiter); err != nil {
		return err
	}
	return checkLimiter("refresh", o.refreshLimiter)
}

// checkLimiter refuses a limiter whose Wait can never succeed: with a burst
// below one (and a finite rate) or a rate of zero or less, it would stop
// the loop that waits on it for good.
func checkLimiter(which string, lim *rate.Limiter) error {
	if lim == nil || lim.Limit() == rate.Inf {
		return nil
	}
	if lim.Limit() <= 0 {
		return fmt.Errorf("options: %s limiter must allow events, got a rate of %v per second: %w", which, lim.Limit(), ErrInvalidConfig)
	}
	if lim.Burst() < 1 {
		return fmt.Errorf("options: %s limiter must have a burst of at least 1, got %d: %w", which, lim.Burst(), ErrInvalidConfig)
	}
	return nil
}

// WithName names the reconciler, to tell apart several on one table (for
// example with a [status.Set]), or several in one module. The name scopes
// its jobs, health and metrics, and with the module ID makes its ID in the
// tables of package tables: reconcilers of one module need distinct names.
// A name must not hold white space or control characters (the retries
// table joins the ID and an object's key with a space); Register refuses
// one with [ErrInvalidConfig].
func WithName(name string) Option {
	return func(o *options) {
		o.by = "WithName"
		o.name = name
	}
}

// WithMetrics sets where figures are reported, overriding
// Params.DefaultMetrics. m also receives the figures of each optional
// interface of package metrics it implements: [metrics.QueueMetrics],
// [metrics.RoundMetrics], [metrics.CommitMetrics], [metrics.PruneMetrics]
// and [metrics.RefreshMetrics].
func WithMetrics(m metrics.Metrics) Option {
	return func(o *options) {
		o.by = "WithMetrics"
		o.metrics = m
	}
}

// WithMaxAttempts gives up on an update after n failed attempts: the n-th
// failure is recorded as terminal, as if Update had returned
// [TerminalError] ("gave up after n attempts: ..."), so the object is not
// tried again until it changes, is counted as settled rather than failing
// in health, and as terminal in the metrics (a panic or a timeout still
// counts as such). Deletes are retried whatever n: a delete must not be
// lost; so is an update whose entry a batch operation lost (see
// [BatchEntry]), a fault of the implementation, not of the object. With
// [WithCircuitBreaker], no attempt counts while the breaker is open; the
// failures that open it count (see docs/control.md for a target that
// flaps). Zero, the default, retries for ever; a negative n is refused.
func WithMaxAttempts(n int) Option {
	return func(o *options) {
		o.by = "WithMaxAttempts"
		o.maxAttempts = n
	}
}

// WithCircuitBreaker stops calling a target that fails as a whole (a full
// map, netlink or a remote API gone) instead of failing each object on its
// own backoff. It opens after failures operations on distinct objects
// failed in a row, with no success between, with an error isTargetError
// says is about the target (nil: every error but a [TerminalError]; errors
// it rejects neither count nor break the run). While open:
//
//   - no operation starts but a probe: one object at a time, the first
//     probeBackoff after opening, then doubling per failed probe up to the
//     maximum retry backoff (see [WithRetry]); probes take new changes,
//     the objects held back and those waiting for a retry in turn, so
//     that an object failing for a reason of its own cannot keep it open;
//   - a failure about the target is no outcome for its object: its status,
//     attempt count and backoff stay as they were, and it waits in the
//     queue; nothing is lost, and new writes, deletes and prunes wait too.
//     One that asked for its next attempt's time ([RetryAfter]) keeps that
//     time but counts no attempt, and the time delays the next probe, up
//     to the probes' maximum backoff;
//   - health is Degraded with "target failing since T: <error>", and the
//     reconcilers table and the metrics ([metrics.RoundStats]) say so.
//
// A probe that succeeds, or that fails with an error not about the target,
// closes it, and everything waiting resumes. So does any other operation
// that succeeds, and a stop; operations a stop cuts short count for
// nothing. An object failing again with the error of its attempt before
// neither counts nor breaks the run, so that many objects failing on and
// on for one cause of their own do not open it; nor does an entry a batch
// operation lost. An opening before the target answered anything since the
// start (a target still coming up) is logged at Warn rather than Error.
// A panic in isTargetError is recovered (unless
// [WithoutPanicRecovery]), logged, and the error taken as not about the
// target. Off by default; failures == 0 keeps it off.
// A negative failures, or a probeBackoff <= 0 with the breaker on, is
// refused.
func WithCircuitBreaker(failures int, probeBackoff time.Duration, isTargetError func(error) bool) Option {
	return func(o *options) {
		o.by = "WithCircuitBreaker"
		o.breakerFailures = failures
		o.breakerBackoff = probeBackoff
		o.breakerIsTarget = isTargetError
	}
}

// WithTracer reports a span to t for every round that does something,
// operation or batch call, prune and refresh sweep (see package tracing). An operation's span
// is in the context the operation is given, so the spans it starts are its
// children. A nil t turns tracing off, the default: then nothing is traced
// and nothing allocated for it.
func WithTracer(t tracing.Tracer) Option {
	return func(o *options) {
		o.by = "WithTracer"
		o.tracer = t
	}
}

// WithPruning prunes every interval, once the table is initialized. Pruning
// is on by default, every hour. A failed prune is tried again after the
// retry backoff (see [WithRetry]); until a prune succeeds, health is
// Degraded. Prune runs between rounds: while it runs, operations already
// started go on (with [WithConcurrency]; one whose start was decided as
// the prune began may reach its first line after Prune's) but no new one
// starts, so that it never removes what an operation is applying for a
// newer object. A prune also waits while the table, or one of the tables
// of [WithStartAfter], is not initialized, including one made
// uninitialized again by an initializer registered later; health then
// names them, as when WithStartAfter's timeout passes. An
// interval of zero turns periodic pruning off, the first prune after the
// table is initialized included; [Reconciler.Prune] still prunes on
// request.
func WithPruning(interval time.Duration) Option {
	return func(o *options) {
		o.by = "WithPruning"
		o.pruneInterval = interval
	}
}

// WithRefreshing marks Done objects whose status is older than interval as
// Refreshing, so that Update is called for them again. limiter bounds how
// many objects per second are marked; nil means no bound. A limiter that
// can never allow an event (a rate of zero, or a burst below one with a
// finite rate) is refused. Refreshing is off by default; an interval of
// zero keeps it off.
func WithRefreshing(interval time.Duration, limiter *rate.Limiter) Option {
	return func(o *options) {
		o.by = "WithRefreshing"
		o.refreshInterval = interval
		o.refreshLimiter = limiter
	}
}

// WithRetry sets the backoff between attempts on a failing object: minBackoff
// after the first failure, doubling with every further failure up to
// maxBackoff. Both must be positive and minBackoff <= maxBackoff. Defaults:
// 100ms and 1m.
func WithRetry(minBackoff, maxBackoff time.Duration) Option {
	return func(o *options) {
		o.by = "WithRetry"
		o.retryMin = minBackoff
		o.retryMax = maxBackoff
	}
}

// WithRetryJitter randomises each backoff by up to ±fraction of itself, so
// that objects failing together do not retry in lockstep. fraction must be
// in [0, 1); the default is 0.1. The backoff therefore stays within
// [min, max] × (1 ± fraction).
func WithRetryJitter(fraction float64) Option {
	return func(o *options) {
		o.by = "WithRetryJitter"
		o.retryJitter = fraction
	}
}

// WithRoundLimits bounds a round, the unit in which changes are read,
// operated on and committed: at most numObjects objects per round (default
// 1000), and if limiter is not nil, rounds per second. Larger rounds mean
// fewer write transactions and bigger batches, but later status updates. A
// limiter that can never allow an event (a rate of zero, or a burst below
// one with a finite rate) is refused; one made unusable later, while the
// reconciler runs, is bypassed and reported in health until it works again.
func WithRoundLimits(numObjects int, limiter *rate.Limiter) Option {
	return func(o *options) {
		o.by = "WithRoundLimits"
		o.roundSize = numObjects
		o.roundLimiter = limiter
	}
}

// maxConcurrency bounds WithConcurrency: each worker is a goroutine,
// started with the reconciler.
const maxConcurrency = 1 << 16

// WithConcurrency runs Update and Delete on up to n workers (default 1, at
// most 65536).
// With n == 1 operations run on the reconciler's own goroutine, one after
// another, in revision order. With n > 1 each round's work is shared out
// among the workers; at most one operation per object is in flight, a newer
// version of a busy object waits for (and replaces any older version
// waiting for) the one in flight, and a slow operation holds back only the
// worker it occupies. Results are committed as they arrive. With
// BatchOperations a worker takes an equal share of the work queued at the
// time, up to the round size, as one batch.
//
// Stopping the hive cancels the context of every operation in flight and
// waits for them to return: an operation that ignores its context holds up
// the stop until it returns by itself.
func WithConcurrency(n int) Option {
	return func(o *options) {
		o.by = "WithConcurrency"
		o.concurrency = n
	}
}

// WithOperationTimeout ends each Update, Delete, batch or Prune call's
// context after d. A timed-out operation fails and is retried like any
// other. A batch still running at the deadline fails as a whole but for
// the entries it reported failed: an entry it never got to has a nil
// Result, like one that succeeded, so both are retried, and an update may
// be applied twice (operations must be idempotent anyway). The default,
// zero, sets no timeout.
func WithOperationTimeout(d time.Duration) Option {
	return func(o *options) {
		o.by = "WithOperationTimeout"
		o.operationTimeout = d
	}
}

// WithoutPanicRecovery lets panics in operations crash the program, for
// debugging. By default a panic is recovered, logged with its stack, and
// recorded as an error wrapping [ErrPanic] on the objects concerned.
func WithoutPanicRecovery() Option {
	return func(o *options) {
		o.by = "WithoutPanicRecovery"
		o.recoverPanics = false
	}
}

// WithStartAfter holds back every operation until the reconciled table and
// tables (for example the tables that operations read, or dependencies)
// are initialized, or until timeout passes, whichever comes first. Changes
// made meanwhile are not lost: they are reconciled once it starts. If the
// timeout passes first, the reconciler starts anyway and its health is
// Degraded, naming the tables still waited for, until they are initialized.
// A timeout of zero waits for as long as it takes. Pruning waits for the
// reconciled table and these tables to be initialized, whatever the
// timeout: a prune given a desired set built from tables still being
// filled would remove from the target what is only missing so far.
//
// By default the reconciler starts at once: objects are reconciled as soon
// as they are written, even while the table is still being filled.
func WithStartAfter(timeout time.Duration, tables ...statedb.TableMeta) Option {
	return func(o *options) {
		o.by = "WithStartAfter"
		o.startAfter = true
		o.startTimeout = timeout
		o.startTables = tables
	}
}
