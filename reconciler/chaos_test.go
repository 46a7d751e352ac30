package reconciler_test

// TestChaos runs the reconciler against in-memory targets under random
// schedules of the moves of chaos_gen_test.go, with faulty operations and
// settings at the edges, checking its guarantees along the way and, once
// the faults stop, convergence (chaos_check_test.go); chaos_model_test.go
// holds the targets, operations and hives. The "-set" configurations run
// two reconcilers sharing the objects through a status.Set. Each seed is a
// subtest, TestChaos/<config>/seed=<n>; faults come from a second RNG,
// drawn as operations arrive, so with workers a replay may differ there.
//
//	(default)                  3 of the seeds 1 to 10 per configuration,
//	                           the configurations taking turns: the first
//	                           1 to 3, the next 4 to 6, the fourth 10, 1
//	                           and 2, ...; each seed runs in 3 of them
//	CONVERGE_LONG=1            10 seeds per configuration, 1 to 10 in each
//	CONVERGE_CHAOS_SEEDS=N     N seeds per configuration, 1 to N in each
//	CONVERGE_CHAOS_FOR=D       seeds for duration D, shared by the
//	                           configurations; prints each one's seed range
//	CONVERGE_CHAOS_FIRST=K     number seeds from K (default 1)
//	CONVERGE_CHAOS_SEED=S      seed S only (replay)
//	CONVERGE_CHAOS_LOG=1       log the hive and reconciler at debug level
//	CONVERGE_CHAOS_ALLSTEPS=1  on a failure print every step, not the last 60
//	CONVERGE_CHAOS_PRINT=1     print every seed's steps, also when it passes (-v)
//	CONVERGE_CHAOS_STACKS=1    on a wait that fails, print every goroutine and each
//	                           reconciler's calls and prunes

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/statedb"

	"github.com/cilium/hive/hivetest"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
)

const (
	chaosKeys         = 30
	chaosMaxRestarts  = 3
	chaosMaxHeldStops = 2 // stops while an update is held, besides the restarts
	chaosHealTimeout  = 20 * time.Second
)

type chaosConfig struct {
	workers int
	batch   bool
	set     bool // two reconcilers, "a" and "b", share the objects through a status.Set
	sets    bool // with set: 2 to 4 of five names, leaving and joining (chaos_sets_test.go)
	process bool // the batch operations implement BatchProcessor (with batch)
	alone   bool // no Operations: the batch operations serve alone and prune (with batch)
}

func (c chaosConfig) String() string {
	return fmt.Sprintf("workers=%d-%s%s%s%s%s", c.workers, map[bool]string{false: "single", true: "batch"}[c.batch],
		map[bool]string{true: "-process"}[c.process], map[bool]string{true: "-alone"}[c.alone], map[bool]string{true: "-set"}[c.set], map[bool]string{true: "s"}[c.sets])
}

func envInt(t *testing.T, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "environment variable %s", name)
	return n
}

// chaosQuickSeeds is the number of seeds of each configuration in the
// default run, taken in turn from the chaosLongSeeds seeds of the long run,
// so that every seed's settings (a breaker, rechecks, a saturating
// backoff come with the seed, not the configuration) run in some
// configuration, and the run is a part of the long one.
const (
	chaosQuickSeeds = 3
	chaosLongSeeds  = 10
)

func TestChaos(t *testing.T) {
	first, n := envInt(t, "CONVERGE_CHAOS_FIRST", 1), envInt(t, "CONVERGE_CHAOS_SEEDS", 0)
	spread := n == 0 && !longTests()
	switch {
	case os.Getenv("CONVERGE_CHAOS_SEED") != "":
		first, n, spread = envInt(t, "CONVERGE_CHAOS_SEED", 0), 1, false
	case n == 0 && spread:
		n = chaosQuickSeeds
	case n == 0:
		n = chaosLongSeeds
	}
	configs := []chaosConfig{
		{workers: 1}, {workers: 1, batch: true}, {workers: 4}, {workers: 4, batch: true},
		{workers: 1, set: true}, {workers: 4, set: true}, {workers: 4, batch: true, set: true},
		{workers: 1, batch: true, process: true}, {workers: 4, batch: true, process: true}, {workers: 4, batch: true, alone: true},
		{workers: 4, set: true, sets: true}, {workers: 1, set: true, sets: true},
	}
	var share time.Duration
	if s := os.Getenv("CONVERGE_CHAOS_FOR"); s != "" && os.Getenv("CONVERGE_CHAOS_SEED") == "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "CONVERGE_CHAOS_FOR")
		share = d / time.Duration(len(configs))
	}
	for i, cfg := range configs {
		t.Run(cfg.String(), func(t *testing.T) {
			if spread && share == 0 {
				for j := range n {
					seed := first + (uint64(i)*n+j)%chaosLongSeeds
					t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runChaos(t, cfg, seed) })
				}
				return
			}
			end, seed := time.Now().Add(share), first
			for ; share == 0 && seed < first+n || share > 0 && time.Now().Before(end) && !t.Failed(); seed++ {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runChaos(t, cfg, seed) })
			}
			if share > 0 {
				msg := fmt.Sprintf("chaos %s: seeds %d to %d in %s", cfg, first, seed-1, share)
				t.Log(msg)
				fmt.Println(msg)
			}
		})
	}
}

type chaosRun struct {
	t           *testing.T
	cfg         chaosConfig
	seed        uint64
	rng         *rand.Rand // the schedule
	lateRNG     *rand.Rand // lateAskOnTheNextCall's draws, apart from the schedule (chaos_recheck_test.go)
	streamRNG   *rand.Rand // retryAmidAStream's, likewise (chaos_stream_test.go)
	raiseRNG    *rand.Rand // raiseBackoffWhileRetrying's, likewise (chaos_configure_test.go)
	recs        []*chaosRec
	opts        []reconciler.Option
	refresh     bool
	heldChecked bool // recheckThenDelete ran (once a seed: it waits for StateDB's graveyard)
	timeouts    bool // WithOperationTimeout: a batch cut short is retried whole
	manualPrune bool // random Prune() calls
	breaker     bool // a circuit breaker whose probes come within 10ms (partialOutage)
	priority    chaosSetting
	probeMin    time.Duration // the breaker's probe backoff, if it has one whose classifier does not panic (checkProbes)
	outages     int
	retryMax    time.Duration
	log         *slog.Logger
	gen         *chaosGen
	steps       []string
	model       map[string]string           // what the test wrote
	written     map[string][]*item          // per key, the objects inserted in this generation (reverts)
	read        map[string]*item            // per key, the object as a re-insert last read it
	lastWrite   map[string]statedb.Revision // per key, the revision of the test's last write in this generation
	marks       []chaosMark                 // the test's writes in this generation, oldest first
	// For writeBackUndoesMark.
	writtenAt    map[*item]int
	depChangedAt map[string]int
	depStale     map[string]bool
	// roundSize, generations, restarts, stops while an update is held, values
	// written, and steps until the table is initialized (<0 once done).
	roundSize, gens, restarts, heldStops, values, initIn int

	// WithDriftCheck, and the drifts driftThenRefresh made (chaos_drift_test.go).
	driftMode chaosDriftMode
	drifts    map[string]chaosDrift

	sets *chaosSets // the names of a "-sets" run, or nil (chaos_sets_test.go)
}

func runChaos(t *testing.T, cfg chaosConfig, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	r := &chaosRun{t: t, cfg: cfg, seed: seed, rng: rng, lateRNG: rand.New(rand.NewPCG(seed, 0x1a7e)), streamRNG: rand.New(rand.NewPCG(seed, 0x57ea)), raiseRNG: rand.New(rand.NewPCG(seed, 0x2a15e)), model: map[string]string{}, written: map[string][]*item{}, read: map[string]*item{},
		writtenAt: map[*item]int{}, depChangedAt: map[string]int{}, depStale: map[string]bool{}, lastWrite: map[string]statedb.Revision{}}

	failProb, slowProb := 0.05+0.45*rng.Float64(), 0.3*rng.Float64()
	if cfg.set {
		for i, name := range []string{"a", "b"} {
			get, set := statusOf(name)
			r.recs = append(r.recs, &chaosRec{name: name, target: newChaosTarget(seed+uint64(i)<<32, failProb, slowProb), getStatus: get, setStatus: set})
		}
	} else {
		r.recs = []*chaosRec{{target: newChaosTarget(seed, failProb, slowProb), getStatus: (*item).getStatus, setStatus: (*item).setStatus}}
	}
	r.drifts = map[string]chaosDrift{}
	r.setDriftMode(chaosDriftModeOf(seed))
	r.roundSize = []int{1, 3, 10, 1000, math.MaxInt}[rng.IntN(5)]
	retryMax, pruneInterval, timeout := 10*time.Millisecond, time.Hour, time.Duration(0) // prunes: the initial one and Prune()
	if rng.IntN(6) == 0 && failProb < 0.25 {
		retryMax = time.Duration(math.MaxInt64) // saturates; failures stay few
	}
	if rng.IntN(5) == 0 {
		pruneInterval = time.Duration(5+rng.IntN(30)) * time.Millisecond
	}
	r.retryMax = retryMax
	r.opts = []reconciler.Option{
		reconciler.WithConcurrency(cfg.workers),
		reconciler.WithRetry(time.Millisecond, retryMax),
		reconciler.WithRoundLimits(r.roundSize, nil),
		reconciler.WithPruning(pruneInterval),
	}
	r.manualPrune = rng.IntN(3) > 0
	if rng.IntN(4) == 0 {
		timeout, r.timeouts = 20*time.Millisecond, true
		r.opts = append(r.opts, reconciler.WithOperationTimeout(timeout))
	}
	if r.refresh = rng.IntN(3) == 0; r.refresh {
		for _, rec := range r.recs {
			rec.target.rc.refreshing = true // every object is marked: no marking to explain
		}
		r.opts = append(r.opts, reconciler.WithRefreshing(time.Duration(20+rng.IntN(50))*time.Millisecond, rate.NewLimiter(2000, 100)))
	}
	priority := chaosPriority(seed)
	r.priority = priority // each reconciler counts its reads (see countPriority)
	breaker := "off"
	if rng.IntN(3) == 0 { // outages (see chaosRun.outage) open it
		n, probe, classify := 1+rng.IntN(4), time.Duration(1+rng.IntN(5))*time.Millisecond, isDown
		if rng.IntN(2) == 0 {
			classify = nil // every error counts
		} else if seed%2 == 0 {
			classify = panickyIsDown // a user's classifier with a bug
		}
		r.opts = append(r.opts, reconciler.WithCircuitBreaker(n, probe, classify))
		if seed%2 != 0 || classify == nil {
			r.probeMin = probe
		}
		r.breaker = retryMax < time.Second // probes come within the retry maximum: see partialOutage
		breaker = fmt.Sprintf("%d/%s/classified=%v", n, probe, classify != nil)
	}
	if rng.IntN(3) == 0 {
		p := 0.05 + 0.3*rng.Float64()
		for _, rec := range r.recs {
			rec.target.recheckProb = p
		}
	}
	r.drawNames()
	settings := fmt.Sprintf("fail=%.2f slow=%.2f round=%d retry-max=%s prune=%s manual-prune=%v timeout=%s refresh=%v breaker=%s rechecks=%.2f priority=%s drift=%s",
		failProb, slowProb, r.roundSize, retryMax, pruneInterval, r.manualPrune, timeout, r.refresh, breaker, r.recs[0].target.recheckProb, priority, r.driftMode)

	level := map[bool]slog.Level{false: slog.LevelError + 1, true: slog.LevelDebug}[os.Getenv("CONVERGE_CHAOS_LOG") != ""]
	r.log = hivetest.Logger(t, hivetest.LogLevel(level)) // panics are logged at Error: quiet by default

	t.Cleanup(func() {
		if r.gen != nil && r.gen.hive != nil {
			_ = r.gen.hive.Stop(r.log, context.Background())
		}
		if from := max(0, len(r.steps)-60); t.Failed() {
			if os.Getenv("CONVERGE_CHAOS_ALLSTEPS") != "" {
				from = 0
			}
			t.Logf("chaos %s seed=%d (%s) failed; last steps:\n  %s", cfg, seed, settings, strings.Join(r.steps[from:], "\n  "))
			t.Logf("replay: CONVERGE_CHAOS_SEED=%d go test -run 'TestChaos/%s/seed=%d$' -v ./reconciler/", seed, cfg, seed)
		} else if os.Getenv("CONVERGE_CHAOS_PRINT") != "" {
			t.Logf("chaos %s seed=%d (%s) steps:\n  %s", cfg, seed, settings, strings.Join(r.steps, "\n  "))
		}
	})

	r.startGen(nil)
	for range 80 + rng.IntN(170) {
		r.step()
		if r.initIn > 0 {
			r.initIn--
		}
		if r.initIn == 0 {
			r.markInitialized()
		}
	}
	r.healAndCheck(settings)
	r.stopGen()
	r.checkViolations()
}

// chaosSetting is a WithPriority setting of a chaos run, or none (nil fn).
type chaosSetting struct {
	name  string
	fn    func(*item) int
	share float64
}

func (p chaosSetting) String() string {
	if p.fn == nil {
		return "off"
	}
	return fmt.Sprintf("%s/%v", p.name, p.share)
}

// chaosPriority draws a WithPriority setting for seed from an RNG of its
// own, so that the schedule of a seed is the same with or without it: off
// for one seed in six, else a function of the key or the value (some
// at the ends of int's range, one that panics for some objects) and a
// share at the edges (0, the default, and 1) or between.
func chaosPriority(seed uint64) chaosSetting {
	rng := rand.New(rand.NewPCG(seed, 0x9a10))
	if seed%6 == 0 {
		return chaosSetting{}
	}
	salt := rng.Uint32()
	hash := func(s string) int {
		h := fnv.New32a()
		fmt.Fprint(h, salt, s)
		return int(h.Sum32())
	}
	fns := []chaosSetting{
		{name: "by-key", fn: func(it *item) int { return hash(it.ID)%7 - 3 }},
		{name: "by-value", fn: func(it *item) int { return hash(it.Value) % 3 }},
		{name: "extremes", fn: func(it *item) int {
			return []int{math.MinInt, 0, math.MaxInt}[hash(it.ID+it.Value)%3]
		}},
		{name: "constant", fn: func(*item) int { return 1 }},
		{name: "panics", fn: func(it *item) int {
			if hash(it.ID)%4 == 0 {
				panic("chaos priority")
			}
			return hash(it.ID) % 5
		}},
	}
	p := fns[seed%uint64(len(fns))] // every function in any five seeds in a row
	p.share = []float64{0, 0, 1, 0.01, 0.125, 0.5, rng.Float64(), rng.Float64()}[rng.IntN(8)]
	return p
}

func (r *chaosRun) logf(format string, args ...any) {
	r.steps = append(r.steps, fmt.Sprintf(format, args...))
}
