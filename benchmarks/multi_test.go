package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestMultiRun runs the multi workload small, for both libraries, and
// checks its table: a row per count and library, and with more than one
// reconciler the floor that commits once for all, each run checked.
func TestMultiRun(t *testing.T) {
	args := []string{"-workloads", "multi", "-objects", "3000", "-multi-objects", "3000", "-multi-counts", "3,1", "-repeats", "1"}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	t.Log("\n" + out)
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && (f[0] == "1" || f[0] == "3") && (f[1] == "converge" || f[1] == "upstream" || f[1] == "floor" || f[1] == "floor,") {
			row := f[0] + " " + f[1]
			if f[1] == "floor," {
				row += " " + f[2] + " " + f[3]
			}
			rows = append(rows, row)
			if !strings.Contains(l, "yes, 1 of 1 runs") {
				t.Errorf("row without its check: %q", l)
			}
		}
	}
	if want := []string{"1 converge", "1 upstream", "1 floor", "3 converge", "3 upstream", "3 floor", "3 floor, one commit"}; !slices.Equal(rows, want) {
		t.Errorf("rows = %q, want %q", rows, want)
	}
	for _, want := range []string{"3 reconciler(s), converge/upstream obj/s", "3 reconciler(s), converge/floor obj/s", "3 reconciler(s), floor one commit/floor obj/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q", want)
		}
	}
}

func TestMultiFlags(t *testing.T) {
	o, err := parseFlags([]string{"-workloads", "multi", "-multi-counts", "4, 2,4,1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.cfg.multi.counts, []int{1, 2, 4}) || o.cfg.multi.objects != 1_000_000 {
		t.Errorf("multi config = %+v, want counts [1 2 4] and 1M objects", o.cfg.multi)
	}
	if o, err = parseFlags([]string{"-quick"}, io.Discard); err != nil || o.cfg.multi.objects != 20_000 {
		t.Errorf("-quick: objects %d, err %v; want 20000", o.cfg.multi.objects, err)
	}
	for _, bad := range [][]string{
		{"-multi-counts", "0"},
		{"-multi-counts", "x"},
		{"-multi-counts", "65"},
		{"-multi-counts", ","},
		{"-multi-objects", "0"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
