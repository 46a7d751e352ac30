package main

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRatioStat(t *testing.T) {
	st := newRatioStat([]float64{1.0, 1.0, 1.0})
	if st.n != 3 || st.median != 1 || st.ci != 0 || !st.within(0.05) {
		t.Errorf("constant ratios: %+v", st)
	}
	st = newRatioStat([]float64{1.1, 1.0, 1.2, 0.9})
	if st.min != 0.9 || st.max != 1.2 || st.median != 1.05 {
		t.Errorf("min, median, max = %v, %v, %v", st.min, st.median, st.max)
	}
	if st.within(0.05) || !(st.ci > 0.05) {
		t.Errorf("ratios 0.9-1.2 within ±5%%: ci = %v", st.ci)
	}
	if st := newRatioStat([]float64{2}); st.within(1) || !math.IsNaN(st.ci) || st.String() != "1 run" {
		t.Errorf("one ratio: %+v %q", st, st)
	}
	if got := newRatioStat(nil).String(); got != "-" {
		t.Errorf("no ratio: %q", got)
	}
	if got := newRatioStat([]float64{0.0081, 0.0095, 0.0088}).String(); got != "0.0081–0.0095 in 3 runs" {
		t.Errorf("small ratios: %q", got)
	}
	if got := newRatioStat([]float64{1.08, 1.17}).String(); got != "1.08–1.17 in 2 runs" {
		t.Errorf("ratios near one: %q", got)
	}
}

// TestRatioStatsPairs checks that ratios pair the runs of one repetition.
func TestRatioStatsPairs(t *testing.T) {
	r := results{}
	for _, v := range [][2]float64{{100, 50}, {200, 100}, {300, 150}} {
		r.add("c", implConverge, measurement{values: map[string]float64{"obj/s": v[0]}})
		r.add("c", implUpstream, measurement{values: map[string]float64{"obj/s": v[1]}})
	}
	st := r.ratioStats(ratioDef{conv: sample{"c", implConverge, "obj/s"}, ref: sample{"c", implUpstream, "obj/s"}})
	if st.n != 3 || st.median != 2 || st.ci > 1e-9 {
		t.Errorf("paired ratios of 2: %+v", st)
	}
	if wide := r.wideRatios([]ratioDef{{conv: sample{"c", implConverge, "obj/s"}, ref: sample{"c", implUpstream, "obj/s"}}}, 0.05); len(wide) != 0 {
		t.Errorf("wide = %v", wide)
	}
}

func TestBusyWarnings(t *testing.T) {
	at := time.Now()
	quiet := machineState{at: at, load: [3]float64{0.1, 0.1, 0.1}, calibrate: 40 * time.Millisecond, cpuTotal: 100, cpuSelf: 1}
	end := quiet
	end.at, end.cpuTotal, end.cpuSelf = at.Add(100*time.Second), 250, 150 // all of it ours
	if w := busyWarnings(quiet, end); len(w) != 0 {
		t.Errorf("quiet machine: %q", w)
	}
	busy := end
	busy.cpuTotal, busy.calibrate = 350, 60*time.Millisecond
	loaded := quiet
	loaded.load[0] = 40
	w := busyWarnings(loaded, busy)
	for _, want := range []string{"load average", "other processes", "calibration loop"} {
		if !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no warning about %s in %q", want, w)
		}
	}
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("10k, 100K,1M,4m,7")
	if want := []int{10_000, 100_000, 1_000_000, 4_000_000, 7}; err != nil || !slices.Equal(got, want) {
		t.Errorf("parseSizes = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"x", "0", "-1k", "1G"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) succeeded", bad)
		}
	}
}

func TestRotate(t *testing.T) {
	cs := []runCase{{name: "a", workload: "w"}, {name: "b", workload: "w"}, {name: "c", workload: "x"}}
	names := func(cs []runCase) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.name)
		}
		return strings.Join(s, "")
	}
	for rep, want := range []string{"abc", "bac", "abc"} {
		if got := names(rotate(cs, rep)); got != want {
			t.Errorf("rotate(rep %d) = %s, want %s", rep, got, want)
		}
	}
}

func TestSelectedJoinsTheFloorBesideConverge(t *testing.T) {
	var single runCase
	for _, c := range cases(config{}) {
		if c.name == "incremental single" {
			single = c
		}
	}
	all := []impl{implConverge, implUpstream, implFloor}
	for _, tc := range []struct {
		workloads []string
		impls     []impl
		want      []impl
	}{
		{[]string{"incremental", "floor"}, all, []impl{implUpstream, implConverge, implFloor}},
		{[]string{"incremental"}, all, []impl{implUpstream, implConverge}},
		{[]string{"floor"}, all, []impl{implFloor}},
		{[]string{"incremental", "floor"}, []impl{implFloor}, []impl{implFloor}},
		{[]string{"incremental", "floor"}, []impl{implConverge}, []impl{implConverge}},
		{[]string{"latency"}, all, nil},
	} {
		got := single.selected(tc.workloads, tc.impls)
		if !slices.Equal(got, tc.want) {
			t.Errorf("selected(%v, %v) = %v, want %v", tc.workloads, tc.impls, got, tc.want)
		}
	}
}

// TestRunAllRepeatsOnlyWideRatios checks that once the minimum runs are
// made, only the cases of ratios still wider than -spread run again.
func TestRunAllRepeatsOnlyWideRatios(t *testing.T) {
	runs := map[string]int{}
	fake := func(name string, noisy bool) runCase {
		return runCase{name: name, workload: "incremental", impls: []impl{implConverge, implUpstream}, fn: func(_ context.Context, _ config, im impl) (measurement, error) {
			v := 100.0
			if im == implConverge {
				runs[name]++
				if noisy && runs[name]%2 == 1 {
					v = 150 // every other converge run is 1.5× faster
				}
			}
			return measurement{values: map[string]float64{"obj/s": v}}, nil
		}}
	}
	todo := []runCase{fake("incremental single", false), fake("incremental batch", true)}
	o := options{repeats: 3, maxRepeats: 7, spread: 5}
	var progress bytes.Buffer
	res, err := runAll(context.Background(), o, todo, &progress)
	if err != nil {
		t.Fatal(err)
	}
	// Steady: its ratio is exact after the minimum 3 runs of both sides.
	if got := len(res["incremental single"][implConverge]["obj/s"]); got != 3 {
		t.Errorf("steady case ran %d times, want 3", got)
	}
	if got := len(res["incremental batch"][implConverge]["obj/s"]); got != 7 {
		t.Errorf("noisy case ran %d times, want 7 (max)", got)
	}
	if !strings.Contains(progress.String(), "[spread] wider than ±5%: incremental batch converge/upstream") ||
		strings.Contains(progress.String(), "incremental single converge/upstream ±") {
		t.Errorf("progress names the wrong ratios:\n%s", progress.String())
	}
}
