package reconciler_test

// TestChaos runs the reconciler against an in-memory target under random
// schedules: inserts, updates, deletes and re-inserts over a small key space,
// reverts to a value written earlier, identical re-inserts of the object
// as it is, and re-inserts of the object as read some steps earlier (all
// keep the status identities they carry), and the same moves
// made on purpose while the object's operation is held in flight, while a
// newer version is parked behind it, or while it waits for a retry;
// a delete, a new value and the object in flight again while its update is
// held; operations that fail, fail after applying, fail terminally, ask for
// a retry, panic or are slow (honouring ctx); batches that reorder their
// entries or replace one with an entry of their own; random
// Reconciler.Prune calls, Pause and Resume at any moment, Pause also from
// inside an operation of a round for which a prune is due; option values at
// the edges (round sizes of 1 and math.MaxInt, a retry maximum of
// MaxInt64); and restarts: a new hive and a freshly populated table over
// the same target, or the same hive stopped, changed while stopped, and
// started again.
// At the end the faults are turned off and the system must converge: the
// target holds exactly the table's key→value pairs, every object is Done
// (or Error for a "poison" value, which always fails terminally and must
// never reach the target), and health is OK. Along the way the targets
// check that at most one operation per object is in flight, an object's
// operations come in revision order, no operation starts after Stop
// returned, none starts after every Pause returned and before Resume, nor
// does a prune, none while its reconciler's prune runs, Prune comes only after initialization
// and with the whole table, and no update is redone once it succeeded for a
// status. The "-set"
// configurations run two reconcilers sharing the objects through a
// status.Set, each with its own target.
//
// Every seed is a subtest, TestChaos/<config>/seed=<n>; its schedule is
// derived from the seed alone. Fault decisions come from a second RNG with
// the same seed, drawn as operations arrive, so with several workers a replay
// takes the same steps but not necessarily the same faults. (A move that
// waits briefly for an operation to start takes a shorter path when it does
// not, so on a busy machine a replay may part from the original there.)
//
// Files: chaos_test.go is the entry point and a run's settings;
// chaos_model_test.go the target system, the operations and the hives;
// chaos_gen_test.go the generator's moves (chaosRun.step); and
// chaos_check_test.go the checks, along the way and at the end.
//
// Environment:
//
//	CONVERGE_CHAOS_SEEDS=N  run N seeds per configuration (default 10)
//	CONVERGE_CHAOS_FOR=D    run seeds for duration D instead (for example 10m),
//	                        shared equally by the configurations; prints the
//	                        seed range each covered
//	CONVERGE_CHAOS_FIRST=K  number seeds from K (default 1), to cover new ground
//	CONVERGE_CHAOS_SEED=S   run seed S only (replay); or -run 'TestChaos/<config>/seed=S$'
//	CONVERGE_CHAOS_LOG=1    log the hive and reconciler at debug level
//	CONVERGE_CHAOS_ALLSTEPS=1  on a failure, print every step, not the last 60
//	CONVERGE_CHAOS_PRINT=1  print every seed's steps, also when it passes (with -v),
//	                        to compare the schedules of two versions
//
// A long run:
//
//	CONVERGE_CHAOS_SEEDS=1000 go test -run TestChaos -failfast -timeout 60m ./reconciler/
//	CONVERGE_CHAOS_FOR=10m go test -run TestChaos -v -timeout 20m ./reconciler/ | grep ^chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/hivetest"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

const (
	chaosDefaultSeeds = 10
	chaosKeys         = 30
	chaosMaxRestarts  = 3
	chaosMaxHeldStops = 2 // stops while an update is held, besides the restarts
	chaosHealTimeout  = 20 * time.Second
)

type chaosConfig struct {
	workers int
	batch   bool
	set     bool // two reconcilers, "a" and "b", share the objects through a status.Set
}

func (c chaosConfig) String() string {
	mode := "single"
	if c.batch {
		mode = "batch"
	}
	if c.set {
		mode += "-set"
	}
	return fmt.Sprintf("workers=%d-%s", c.workers, mode)
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

func chaosSeeds(t *testing.T) []uint64 {
	if os.Getenv("CONVERGE_CHAOS_SEED") != "" {
		return []uint64{envInt(t, "CONVERGE_CHAOS_SEED", 0)}
	}
	n := envInt(t, "CONVERGE_CHAOS_SEEDS", chaosDefaultSeeds)
	first := envInt(t, "CONVERGE_CHAOS_FIRST", 1)
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = first + uint64(i)
	}
	return seeds
}

func TestChaos(t *testing.T) {
	seeds := chaosSeeds(t)
	configs := []chaosConfig{
		{1, false, false}, {1, true, false}, {4, false, false}, {4, true, false},
		{1, false, true}, {4, false, true}, {4, true, true},
	}
	// CONVERGE_CHAOS_FOR runs seeds for a while instead of a count: each
	// configuration gets an equal share of the time, from the first seed on.
	var share time.Duration
	if s := os.Getenv("CONVERGE_CHAOS_FOR"); s != "" && os.Getenv("CONVERGE_CHAOS_SEED") == "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "CONVERGE_CHAOS_FOR")
		share = d / time.Duration(len(configs))
	}
	for _, cfg := range configs {
		t.Run(cfg.String(), func(t *testing.T) {
			if share == 0 {
				for _, seed := range seeds {
					t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
						runChaos(t, cfg, seed)
					})
				}
				return
			}
			first := envInt(t, "CONVERGE_CHAOS_FIRST", 1)
			seed, end := first, time.Now().Add(share)
			for ; time.Now().Before(end) && !t.Failed(); seed++ {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					runChaos(t, cfg, seed)
				})
			}
			msg := fmt.Sprintf("chaos %s: seeds %d to %d in %s", cfg, first, seed-1, share)
			t.Log(msg)
			fmt.Println(msg)
		})
	}
}

type chaosRun struct {
	t       *testing.T
	cfg     chaosConfig
	seed    uint64
	rng     *rand.Rand // the schedule
	recs    []*chaosRec
	opts    []reconciler.Option
	refresh bool
	// manualPrune enables random Prune() calls. Without them, the prune at
	// the end of each generation can only be the one after initialization.
	manualPrune bool
	roundSize   int
	log         *slog.Logger
	gen         *chaosGen
	gens        int
	restarts    int
	heldStops   int // stops while an update is held (writeBackAfterPrune)
	initIn      int // steps until the current generation is marked initialized; <0 once done
	steps       []string
	// model is what the test wrote: the table's key→value pairs must equal
	// it at all times, since the reconcilers write only statuses.
	model  map[string]string
	values int
	// written holds, per key, the objects the test inserted in this
	// generation, as it inserted them, for reverts.
	written map[string][]*item
	// read holds, per key, the object as the last identical re-insert read
	// it, statuses included, for writing back a stale read.
	read map[string]*item
	// writtenAt is when (len(steps)) the test inserted each object of
	// written; depChangedAt when each dependency last changed. depStale
	// holds the keys whose object was written back with statuses that may
	// predate a change of their dependency (see writeBackUndoesMark).
	writtenAt    map[*item]int
	depChangedAt map[string]int
	depStale     map[string]bool
}

func runChaos(t *testing.T, cfg chaosConfig, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	run := &chaosRun{t: t, cfg: cfg, seed: seed, rng: rng, model: map[string]string{}, written: map[string][]*item{}, read: map[string]*item{},
		writtenAt: map[*item]int{}, depChangedAt: map[string]int{}, depStale: map[string]bool{}}

	// Per-seed settings.
	failProb := 0.05 + 0.45*rng.Float64()
	slowProb := 0.3 * rng.Float64()
	if cfg.set {
		for i, name := range []string{"a", "b"} {
			run.recs = append(run.recs, &chaosRec{
				name:      name,
				target:    newChaosTarget(seed+uint64(i)<<32, failProb, slowProb),
				getStatus: func(it *item) status.Status { return it.Statuses.Get(name) },
				setStatus: func(it *item, s status.Status) *item { it.Statuses = it.Statuses.Set(name, s); return it },
			})
		}
	} else {
		run.recs = []*chaosRec{{
			target:    newChaosTarget(seed, failProb, slowProb),
			getStatus: (*item).getStatus,
			setStatus: (*item).setStatus,
		}}
	}
	roundSize := []int{1, 3, 10, 1000, math.MaxInt}[rng.IntN(5)]
	run.roundSize = roundSize
	retryMax := 10 * time.Millisecond
	if rng.IntN(6) == 0 && failProb < 0.25 {
		retryMax = time.Duration(math.MaxInt64) // saturates; failures stay few
	}
	pruneInterval := time.Hour // only the initial prune and Prune() calls
	if rng.IntN(5) == 0 {
		pruneInterval = time.Duration(5+rng.IntN(30)) * time.Millisecond
	}
	run.opts = []reconciler.Option{
		reconciler.WithConcurrency(cfg.workers),
		reconciler.WithRetry(time.Millisecond, retryMax),
		reconciler.WithRoundLimits(roundSize, nil),
		reconciler.WithPruning(pruneInterval),
	}
	run.manualPrune = rng.IntN(3) > 0
	var timeout time.Duration
	if rng.IntN(4) == 0 {
		timeout = 20 * time.Millisecond
		run.opts = append(run.opts, reconciler.WithOperationTimeout(timeout))
	}
	if rng.IntN(3) == 0 {
		run.refresh = true
		run.opts = append(run.opts, reconciler.WithRefreshing(time.Duration(20+rng.IntN(50))*time.Millisecond, rate.NewLimiter(2000, 100)))
	}
	settings := fmt.Sprintf("fail=%.2f slow=%.2f round=%d retry-max=%s prune=%s manual-prune=%v timeout=%s refresh=%v",
		failProb, slowProb, roundSize, retryMax, pruneInterval, run.manualPrune, timeout, run.refresh)

	level := slog.LevelError + 1 // panics are logged at Error; keep quiet by default
	if os.Getenv("CONVERGE_CHAOS_LOG") != "" {
		level = slog.LevelDebug
	}
	run.log = hivetest.Logger(t, hivetest.LogLevel(level))

	t.Cleanup(func() {
		if run.gen != nil && run.gen.hive != nil {
			_ = run.gen.hive.Stop(run.log, context.Background())
		}
		if t.Failed() {
			from := max(0, len(run.steps)-60)
			if os.Getenv("CONVERGE_CHAOS_ALLSTEPS") != "" {
				from = 0
			}
			t.Logf("chaos %s seed=%d (%s) failed; last steps:\n  %s", cfg, seed, settings,
				strings.Join(run.steps[from:], "\n  "))
			t.Logf("replay: CONVERGE_CHAOS_SEED=%d go test -run 'TestChaos/%s/seed=%d$' -v ./reconciler/", seed, cfg, seed)
		} else if os.Getenv("CONVERGE_CHAOS_PRINT") != "" {
			t.Logf("chaos %s seed=%d (%s) steps:\n  %s", cfg, seed, settings, strings.Join(run.steps, "\n  "))
		}
	})

	run.startGen(nil)
	steps := 80 + rng.IntN(170)
	for range steps {
		run.step()
		if run.initIn > 0 {
			run.initIn--
		}
		if run.initIn == 0 {
			run.markInitialized()
		}
	}
	run.healAndCheck(settings)
	run.stopGen()
	run.checkViolations()
}

func (r *chaosRun) logf(format string, args ...any) {
	r.steps = append(r.steps, fmt.Sprintf(format, args...))
}
