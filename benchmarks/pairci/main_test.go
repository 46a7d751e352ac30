package main

import (
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.12g, want %.12g (±%g)", what, got, want, tol)
	}
}

// The two-sided 95 % quantiles of the printed t tables.
func TestTQuantile(t *testing.T) {
	for _, c := range []struct {
		df   int
		want float64
	}{
		{1, 12.706204736}, {2, 4.302652730}, {3, 3.182446305}, {5, 2.570581836},
		{9, 2.262157163}, {19, 2.093024054}, {29, 2.045229642}, {59, 2.000995378},
		{120, 1.979930405}, {999, 1.962341461},
	} {
		near(t, "t(0.975, "+strconv.Itoa(c.df)+")", tQuantile(0.975, c.df), c.want, 1e-6)
	}
	near(t, "t(0.95, 10)", tQuantile(0.95, 10), 1.812461123, 1e-6)
}

// Ten pairs whose ratios head/base of ns/op are given; the expected
// figures were computed apart (Python's statistics.stdev and the t table).
func TestMeanIntervalOfTenPairs(t *testing.T) {
	ratios := []float64{1.00, 1.02, 0.99, 1.01, 0.98, 1.03, 1.00, 0.97, 1.01, 1.02}
	pairs := make([]pair, len(ratios))
	for i, r := range ratios {
		pairs[i] = pair{
			{"RoundInline/single": {nsOp: 1e6, allocs: 5109}},
			{"RoundInline/single": {nsOp: 1e6 * r, allocs: 5109}},
		}
	}
	sums := summarize(pairs, []string{"RoundInline/single"})
	if len(sums) != 1 || sums[0].pairs != 10 || sums[0].iv.n != 10 || sums[0].faster != 3 {
		t.Fatalf("summaries %+v", sums)
	}
	iv := sums[0].iv
	near(t, "mean", iv.mean, 0.0028352467884510584, 1e-12)
	near(t, "sd", iv.sd, 0.018893163856568723, 1e-12)
	near(t, "half", iv.half, 0.013515355241637425, 1e-9)
	near(t, "rel", iv.rel(), 0.013607100512664562, 1e-9)
	est, lo, hi := iv.speed()
	near(t, "speed", est, 0.997168768727835, 1e-12)
	near(t, "speed lo", lo, 0.9837823434972828, 1e-9)
	near(t, "speed hi", hi, 1.0107373443920045, 1e-9)
	if v := verdict(iv, 0.97); v != "met" {
		t.Errorf("verdict against 0.97 = %q, want met (low end 0.984)", v)
	}
	if v := verdict(iv, 0.99); v != "open" {
		t.Errorf("verdict against 0.99 = %q, want open (0.984–1.011)", v)
	}
	if v := verdict(iv, 1.02); v != "not met" {
		t.Errorf("verdict against 1.02 = %q, want not met (high end 1.011)", v)
	}
	if got := allocsSame(sums[0]); got != "identical" {
		t.Errorf("allocs %q, want identical", got)
	}
}

func TestMeanIntervalEdges(t *testing.T) {
	if iv := meanInterval([]float64{0.1}); !math.IsInf(iv.half, 1) || iv.mean != 0.1 {
		t.Errorf("one value: %+v, want mean 0.1 and an infinite half-width", iv)
	}
	if iv := meanInterval([]float64{0.25, 0.25, 0.25}); iv.half != 0 || iv.rel() != 0 {
		t.Errorf("equal values: %+v, want half-width 0", iv)
	}
	// Four pairs, 0.8, 1.25, 0.9, 1.1: t(0.975, 3) = 3.182446305.
	iv := meanInterval([]float64{math.Log(0.8), math.Log(1.25), math.Log(0.9), math.Log(1.1)})
	near(t, "mean", iv.mean, -0.0025125839633753227, 1e-12)
	near(t, "half", iv.half, 0.31790725200014547, 1e-9)
	near(t, "rel", iv.rel(), 0.37424879648942594, 1e-9)
}

func sumsWith(rels ...float64) []summary {
	var s []summary
	for _, r := range rels {
		s = append(s, summary{iv: interval{n: 10, half: math.Log1p(r)}})
	}
	return s
}

func TestStopRule(t *testing.T) {
	const target = 0.02
	for _, c := range []struct {
		name          string
		sums          []summary
		n, min, max   int
		stop, reached bool
	}{
		{"tight but below min", sumsWith(0.005, 0.005), 8, 10, 60, false, false},
		{"tight at min", sumsWith(0.005, 0.0199), 10, 10, 60, true, true},
		{"exactly at target", sumsWith(0.02, 0.02), 10, 10, 60, true, true},
		{"tight but mid-block", sumsWith(0.005, 0.005), 11, 10, 60, false, false},
		{"one wide", sumsWith(0.005, 0.021), 20, 10, 60, false, false},
		{"wide at max", sumsWith(0.005, 0.021), 60, 10, 60, true, false},
		{"tight at an odd max", sumsWith(0.01, 0.01), 11, 11, 11, true, true},
		{"no benchmarks", nil, 60, 10, 60, true, false},
	} {
		stop, reached := stopRule(c.sums, c.n, c.min, c.max, target)
		if stop != c.stop || reached != c.reached {
			t.Errorf("%s: stop, reached = %v, %v; want %v, %v", c.name, stop, reached, c.stop, c.reached)
		}
	}
	s := sumsWith(0.005, 0.03)
	stopRule(s, 12, 10, 60, target)
	if !s[0].within || s[1].within {
		t.Errorf("within = %v, %v; want true, false", s[0].within, s[1].within)
	}
}

func TestPairOrderIsABBA(t *testing.T) {
	var got strings.Builder
	for k := range 4 {
		for _, i := range pairOrder(k) {
			got.WriteString([]string{"A", "B"}[i])
		}
	}
	if got.String() != "ABBAABBA" {
		t.Errorf("order %s, want ABBAABBA", got.String())
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/converge-go/converge/reconciler
cpu: AMD EPYC 7B13
BenchmarkRoundInline/single-2         	    3000	   1299859 ns/op	      1300 ns/object	    769314 objects/s	  271986 B/op	    5109 allocs/op
BenchmarkRoundInline/batch-2          	    3000	    963951 ns/op	       964.0 ns/object	   1037397 objects/s	  272014 B/op	    5109 allocs/op
PASS
`
	pr, err := parseBench([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pr.names, " ") != "RoundInline/single RoundInline/batch" {
		t.Errorf("names %q, want single then batch, as they ran", pr.names)
	}
	res := pr.byName
	want := map[string]result{
		"RoundInline/single": {nsOp: 1299859, nsObject: 1300, allocs: 5109},
		"RoundInline/batch":  {nsOp: 963951, nsObject: 964, allocs: 5109},
	}
	if len(res) != len(want) {
		t.Fatalf("got %v, want %v", res, want)
	}
	for n, w := range want {
		if res[n] != w {
			t.Errorf("%s: %+v, want %+v", n, res[n], w)
		}
	}
	if _, err := parseBench([]byte("PASS\n")); err == nil {
		t.Error("no benchmark lines: want an error")
	}
	if r, err := parseBench([]byte("BenchmarkX 10 5 ns/op\n")); err != nil || r.byName["X"].allocs != -1 || r.byName["X"].nsObject != 0 {
		t.Errorf("without -benchmem: %v, %v; want allocs -1, ns/object 0", r, err)
	}
}

func TestAllocsDiffer(t *testing.T) {
	s := summary{
		base: []result{{allocs: 5109}, {allocs: 5109}, {allocs: 5110}},
		head: []result{{allocs: 5117}, {allocs: 5117}, {allocs: 5117}},
	}
	if got := allocsSame(s); got != "differ (head +8 by median)" {
		t.Errorf("allocs %q", got)
	}
	if got := fmtRange(allocRange(s.base)); got != "5109–5110" {
		t.Errorf("base range %q", got)
	}
	s.head = []result{{allocs: 5110}, {allocs: 5109}, {allocs: 5109}}
	if got := allocsSame(s); got != "same median, runs vary" {
		t.Errorf("allocs %q", got)
	}
}

func TestFlagsAreBounded(t *testing.T) {
	c, err := parseFlags([]string{"-base", "22b453d"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.head != "HEAD" || c.bench != "^BenchmarkRoundInline$" || c.pkg != "./reconciler/" ||
		c.benchtime != "3000x" || c.target != 0.02 || c.min != 10 || c.max != 60 || c.bar != 0.97 || c.timeout != 10*time.Minute {
		t.Errorf("defaults %+v", c)
	}
	for _, args := range [][]string{
		{},
		{"-base", "-x"},
		{"-base", "a", "-head", "--upload-pack=x"},
		{"-base", "a b"},
		{"-base", "a", "-max", "1001"},
		{"-base", "a", "-max", "5"},
		{"-base", "a", "-min", "1"},
		{"-base", "a", "-target", "0"},
		{"-base", "a", "-target", "-0.01"},
		{"-base", "a", "-target", "NaN"},
		{"-base", "a", "-target", "0.6"},
		{"-base", "a", "-benchtime", "0x"},
		{"-base", "a", "-benchtime", "20000000x"},
		{"-base", "a", "-benchtime", "1h"},
		{"-base", "a", "-benchtime", "many"},
		{"-base", "a", "-bench", ""},
		{"-base", "a", "-bench", "("},
		{"-base", "a", "-pkg", "reconciler"},
		{"-base", "a", "-pkg", "./../x"},
		{"-base", "a", "-pkg", "./..."},
		{"-base", "a", "-bar", "0"},
		{"-base", "a", "-timeout", "0s"},
		{"-base", "a", "-repo", "-C"},
		{"-base", "a", "extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: want an error", args)
		}
	}
	for _, args := range [][]string{
		{"-base", "HEAD~3", "-benchtime", "2s", "-max", "1000", "-target", "0.5"},
		{"-base", "v1.0", "-pkg", "./internal/keyqueue", "-min", "2", "-max", "2"},
	} {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

func TestBuildEnvSetsGOWORK(t *testing.T) {
	dir := t.TempDir()
	env := buildEnv([]string{"HOME=/h", "GOWORK=/elsewhere/go.work"}, dir)
	if strings.Join(env, " ") != "HOME=/h GOWORK=off" {
		t.Errorf("env %q, want GOWORK=off without a go.work", env)
	}
}
