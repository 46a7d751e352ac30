package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// driftRefresh is the refresh workload (see refresh) with every object in
// sync, with or without a drift check: the seconds from the jobs' start
// until every object is Done again ("s"), the Update calls, which are the
// target's writes ("writes"), and the checks ("checks").
func driftRefresh(ctx context.Context, cfg config, check bool) (measurement, error) {
	m := newMeasurement()
	s := setup{impl: implConverge, objects: cfg.objects, preload: cfg.objects, refresh: 10 * time.Minute, updateTarget: cfg.objects}
	reached := (<-chan struct{})(nil)
	if check {
		s.driftChecks = newDriftCounter(cfg.objects)
		reached = s.driftChecks.reached
	}
	err := runEnv(ctx, cfg, s, func(ctx context.Context, e *env) error {
		if reached == nil {
			reached = e.ops.reached
		}
		select {
		case <-reached:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d objects refreshed: %w", e.ops.updates.Load(), cfg.objects, ctx.Err())
		}
		if err := e.waitCaughtUp(ctx); err != nil {
			return err
		}
		m.set("s", time.Since(e.ready).Seconds())
		m.set("writes", float64(e.ops.updates.Load()))
		if s.driftChecks != nil {
			m.set("checks", float64(s.driftChecks.checks.Load()))
		}
		return e.checkAllDone(cfg.objects, e.ready)
	})
	return m, err
}

// TestDriftRefresh runs a refresh of objects in sync with and without
// WithDriftCheck, CONVERGE_DRIFT_OBJECTS of them (default 10000; the
// figures in README.md are of 1000000), CONVERGE_DRIFT_RUNS times each
// (default 1), alternating, and checks that the check makes no target
// write:
//
//	CONVERGE_DRIFT_OBJECTS=1000000 CONVERGE_DRIFT_RUNS=3 go test -run TestDriftRefresh -v .
func TestDriftRefresh(t *testing.T) {
	n, runs := envSize(t, "CONVERGE_DRIFT_OBJECTS", 10_000), envSize(t, "CONVERGE_DRIFT_RUNS", 1)
	cfg := config{objects: n, timeout: 10 * time.Minute}
	for run := range runs {
		for _, check := range []bool{false, true} {
			m, err := driftRefresh(context.Background(), cfg, check)
			require.NoError(t, err)
			name := map[bool]string{false: "refresh (no check)", true: "refresh with WithDriftCheck"}[check]
			t.Logf("run %d, %s, %d objects in sync: %.3f s, %.0f target writes, %.0f checks", run+1, name, n, m.values["s"], m.values["writes"], m.values["checks"])
			if check {
				require.Zero(t, m.values["writes"], "a refresh of objects in sync writes nothing to the target")
				require.Equal(t, float64(n), m.values["checks"])
			} else {
				require.Equal(t, float64(n), m.values["writes"])
			}
		}
	}
}

func envSize(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	return n
}
