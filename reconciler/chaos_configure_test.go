package reconciler_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// configureDraw decides, from a random source of its own (so that the
// schedule of a seed is the rest of the run's with or without the move),
// whether this step changes settings; one step in about 40 does.
func (r *chaosRun) configureDraw() (*rand.Rand, bool) {
	rng := rand.New(rand.NewPCG(r.seed^0xc0f16, uint64(len(r.steps))<<20|uint64(r.values)))
	return rng, rng.IntN(40) == 0
}

// configure changes the settings of every reconciler mid-run with
// Configure, at edge values among others: concurrency (inline and back),
// round size, retry backoff and jitter, the prune interval and, in runs
// that refresh (whose re-checks need no explaining), the refresh interval.
// The backoff stays within the run's maximum, which the model's timings
// assume. The model follows: its slots (workers, round size) and the
// options a new generation registers with. The usual checks then find
// every object converged by content, and no status applied twice, across
// the switches.
func (r *chaosRun) configure(rng *rand.Rand) {
	var (
		opts  []reconciler.Option
		words []string
	)
	if rng.IntN(2) == 0 {
		n := []int{1, 1, 2, 4, 16}[rng.IntN(5)]
		opts, words = append(opts, reconciler.WithConcurrency(n)), append(words, fmt.Sprint("workers=", n))
		r.cfg.workers = n
	}
	if rng.IntN(2) == 0 {
		n := []int{1, 3, 10, 1000, math.MaxInt}[rng.IntN(5)]
		opts, words = append(opts, reconciler.WithRoundLimits(n, nil)), append(words, fmt.Sprint("round=", n))
		r.roundSize = n
	}
	if rng.IntN(2) == 0 {
		maxB := min([]time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond}[rng.IntN(3)], r.retryMax)
		opts, words = append(opts, reconciler.WithRetry(time.Millisecond, maxB)), append(words, fmt.Sprint("retry-max=", maxB))
	}
	if rng.IntN(3) == 0 {
		j := []float64{0, 0.1, 0.99}[rng.IntN(3)]
		opts, words = append(opts, reconciler.WithRetryJitter(j)), append(words, fmt.Sprint("jitter=", j))
	}
	if rng.IntN(3) == 0 {
		d := []time.Duration{0, 2 * time.Millisecond, 20 * time.Millisecond, time.Hour}[rng.IntN(4)]
		opts, words = append(opts, reconciler.WithPruning(d)), append(words, fmt.Sprint("prune=", d))
	}
	if r.refresh && rng.IntN(3) == 0 {
		d := []time.Duration{0, time.Millisecond, 20 * time.Millisecond, 70 * time.Millisecond}[rng.IntN(4)]
		opts, words = append(opts, reconciler.WithRefreshing(d, rate.NewLimiter(2000, 100))), append(words, fmt.Sprint("refresh=", d))
	}
	if len(opts) == 0 {
		return
	}
	later := slices.Clone(opts)
	for i, w := range words {
		if w == "prune=0s" {
			// A new generation must prune once initialized, as the
			// model checks at the end: it prunes hourly.
			later[i] = reconciler.WithPruning(time.Hour)
		}
	}
	for i, rc := range r.gen.recs {
		require.NoError(r.t, rc.Configure(opts...), "%sConfigure", r.recs[i].label())
	}
	r.opts = append(r.opts, later...) // a new generation starts with them
	r.logf("configure %s", strings.Join(words, " "))
}

// chaosRaiseOdds: one step in chaosRaiseOdds makes raiseBackoffWhileRetrying.
const chaosRaiseOdds = 30

// raiseBackoffWhileRetrying: an update fails once, its retry is timed,
// and a Configure then raises the backoff to a minute (the jitter left as
// it is): "a retry already timed keeps its time", so the update must be
// Done within a second, not a minute's jitter window later (the retry
// timer fired the new minimum times the jitter past the earliest retry).
// Nothing fails meanwhile (calm, and x spared), so no retry is timed with the minute;
// the backoff is then put back as the run had it. It draws from a stream
// of its own, and leaves alone the "-set" runs, whose writes draw from the
// schedule, and the batch runs, whose batches may lose an entry whatever
// the odds: another object's failure then would wait the minute.
func (r *chaosRun) raiseBackoffWhileRetrying() {
	if r.cfg.set || r.cfg.batch || r.raiseRNG.IntN(chaosRaiseOdds) != 0 {
		return
	}
	if why := r.unquiet(); why != "" {
		return
	}
	defer r.calm()()
	x, vx, rev := r.failingOnce(r.raiseRNG)
	kind := func(k status.Kind) string {
		obj, found := r.get(x)
		if !found || obj.Value != vx {
			return "gone"
		}
		for _, rec := range r.recs {
			if rec.getStatus(obj).Kind != k {
				return "not " + k.String()
			}
		}
		return ""
	}
	if problem := r.until(time.Second, func() string { return kind(status.KindError) }); problem != "" {
		r.logf("@%d set %s=%s, failing once: %s within 1s; left", rev, x, vx, problem)
		return
	}
	// From now on x's calls, and the batches holding it, do not fail (a
	// batch may panic or lose an entry whatever the odds): a failure now
	// would be timed with the minute.
	for _, rec := range r.recs {
		rec.target.with(func() { rec.target.rc.spare = x })
	}
	defer func() {
		for _, rec := range r.recs {
			rec.target.with(func() { rec.target.rc.spare = "" })
		}
	}()
	raise := reconciler.WithRetry(time.Minute, time.Minute)
	for i, rc := range r.gen.recs {
		require.NoError(r.t, rc.Configure(raise), "%sConfigure", r.recs[i].label())
	}
	problem := r.until(time.Second, func() string { return kind(status.KindDone) })
	back := reconciler.WithRetry(time.Millisecond, min(10*time.Millisecond, r.retryMax))
	for i, rc := range r.gen.recs {
		require.NoError(r.t, rc.Configure(back), "%sConfigure", r.recs[i].label())
	}
	if problem != "" {
		for _, rec := range r.recs {
			rec.target.with(func() {
				rec.target.violate("%s=%s (@%d), its retry timed, then the backoff raised to a minute: %s within 1s; a retry already timed keeps its time", x, vx, rev, problem)
			})
		}
	}
	r.logf("@%d set %s=%s, failing once; with its retry timed, the backoff raised to a minute and put back: %s", rev, x, vx, map[bool]string{true: "retried in time", false: problem}[problem == ""])
}

// dropFailingLimiter: Configure gives the reconcilers a round limiter,
// which then fails (a burst of zero), and health says so; a Configure
// dropping it must end that: health is no longer about the limiter once a
// round ran (it stayed Degraded for good). It draws from raiseRNG.
func (r *chaosRun) dropFailingLimiter() {
	if r.cfg.set || r.raiseRNG.IntN(chaosRaiseOdds) != 0 {
		return // the "-set" runs' writes draw from the schedule
	}
	if why := r.unquiet(); why != "" {
		return
	}
	write := func(why string) {
		r.values++
		r.set(fmt.Sprintf("k%02d", r.raiseRNG.IntN(chaosKeys)), fmt.Sprintf("v%d.%d", r.gens, r.values), why)
	}
	lim := rate.NewLimiter(rate.Inf, 1)
	configure := func(l *rate.Limiter) {
		for i, rc := range r.gen.recs {
			require.NoError(r.t, rc.Configure(reconciler.WithRoundLimits(r.roundSize, l)), "%sConfigure", r.recs[i].label())
		}
	}
	limiterSaid := func(rec *chaosRec) bool { return r.healthSays(rec, "limiter") }
	configure(lim)
	lim.SetLimit(100)
	lim.SetBurst(0) // Wait fails from now on
	write(", the round limiter failing")
	if problem := r.until(time.Second, func() string {
		for _, rec := range r.recs {
			if !limiterSaid(rec) {
				return rec.label() + "health says nothing of the failing limiter"
			}
		}
		return ""
	}); problem != "" {
		configure(nil)
		r.logf("round limiter failing: %s within 1s; dropped", problem)
		return
	}
	configure(nil)
	write(", the failing round limiter dropped")
	if problem := r.until(2*time.Second, func() string {
		for _, rec := range r.recs {
			if limiterSaid(rec) {
				return rec.label() + "health still says the limiter fails"
			}
		}
		return ""
	}); problem != "" {
		for _, rec := range r.recs {
			rec.target.with(func() {
				rec.target.violate("a failing round limiter dropped by Configure: %s 2s on", problem)
			})
		}
		return
	}
	r.logf("the failing round limiter dropped: health recovered")
}
