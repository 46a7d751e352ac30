package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestQuickRun runs the program's main logic in-process with -quick (and
// smaller sizes still) so that it cannot rot. It asserts the table's shape,
// never a time.
func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	args := []string{
		"-quick",
		"-objects", "3000",
		"-latency-samples", "30",
		"-latency-gap", "1ms",
		"-slow-objects", "100",
		"-retry-objects", "1000",
		"-fresh-queued", "500",
		"-overhead-objects", "2000",
		"-multi-objects", "2000",
		"-outage-objects", "500",
		"-outage-for", "200ms",
		"-curve-sizes", "1000,3000",
		"-max-repeats", "2",
		"-plot", dir,
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	t.Log("\n" + out)

	lines := strings.Split(out, "\n")
	header := -1
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 6 && f[0] == "workload" {
			header = i
			break
		}
	}
	if header < 0 {
		t.Fatalf("no table header in output")
	}
	if got := strings.Fields(lines[header]); strings.Join(got, " ") != "workload converge upstream converge/upstream spread better" {
		t.Errorf("header = %q", got)
	}
	rows := []string{
		"1 incremental, single ops",
		"1 incremental, batch ops",
		"2 bytes/object, single",
		"2 bytes/object, batch",
		"2 allocs/object, single",
		"2 allocs/object, batch",
		"3 floor: single ops vs floor",
		"3 floor: batch ops vs floor",
		"3 floor: bytes/object vs floor",
		"4 latency back-to-back p50",
		"4 latency back-to-back p99",
		"4 idle latency (1ms pause) p50",
		"4 idle latency (1ms pause) p99",
		"5 slow target, default (1 worker)",
		"5 slow target, 64 workers",
		"6 retry storm, single ops",
		"6 retry storm, batch ops",
		"7 prune 3k objects",
		"7 refresh sweep 3k objects",
		"8 fresh write behind 500 refreshes",
		"8 fresh write behind 500 retries",
		"9 restart with 3k Done: idle",
		"9 restart with 3k Done: first prune",
		"9 restart with 3k, 1% Pending: idle",
		"10 heap held per object: converged",
		"10 heap held per object: all deleted",
		"10 heap held per object: after a burst",
	}
	body := strings.Join(lines[header+1:], "\n")
	for _, name := range rows {
		i := strings.Index(body, "\n"+name+" ")
		if !strings.HasPrefix(body, name+" ") && i < 0 {
			t.Errorf("no row %q", name)
			continue
		}
		line := body[i+1:]
		if strings.HasPrefix(body, name+" ") {
			line = body
		}
		line, _, _ = strings.Cut(line, "\n")
		if strings.Contains(line, " - ") {
			t.Errorf("row %q has a missing figure: %q", name, line)
		}
	}
	for _, want := range []string{
		"Metrics overhead", "prometheus+TablesCell",
		"Cost curve", "Cost per object at 3k vs 1k",
		"Incremental ns/object",
		"Outage (issue 33)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in output", want)
		}
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 2 && (f[0] == "1k" || f[0] == "3k") && strings.Contains(l, " - ") {
			t.Errorf("cost curve line has a missing figure: %q", l)
		}
	}
	for _, size := range []string{"1k", "3k"} {
		for _, im := range []string{"converge", "upstream", "floor"} {
			if !slices.ContainsFunc(lines, func(l string) bool {
				f := strings.Fields(l)
				return len(f) > 3 && f[0] == size && f[1] == im
			}) {
				t.Errorf("no cost curve line for %s at %s", im, size)
			}
		}
	}
	for _, name := range []string{"curve.svg", "throughput.svg", "multi.svg", "restart.svg", "outage.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
		} else if !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s is not an SVG", name)
		}
	}
}

// TestSelection checks that -workloads and -impls narrow the run.
func TestSelection(t *testing.T) {
	args := []string{"-quick", "-workloads", "prune", "-impls", "converge", "-objects", "1500"}
	var stdout bytes.Buffer
	if err := run(context.Background(), args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if !strings.Contains(out, "7 prune 1500 objects") {
		t.Errorf("no prune row:\n%s", out)
	}
	if strings.Contains(out, "1 incremental") || strings.Contains(out, "refresh sweep") {
		t.Errorf("unselected workloads in output:\n%s", out)
	}
}

// TestPriorityWorkload runs -workloads priority small: it runs only when
// named, and prints a row with and without WithPriority.
func TestPriorityWorkload(t *testing.T) {
	args := []string{"-quick", "-workloads", "priority", "-priority-objects", "3000"}
	var stdout bytes.Buffer
	if err := run(context.Background(), args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{"WithPriority under a saturating stream: 3000 objects", " off ", " on (share 1/8) "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if strings.Contains(out, "1 incremental") {
		t.Errorf("the main table without its workloads:\n%s", out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-workloads", "nope"},
		{"-impls", "nope"},
		{"-repeats", "0"},
		{"-objects", "0"},
		{"-priority-objects", "0"},
		{"-spread", "0"},
		{"-curve-sizes", "10x"},
		{"-retry-min", "1s", "-retry-max", "1ms"},
		{"extra"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}

func TestMedianAndPercentile(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3 = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 = %v", got)
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median of none = %v", got)
	}
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(i + 1)
	}
	if p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99); p50 != 50 || p99 != 99 {
		t.Errorf("p50, p99 = %v, %v", p50, p99)
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		r    row
		want string
	}{
		{row{unit: unitRate, conv: 200, ref: 100, refName: "upstream"}, "converge 2.00× faster"},
		{row{unit: unitRate, conv: 100, ref: 200, refName: "floor"}, "floor 2.00× faster"},
		{row{unit: unitSecs, conv: 1, ref: 3, refName: "upstream"}, "converge 3.00× faster"},
		{row{unit: unitBytes, conv: 400, ref: 500, refName: "upstream"}, "converge 1.25× fewer"},
		{row{unit: unitNanos, conv: 100, ref: 100, refName: "upstream"}, "even"},
		{row{unit: unitNanos, conv: math.NaN(), ref: 100, refName: "upstream"}, "-"},
	} {
		if _, got := verdict(tc.r); got != tc.want {
			t.Errorf("verdict(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
