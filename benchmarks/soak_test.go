package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ramp returns n values start, start+step, ... plus noise that repeats
// every four values (+a, −a, +a/2, −a/2), so that medians are exact.
func ramp(n int, start, step, a float64) []float64 {
	noise := []float64{a, -a, a / 2, -a / 2}
	out := make([]float64, n)
	for i := range out {
		out[i] = start + step*float64(i) + noise[i%4]
	}
	return out
}

func TestJudgeGrowth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []float64
		floor  float64
		grew   bool
		tooFew bool
	}{
		{"flat", ramp(60, 100, 0, 0), 0, false, false},
		{"flat and noisy", ramp(60, 100, 0, 30), 0, false, false},
		{"shrinking", ramp(60, 100, -1, 5), 0, false, false},
		// Grows by 59 over the run: medians about 40 apart, against an
		// allowance of 10 (10% of 100) or the noise.
		{"steady growth", ramp(60, 100, 1, 0), 0, true, false},
		{"steady growth under noise", ramp(60, 100, 1, 5), 0, true, false},
		// The same growth is within a tolerance of 10% of 1000.
		{"growth within tolerance", ramp(60, 1000, 1, 0), 0, false, false},
		// Noise as large as the growth: not beyond noise.
		{"growth within noise", ramp(60, 100, 1, 200), 0, false, false},
		{"growth within the floor", ramp(60, 100, 1, 0), 50, false, false},
		{"step", append(ramp(30, 100, 0, 2), ramp(30, 150, 0, 2)...), 0, true, false},
		{"a count flickering between 0 and 1", []float64{0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0}, 2, false, false},
		{"a count that starts at 0 and climbs", []float64{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, 2, true, false},
		{"empty intervals are left out", []float64{10, math.NaN(), 10, 10, math.NaN(), 10, 10, 10}, 0, false, false},
		{"too few", []float64{1, 2, 3, 4, 5}, 0, false, true},
		{"too few once empty intervals are left out", []float64{1, math.NaN(), 2, 3, math.NaN(), 4, 5}, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeGrowth(tc.values, soakTolerance, tc.floor)
			if v.grew != tc.grew || v.tooFew != tc.tooFew {
				t.Errorf("judgeGrowth = %+v, want grew %v, tooFew %v", v, tc.grew, tc.tooFew)
			}
		})
	}
}

func TestJudgeGrowthFigures(t *testing.T) {
	// 9 values: thirds of 3; first third 1 2 3, last third 10 20 30.
	v := judgeGrowth([]float64{1, 2, 3, 4, 5, 6, 10, 20, 30}, 0.10, 0)
	if v.n != 9 || v.first != 2 || v.last != 20 {
		t.Errorf("n, first, last = %d, %v, %v; want 9, 2, 20", v.n, v.first, v.last)
	}
	// Interquartile ranges: 2.5−1.5 = 1 and 25−15 = 10.
	if v.noise != 10 || v.allowed != 10 || !v.grew {
		t.Errorf("noise, allowed, grew = %v, %v, %v; want 10, 10, true", v.noise, v.allowed, v.grew)
	}
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4}
	for _, tc := range []struct{ p, want float64 }{{0, 1}, {0.5, 2.5}, {1, 4}, {0.25, 1.75}} {
		if got := quantile(s, tc.p); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("quantile of none = %v", got)
	}
}

// TestSoakJudge checks that the verdict leaves out the warm-up and fails on
// a growing series, an unsettled end or a target that differs.
func TestSoakJudge(t *testing.T) {
	cfg := soakConfig{duration: 20 * time.Second, interval: time.Second, warmup: 5 * time.Second}
	mk := func(grow func(i int) float64) *soakResult {
		r := &soakResult{cfg: cfg}
		for i := range 20 {
			s := soakSample{at: time.Duration(i+1) * time.Second}
			for k := range s.v {
				s.v[k] = 100
			}
			s.v[seriesHeapLive] = 100<<20 + grow(i)
			r.samples = append(r.samples, s)
		}
		return r
	}
	// A large heap during the warm-up only: not judged.
	r := mk(func(i int) float64 {
		if i < 5 {
			return 500 << 20
		}
		return 0
	})
	r.judge()
	if !r.pass {
		t.Errorf("warm-up judged: %v", r.reasons)
	}
	// 2 MiB more per sample after the warm-up.
	r = mk(func(i int) float64 { return float64(i) * (2 << 20) })
	r.judge()
	if r.pass || !strings.Contains(strings.Join(r.reasons, ";"), "heap live grew") {
		t.Errorf("growing heap passed: %v", r.reasons)
	}
	r = mk(func(int) float64 { return 0 })
	r.end.mismatches = 3
	r.judge()
	if r.pass {
		t.Error("a target that differs passed")
	}
	r = mk(func(int) float64 { return 0 })
	r.end.notSettled = "1 Pending"
	r.judge()
	if r.pass {
		t.Error("an unsettled end passed")
	}
	r = &soakResult{cfg: cfg, samples: mk(func(int) float64 { return 0 }).samples[:8]}
	r.judge()
	if r.pass {
		t.Error("3 judged samples passed")
	}
}

// TestSoakRun runs the soak for a couple of seconds with a fast sample
// interval: a test of the tool, not of the verdict, which timing on a busy
// machine may fail. It asserts the rule is stated before the first sample,
// that the run ends with the target equal to the table (that is not a
// matter of time: the run waits for it), and that -plot writes its files.
func TestSoakRun(t *testing.T) {
	dir := t.TempDir()
	args := []string{"-workloads", "soak", "-quick", "-duration", "2s", "-soak-interval", "200ms", "-plot", dir}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	out := stdout.String()
	t.Log("\n" + out)
	if err != nil && !errors.Is(err, errSoakFailed) {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	rule := strings.Index(out, "Verdict rule, stated before the run:")
	verdict := strings.Index(out, "soak verdict: ")
	if rule < 0 || verdict < rule {
		t.Fatalf("no rule before the verdict")
	}
	if !strings.Contains(stderr.String(), "[soak ") {
		t.Errorf("no progress lines:\n%s", stderr.String())
	}
	if !strings.Contains(out, "target equals the table") {
		t.Errorf("the target does not equal the table")
	}
	if (err == nil) != strings.Contains(out, "soak verdict: PASS") {
		t.Errorf("run returned %v with the verdict line %q", err, out[verdict:])
	}
	for _, name := range []string{"soak.svg", "soak.csv"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if name == "soak.svg" && !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s is not an SVG", name)
		}
		if name == "soak.csv" && bytes.Count(b, []byte("\n")) < 5 {
			t.Errorf("%s has fewer than 4 samples:\n%s", name, b)
		}
	}
}
