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
