// Command pairci measures issue 46's bar for the hot path: "single and
// batch >= 0.97x today's main in interleaved paired runs repeated until the
// 95 % interval is within ±2 %; allocations per round exactly as today".
//
// It checks out a baseline revision (-base) and a candidate (-head) as
// temporary git worktrees, builds one test binary of the package (-pkg)
// for each with go test -c, and runs the two in turn, base, head, head,
// base, base, head, ... (ABBA, so that a steady drift of the machine's
// speed falls on both alike). Each run is
//
//	<binary> -test.run '^$' -test.bench <-bench> -test.benchtime <-benchtime> -test.benchmem -test.count 1
//
// in the package's directory. Two consecutive runs, one of each binary,
// make a pair. For every sub-benchmark (BenchmarkRoundInline's single and
// batch) it takes the log of head's ns/op over base's in each pair, and
// their mean with a 95 % Student t interval. After every whole ABBA block
// it stops once at least -min pairs ran and every sub-benchmark's interval
// is within ±-target (exp(half-width) - 1 <= target), or when -max pairs
// ran, and then says the interval was not reached.
//
// It prints one row per sub-benchmark: the pairs, the pairs in which head
// was the faster, head's speed against base's (base ns/op / head ns/op,
// the geometric mean over the pairs, > 1 when head is faster) with its
// 95 % interval, the median ns/object (a custom metric of the benchmark) of
// each, the allocs/op of each and whether every run of both reported the
// same, and the verdict against -bar (0.97): met when the interval's low
// end is at or above it, not met when its high end is below it, open
// otherwise. Each pair's speed goes to standard error as it comes.
//
// From anywhere in the repository (go.work holds the benchmarks module):
//
//	go run ./benchmarks/pairci -base 22b453d -benchtime 3000x
//	go run ./benchmarks/pairci -base HEAD -head HEAD -benchtime 3000x   # self-check: ~1.00
//
// -repo is the repository (default: the one enclosing the working
// directory). A build uses the worktree's own go.work (GOWORK=off when the
// revision has none), so that the go.work of the checkout it was started
// from is never built into either binary. The worktrees and binaries live
// under one directory made with os.MkdirTemp; at the end it removes the
// worktrees it added with git worktree remove --force, and then that
// directory. It deletes nothing else and changes no branch.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// config is what the flags ask for.
type config struct {
	repo      string
	base      string
	head      string
	bench     string
	pkg       string
	benchtime string
	target    float64
	min       int
	max       int
	bar       float64
	timeout   time.Duration
}

// Bounds of the flags.
const (
	maxPairs     = 1000
	maxTarget    = 0.5
	maxIters     = 10_000_000
	maxBenchTime = 10 * time.Minute
	maxTimeout   = 2 * time.Hour
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "pairci:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%v)", err)
		}
		fmt.Fprintln(os.Stderr, "pairci:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("pairci", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&c.repo, "repo", "", "git repository (default: the one enclosing the working directory)")
	fs.StringVar(&c.base, "base", "", "baseline revision (required)")
	fs.StringVar(&c.head, "head", "HEAD", "candidate revision")
	fs.StringVar(&c.bench, "bench", "^BenchmarkRoundInline$", "benchmark regexp, as -test.bench")
	fs.StringVar(&c.pkg, "pkg", "./reconciler/", "package, relative to the repository's root")
	fs.StringVar(&c.benchtime, "benchtime", "3000x", "per run, as -test.benchtime: Nx or a duration")
	fs.Float64Var(&c.target, "target", 0.02, "stop when every 95 % interval's relative half-width is at most this")
	fs.IntVar(&c.min, "min", 10, "pairs to run at least")
	fs.IntVar(&c.max, "max", 60, "pairs to run at most")
	fs.Float64Var(&c.bar, "bar", 0.97, "the speed head/base the verdict compares the interval with")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "limit of one build or one run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, c.validate()
}

var itersRE = regexp.MustCompile(`^([0-9]+)x$`)

// validate bounds every input, so that a run is finite and nothing reaches
// git or the test binary as an option it did not mean.
func (c config) validate() error {
	if c.base == "" {
		return errors.New("-base is required")
	}
	for name, rev := range map[string]string{"-base": c.base, "-head": c.head} {
		if err := checkRev(rev); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.repo != "" && strings.HasPrefix(c.repo, "-") {
		return fmt.Errorf("-repo %q: a path may not start with '-'", c.repo)
	}
	if c.bench == "" || len(c.bench) > 200 || strings.HasPrefix(c.bench, "-") {
		return fmt.Errorf("-bench %q: want a regexp of 1 to 200 characters, not starting with '-'", c.bench)
	}
	if _, err := regexp.Compile(c.bench); err != nil {
		return fmt.Errorf("-bench: %w", err)
	}
	if err := checkPkg(c.pkg); err != nil {
		return fmt.Errorf("-pkg %q: %w", c.pkg, err)
	}
	if err := checkBenchTime(c.benchtime); err != nil {
		return fmt.Errorf("-benchtime %q: %w", c.benchtime, err)
	}
	if !(c.target > 0 && c.target <= maxTarget) {
		return fmt.Errorf("-target %v: want 0 < target <= %v", c.target, maxTarget)
	}
	if c.min < 2 {
		return fmt.Errorf("-min %d: want at least 2 pairs (an interval needs two)", c.min)
	}
	if c.max > maxPairs {
		return fmt.Errorf("-max %d: want at most %d pairs", c.max, maxPairs)
	}
	if c.max < c.min {
		return fmt.Errorf("-max %d is below -min %d", c.max, c.min)
	}
	if !(c.bar > 0 && c.bar <= 10) {
		return fmt.Errorf("-bar %v: want 0 < bar <= 10", c.bar)
	}
	if c.timeout <= 0 || c.timeout > maxTimeout {
		return fmt.Errorf("-timeout %v: want 0 < timeout <= %v", c.timeout, maxTimeout)
	}
	return nil
}

func checkRev(rev string) error {
	switch {
	case rev == "":
		return errors.New("empty revision")
	case strings.HasPrefix(rev, "-"):
		return fmt.Errorf("revision %q may not start with '-'", rev)
	case len(rev) > 256 || strings.ContainsAny(rev, " \t\n\x00"):
		return fmt.Errorf("revision %q: too long or holds white space", rev)
	}
	return nil
}

func checkPkg(pkg string) error {
	if !strings.HasPrefix(pkg, "./") {
		return errors.New("want a path relative to the repository's root, starting with ./")
	}
	if strings.Contains(pkg, "...") {
		return errors.New("want one package, not a pattern")
	}
	for _, e := range strings.Split(filepath.ToSlash(filepath.Clean(pkg)), "/") {
		if e == ".." {
			return errors.New("may not leave the repository")
		}
	}
	return nil
}

func checkBenchTime(s string) error {
	if m := itersRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 || n > maxIters {
			return fmt.Errorf("want 1x to %dx", maxIters)
		}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want Nx or a duration such as 2s")
	}
	if d <= 0 || d > maxBenchTime {
		return fmt.Errorf("want a duration above 0 and at most %v", maxBenchTime)
	}
	return nil
}

// side is one of the two revisions under test.
type side struct {
	label string // "base" or "head"
	rev   string // as given
	sha   string
	wt    string // its worktree
	bin   string // its test binary
}

func run(ctx context.Context, cfg config, out, logw io.Writer) (err error) {
	repo, err := toplevel(ctx, cfg.repo)
	if err != nil {
		return err
	}
	sides := [2]*side{{label: "base", rev: cfg.base}, {label: "head", rev: cfg.head}}
	for _, s := range sides {
		if s.sha, err = gitOut(ctx, repo, "rev-parse", "--verify", "--quiet", "--end-of-options", s.rev+"^{commit}"); err != nil {
			return fmt.Errorf("%s %q is not a commit of %s: %w", s.label, s.rev, repo, err)
		}
	}
	tmp, err := os.MkdirTemp("", "pairci-")
	if err != nil {
		return err
	}
	var added []string // the worktrees this run added, the only ones it removes
	defer func() {
		if cerr := cleanup(repo, tmp, added, logw); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for _, s := range sides {
		s.wt = filepath.Join(tmp, s.label)
		s.bin = filepath.Join(tmp, s.label+".test")
		if _, err := gitOut(ctx, repo, "worktree", "add", "--quiet", "--detach", s.wt, s.sha); err != nil {
			return fmt.Errorf("worktree of %s: %w", s.label, err)
		}
		added = append(added, s.wt)
		fmt.Fprintf(logw, "pairci: building %s %s (%s)\n", s.label, short(s.sha), s.rev)
		if err := build(ctx, cfg, s); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "pairci: base %s (%s), head %s (%s), repo %s\n", short(sides[0].sha), cfg.base, short(sides[1].sha), cfg.head, repo)
	fmt.Fprintf(out, "        %s -test.bench '%s' -test.benchtime %s -test.benchmem -test.count 1; ABBA; -target ±%.1f%%, -min %d, -max %d\n",
		cfg.pkg, cfg.bench, cfg.benchtime, 100*cfg.target, cfg.min, cfg.max)
	fmt.Fprintf(out, "        start %s, load average %s\n", time.Now().UTC().Format(time.RFC3339), loadavg())
	start := time.Now()

	var pairs []pair
	var names []string
	reached := false
	var runErr error
	for k := 0; k < cfg.max; k++ {
		var p pair
		var order []string
		for _, i := range pairOrder(k) {
			res, err := runOnce(ctx, cfg, sides[i])
			if err != nil {
				runErr = fmt.Errorf("pair %d, %s: %w", k+1, sides[i].label, err)
				break
			}
			p[i] = res.byName
			if order == nil {
				order = res.names
			}
		}
		if runErr != nil {
			break
		}
		if names == nil {
			names = order[:]
		}
		if runErr = checkNames(p, names); runErr != nil {
			runErr = fmt.Errorf("pair %d: %w", k+1, runErr)
			break
		}
		pairs = append(pairs, p)
		sums := summarize(pairs, names)
		fmt.Fprintf(logw, "pairci: pair %d (%s first):%s\n", k+1, sides[pairOrder(k)[0]].label, progress(p, sums))
		if stop, ok := stopRule(sums, len(pairs), cfg.min, cfg.max, cfg.target); stop {
			reached = ok
			break
		}
	}
	if runErr != nil {
		if len(pairs) < 2 {
			return runErr
		}
		fmt.Fprintf(out, "pairci: stopped after %d pairs: %v\n", len(pairs), runErr)
	}
	fmt.Fprintf(out, "        end %s, %s, load average %s\n\n", time.Now().UTC().Format(time.RFC3339), time.Since(start).Round(time.Second), loadavg())
	report(out, summarize(pairs, names), len(pairs), reached, cfg)
	return runErr
}

// pairOrder is the order in which pair k runs the two sides: base first in
// even pairs, head first in odd ones, so the runs go A B B A A B B A ...
func pairOrder(k int) [2]int {
	if k%2 == 0 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

func toplevel(ctx context.Context, repo string) (string, error) {
	dir := repo
	if dir == "" {
		dir = "."
	}
	top, err := gitOut(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("%s is not in a git repository: %w", dir, err)
	}
	return top, nil
}

func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// cleanup removes the worktrees this run added, then, if that worked, the
// temporary directory (which then holds only the two binaries). It uses a
// context of its own: it runs after an interrupt too.
func cleanup(repo, tmp string, added []string, logw io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, wt := range added {
		if _, err := gitOut(ctx, repo, "worktree", "remove", "--force", wt); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(logw, "pairci: left %s in place; remove its worktrees with git -C %s worktree remove --force <path>\n", tmp, repo)
		return errors.Join(errs...)
	}
	return os.RemoveAll(tmp)
}

func build(ctx context.Context, cfg config, s *side) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", s.bin, cfg.pkg)
	cmd.Dir = s.wt
	cmd.Env = buildEnv(os.Environ(), s.wt)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go test -c of %s at %s: %w\n%s", cfg.pkg, short(s.sha), err, tail(b, 40))
	}
	return nil
}

// buildEnv is env with GOWORK set to the worktree's go.work, or to off when
// it has none.
func buildEnv(env []string, wt string) []string {
	var e []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOWORK=") {
			e = append(e, kv)
		}
	}
	work := filepath.Join(wt, "go.work")
	if _, err := os.Stat(work); err != nil {
		work = "off"
	}
	return append(e, "GOWORK="+work)
}

// result is what one run reported for one benchmark.
type result struct {
	nsOp     float64
	nsObject float64 // 0 when not reported
	allocs   float64 // -1 when not reported
}

// pair is one run of base ([0]) and one of head ([1]), by benchmark name.
type pair [2]map[string]result

func runOnce(ctx context.Context, cfg config, s *side) (parsed, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "-test.run", "^$", "-test.bench", cfg.bench,
		"-test.benchtime", cfg.benchtime, "-test.benchmem", "-test.count", "1")
	cmd.Dir = filepath.Join(s.wt, filepath.FromSlash(cfg.pkg))
	b, err := cmd.CombinedOutput()
	if err != nil {
		return parsed{}, fmt.Errorf("%w\n%s", err, tail(b, 40))
	}
	res, err := parseBench(b)
	if err != nil {
		return parsed{}, fmt.Errorf("%w\n%s", err, tail(b, 40))
	}
	return res, nil
}

// parsed is one run's results, and their names in the order it ran them.
type parsed struct {
	names  []string
	byName map[string]result
}

var procsRE = regexp.MustCompile(`-[0-9]+$`)

// parseBench reads the benchmark lines of a test binary's output.
func parseBench(b []byte) (parsed, error) {
	res := map[string]result{}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // not a result line
		}
		name := strings.TrimPrefix(procsRE.ReplaceAllString(f[0], ""), "Benchmark")
		r := result{allocs: -1}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return parsed{}, fmt.Errorf("benchmark line %q: %v", sc.Text(), err)
			}
			switch f[i+1] {
			case "ns/op":
				r.nsOp = v
			case "ns/object":
				r.nsObject = v
			case "allocs/op":
				r.allocs = v
			}
		}
		if !(r.nsOp > 0) {
			return parsed{}, fmt.Errorf("benchmark line %q has no ns/op above 0", sc.Text())
		}
		if _, dup := res[name]; dup {
			return parsed{}, fmt.Errorf("benchmark %s reported twice", name)
		}
		res[name] = r
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		return parsed{}, err
	}
	if len(res) == 0 {
		return parsed{}, errors.New("no benchmark matched")
	}
	return parsed{names: names, byName: res}, nil
}

// checkNames says whether both runs of p ran exactly the benchmarks names.
func checkNames(p pair, names []string) error {
	want := append([]string(nil), names...)
	sort.Strings(want)
	for i, label := range [2]string{"base", "head"} {
		if got := keys(p[i]); !equalStrings(got, want) {
			return fmt.Errorf("%s ran %v, want %v", label, got, want)
		}
	}
	return nil
}

func keys(m map[string]result) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// summary is one benchmark's figures over the pairs.
type summary struct {
	name   string
	pairs  int
	iv     interval // of log(head ns/op / base ns/op)
	faster int      // pairs in which head's ns/op was below base's
	base   []result
	head   []result
	within bool // iv.rel() <= target, set by stopRule
}

func summarize(pairs []pair, names []string) []summary {
	var sums []summary
	for _, n := range names {
		s := summary{name: n, pairs: len(pairs)}
		logs := make([]float64, len(pairs))
		for i, p := range pairs {
			logs[i] = math.Log(p[1][n].nsOp / p[0][n].nsOp)
			if p[1][n].nsOp < p[0][n].nsOp {
				s.faster++
			}
			s.base = append(s.base, p[0][n])
			s.head = append(s.head, p[1][n])
		}
		s.iv = meanInterval(logs)
		sums = append(sums, s)
	}
	return sums
}

// interval is a mean of log-ratios with the half-width of its 95 %
// Student t interval.
type interval struct {
	n    int
	mean float64
	sd   float64
	half float64 // +Inf below two values
}

// meanInterval is the mean of x with its 95 % t interval.
func meanInterval(x []float64) interval {
	iv := interval{n: len(x), half: math.Inf(1)}
	if len(x) == 0 {
		iv.mean = math.NaN()
		return iv
	}
	for _, v := range x {
		iv.mean += v
	}
	iv.mean /= float64(len(x))
	if len(x) < 2 {
		return iv
	}
	var ss float64
	for _, v := range x {
		ss += (v - iv.mean) * (v - iv.mean)
	}
	iv.sd = math.Sqrt(ss / float64(len(x)-1))
	iv.half = tQuantile(0.975, len(x)-1) * iv.sd / math.Sqrt(float64(len(x)))
	return iv
}

// rel is the interval's half-width as a ratio: exp(half) - 1.
func (iv interval) rel() float64 { return math.Expm1(iv.half) }

// speed is head's speed against base's, exp(-mean), with its interval.
func (iv interval) speed() (est, lo, hi float64) {
	return math.Exp(-iv.mean), math.Exp(-iv.mean - iv.half), math.Exp(-iv.mean + iv.half)
}

// stopRule says whether to stop after n pairs, and whether every interval
// was then within target. It stops only after whole ABBA blocks (n even)
// once n >= min, or at max.
func stopRule(sums []summary, n, min, max int, target float64) (stop, reached bool) {
	reached = len(sums) > 0
	for i := range sums {
		sums[i].within = sums[i].iv.n >= 2 && sums[i].iv.rel() <= target
		reached = reached && sums[i].within
	}
	if n >= min && n%2 == 0 && reached {
		return true, true
	}
	if n >= max {
		return true, n >= min && reached
	}
	return false, false
}

// tQuantile is the p quantile (0.5 < p < 1) of Student's t distribution
// with df degrees of freedom, by bisection on its CDF.
func tQuantile(p float64, df int) float64 {
	lo, hi := 0.0, 1.0
	for tCDF(hi, df) < p {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if tCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// tCDF is P(T <= t) for t >= 0: 1 - I_x(df/2, 1/2)/2 with x = df/(df+t²).
func tCDF(t float64, df int) float64 {
	v := float64(df)
	return 1 - 0.5*regIncBeta(v/(v+t*t), v/2, 0.5)
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by its
// continued fraction (Numerical Recipes, betai and betacf).
func regIncBeta(x, a, b float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(x, a, b) / a
	}
	return 1 - front*betaCF(1-x, b, a)/b
}

func betaCF(x, a, b float64) float64 {
	const tiny = 1e-300
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 1000; m++ {
		fm := float64(m)
		num := fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm))
		for i := 0; i < 2; i++ {
			d = 1 + num*d
			if math.Abs(d) < tiny {
				d = tiny
			}
			c = 1 + num/c
			if math.Abs(c) < tiny {
				c = tiny
			}
			d = 1 / d
			h *= d * c
			num = -(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1))
		}
		if math.Abs(d*c-1) < 1e-15 {
			break
		}
	}
	return h
}

// verdict compares head's speed interval with bar.
func verdict(iv interval, bar float64) string {
	_, lo, hi := iv.speed()
	switch {
	case lo >= bar:
		return "met"
	case hi < bar:
		return "not met"
	default:
		return "open"
	}
}

// allocRange is the lowest and highest allocs/op of rs, -1 when none
// reported it.
func allocRange(rs []result) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		if r.allocs < 0 {
			return -1, -1
		}
		lo, hi = math.Min(lo, r.allocs), math.Max(hi, r.allocs)
	}
	return lo, hi
}

func fmtRange(lo, hi float64) string {
	if lo < 0 {
		return "-"
	}
	if lo == hi {
		return strconv.FormatFloat(lo, 'f', -1, 64)
	}
	return strconv.FormatFloat(lo, 'f', -1, 64) + "–" + strconv.FormatFloat(hi, 'f', -1, 64)
}

// allocsSame says whether every run of both sides reported the same
// allocs/op.
func allocsSame(s summary) string {
	blo, bhi := allocRange(s.base)
	hlo, hhi := allocRange(s.head)
	switch {
	case blo < 0 || hlo < 0:
		return "not reported"
	case blo == bhi && hlo == hhi && blo == hlo:
		return "identical"
	case median(s.head, allocsOf) == median(s.base, allocsOf):
		return "same median, runs vary"
	default:
		return fmt.Sprintf("differ (head %+g by median)", median(s.head, allocsOf)-median(s.base, allocsOf))
	}
}

func allocsOf(r result) float64   { return r.allocs }
func nsObjectOf(r result) float64 { return r.nsObject }
func nsOpOf(r result) float64     { return r.nsOp }

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return math.NaN()
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func progress(p pair, sums []summary) string {
	var b strings.Builder
	for _, s := range sums {
		fmt.Fprintf(&b, "  %s %.3f", s.name, p[0][s.name].nsOp/p[1][s.name].nsOp)
		if s.iv.n >= 2 {
			est, lo, hi := s.iv.speed()
			fmt.Fprintf(&b, " (so far %.3f, %.3f–%.3f, ±%.1f%%)", est, lo, hi, 100*s.iv.rel())
		}
	}
	return b.String()
}

func report(out io.Writer, sums []summary, n int, reached bool, cfg config) {
	if reached {
		fmt.Fprintf(out, "The 95 %% interval is within ±%.1f%% for every sub-benchmark after %d pairs.\n", 100*cfg.target, n)
	} else {
		fmt.Fprintf(out, "The 95 %% interval was NOT reached: not every sub-benchmark is within ±%.1f%% after %d pairs (-min %d, -max %d).\n", 100*cfg.target, n, cfg.min, cfg.max)
	}
	unit, per := "ns/object", nsObjectOf
	for _, s := range sums {
		for _, r := range append(append([]result(nil), s.base...), s.head...) {
			if r.nsObject == 0 {
				unit, per = "ns/op", nsOpOf
			}
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sub-benchmark\tpairs\thead faster\tspeed head/base\t95 %% interval\t±\t%s base\thead\tallocs/op base\thead\tallocs\tverdict (>= %g)\n", unit, cfg.bar)
	for _, s := range sums {
		est, lo, hi := s.iv.speed()
		within := ""
		if !s.within {
			within = " (wide)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f–%.3f\t%.1f%%%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\n",
			s.name, s.pairs, s.faster, est, lo, hi, 100*s.iv.rel(), within,
			median(s.base, per), median(s.head, per),
			fmtRange(allocRange(s.base)), fmtRange(allocRange(s.head)), allocsSame(s), verdict(s.iv, cfg.bar))
	}
	tw.Flush()
	fmt.Fprintf(out, "\nspeed head/base = base ns/op / head ns/op, the geometric mean over the pairs (> 1: head faster);\n"+
		"the interval is exp of the 95 %% t interval of the mean log-ratio; head faster counts the pairs\n"+
		"in which head's ns/op was the lower; %s are medians over the runs.\n", unit)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
