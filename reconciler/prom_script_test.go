package reconciler_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/hive/script"
	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
)

// promMetricsCmd is the scripts' prom/metrics command: it prints what g
// gathers as sorted "NAME{LABELS} VALUE" lines, in the text exposition
// format's shape (histograms as _bucket, _count and _sum lines), or, given
// regexps, waits until each matches a line. Metrics have no change
// notification, so it checks every 10ms until --timeout.
func promMetricsCmd(g prom.Gatherer) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the Prometheus metrics, or wait until each regexp matches a line",
			Args:    "[regexp...]",
			Flags: func(fs *pflag.FlagSet) {
				fs.Duration("timeout", 10*time.Second, "how long to wait")
			},
			RegexpArgs: func(rawArgs ...string) []int {
				idx := make([]int, len(rawArgs))
				for i := range idx {
					idx[i] = i
				}
				return idx
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			timeout, err := s.Flags.GetDuration("timeout")
			if err != nil {
				return nil, err
			}
			res := make([]*regexp.Regexp, len(args))
			for i, a := range args {
				if res[i], err = regexp.Compile(a); err != nil {
					return nil, fmt.Errorf("bad regexp %q: %w", a, err)
				}
			}
			deadline := time.Now().Add(timeout)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				lines, err := gatherLines(g)
				if err != nil {
					return nil, err
				}
				var missing []string
				for _, re := range res {
					if !slices.ContainsFunc(lines, re.MatchString) {
						missing = append(missing, fmt.Sprintf("%q", re))
					}
				}
				if len(missing) == 0 {
					out := strings.Join(lines, "\n") + "\n"
					return func(*script.State) (string, string, error) { return out, "", nil }, nil
				}
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("timed out after %s: no line matches %s in:\n%s", timeout, strings.Join(missing, ", "), strings.Join(lines, "\n"))
				}
				select {
				case <-tick.C:
				case <-s.Context().Done():
					return nil, s.Context().Err()
				}
			}
		},
	)
}

// gatherLines renders what g gathers as sorted exposition lines.
func gatherLines(g prom.Gatherer) ([]string, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel())+1)
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			line := func(suffix string, v float64, extra ...string) {
				ls := append(slices.Clone(labels), extra...)
				lines = append(lines, fmt.Sprintf("%s%s{%s} %s", f.GetName(), suffix, strings.Join(ls, ","), strconv.FormatFloat(v, 'g', -1, 64)))
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				line("", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				line("", m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					line("_bucket", float64(b.GetCumulativeCount()), fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
				}
				line("_bucket", float64(h.GetSampleCount()), `le="+Inf"`)
				line("_count", float64(h.GetSampleCount()))
				line("_sum", h.GetSampleSum())
			default:
				line("", m.GetUntyped().GetValue())
			}
		}
	}
	slices.Sort(lines)
	return lines, nil
}
