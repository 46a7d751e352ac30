package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestOutage runs every variant of the outage workload small and checks
// that every object ends Done and that the counts agree with each other.
// It asserts no time: the outage's length only decides which calls fail.
func TestOutage(t *testing.T) {
	const objects = 200
	cfg := config{txnSize: 50, timeout: time.Minute, outage: outageConfig{
		objects: objects, outage: 300 * time.Millisecond,
		retryMin: 10 * time.Millisecond, retryMax: 100 * time.Millisecond, settle: 30 * time.Second, repeats: 1,
	}}
	for _, v := range outageVariants {
		t.Run(v.name, func(t *testing.T) {
			m, err := outage(context.Background(), cfg, v)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(m)
			get := func(k string) float64 {
				t.Helper()
				v, ok := m.values[k]
				if !ok {
					t.Fatalf("no %q in %s", k, m)
				}
				return v
			}
			if get("done") != 1 {
				t.Errorf("not every object Done: %s", m)
			}
			if get("first ok s") > get("recovery s") {
				t.Errorf("the first success came after every object was Done: %s", m)
			}
			calls, entries := get("calls"), get("entries")
			after, entriesAfter := get("calls after"), get("entries after")
			switch {
			case calls < 1:
				t.Errorf("no call during the outage: %s", m)
			case entries < calls || entriesAfter < after:
				t.Errorf("fewer entries than calls: %s", m)
			case !v.batch && (entries != calls || entriesAfter != after):
				t.Errorf("single operations, yet entries differ from calls: %s", m)
			case entriesAfter < objects:
				// Every object needs one successful call, after the outage.
				t.Errorf("%v entries after the outage for %d objects: %s", entriesAfter, objects, m)
			case get("calls/s") != calls/cfg.outage.outage.Seconds():
				t.Errorf("calls/s is not calls over the outage: %s", m)
			case get("calls/s 2nd") > get("calls/s")*2 || get("entries/s 2nd") > get("entries/s")*2:
				t.Errorf("the second half holds more calls than the whole outage: %s", m)
			}
		})
	}
}

// TestOutageTarget checks the target's phases with outages that ended long
// ago or end long after the test.
func TestOutageTarget(t *testing.T) {
	var down outageTarget
	down.begin(time.Now(), time.Hour)
	if err := down.call(3); err != errOutage {
		t.Errorf("during the outage: %v, want errOutage", err)
	}
	var up outageTarget
	up.begin(time.Now().Add(-time.Hour), time.Minute)
	if err := up.call(2); err != nil {
		t.Errorf("after the outage: %v", err)
	}
	if down.calls[outageFirstHalf].Load() != 1 || down.entries[outageFirstHalf].Load() != 3 ||
		up.calls[outageRecovered].Load() != 1 || up.entries[outageRecovered].Load() != 2 {
		t.Errorf("counts: down %v %v, up %v %v", &down.calls, &down.entries, &up.calls, &up.entries)
	}
	if got := down.recovery(); got.Before(time.Now().Add(59 * time.Minute)) {
		t.Errorf("recovery at %s, want an hour from now", got)
	}
}

// TestOutageRun runs the workload through the program and checks its
// table: a row per variant that ran, each run checked.
func TestOutageRun(t *testing.T) {
	args := []string{"-workloads", "outage", "-outage-objects", "200", "-outage-for", "300ms", "-outage-retry-max", "100ms"}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	t.Log("\n" + out)
	for _, v := range outageVariants {
		i := strings.Index(out, "\n"+v.name+"  ")
		if i < 0 {
			t.Errorf("no row for %s", v.name)
			continue
		}
		line, _, _ := strings.Cut(out[i+1:], "\n")
		if !strings.Contains(line, "2 of 2 runs") {
			t.Errorf("row without its two checked runs (the default for this workload): %q", line)
		}
	}
	if !strings.Contains(out, "Goal (issue 33)") {
		t.Error("no goal line")
	}
}

func TestOutageFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		runs int
	}{
		{nil, 2},
		{[]string{"-repeats", "5"}, 5},
		{[]string{"-repeats", "1"}, 1},
		{[]string{"-quick"}, 1},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.cfg.outage.repeats != tc.runs {
			t.Errorf("%q: %d runs, want %d", tc.args, o.cfg.outage.repeats, tc.runs)
		}
	}
	for _, bad := range [][]string{
		{"-outage-objects", "0"},
		{"-outage-for", "0s"},
		{"-outage-settle", "-1s"},
		{"-outage-retry-min", "0s"},
		{"-outage-retry-min", "2s", "-outage-retry-max", "1s"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
