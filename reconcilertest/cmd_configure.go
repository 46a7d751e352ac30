package reconcilertest

import (
	"fmt"
	"strings"
	"time"

	"github.com/cilium/hive/script"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/reconciler"
)

func configureCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "change settings of the reconciler with Reconciler.Configure",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				fs.Int("concurrency", 0, "WithConcurrency(N)")
				fs.Int("round-size", 0, "WithRoundLimits(N, nil): N objects per round, no round rate limit")
				fs.Duration("refresh", 0, "WithRefreshing(D, nil) (0: off)")
				fs.Duration("prune", 0, "WithPruning(D) (0: only on request)")
				fs.String("retry", "", "WithRetry(MIN, MAX), given as MIN,MAX (e.g. 10ms,1s)")
				fs.Float64("retry-jitter", 0, "WithRetryJitter(F)")
			},
			Detail: []string{
				"The command calls Reconciler.Configure with an option for each flag given, in the order above, and prints them.",
				"It fails, changing nothing, if Configure refuses them (a value Register would refuse), with the error on stderr.",
				"Configure does not wait: the settings apply before the reconciler's next round.",
				"Wait for what they change with reconciler/wait, reconciler/calls, or db/cmp on the reconcilers table (its Workers column).",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("%w: unexpected arguments %q", script.ErrUsage, args)
			}
			sub, err := lookup(s, reg)
			if err != nil {
				return nil, err
			}
			c, ok := sub.(configurer)
			if !ok {
				return nil, fmt.Errorf("reconciler %q cannot be configured", sub.subjectName())
			}
			opts, said, err := configureOptions(s.Flags)
			if err != nil {
				return nil, err
			}
			if len(opts) == 0 {
				return nil, fmt.Errorf("%w: give at least one setting to change", script.ErrUsage)
			}
			if err := c.configure(opts...); err != nil {
				// On stderr too, for a script to match what was refused.
				return func(*script.State) (string, string, error) { return "", err.Error() + "\n", err }, nil
			}
			return func(*script.State) (string, string, error) {
				return "configured " + strings.Join(said, " ") + "\n", "", nil
			}, nil
		},
	)
}

// configurer is a subject whose reconciler takes Configure.
type configurer interface {
	configure(opts ...reconciler.Option) error
}

func (t *typedSubject[Obj]) configure(opts ...reconciler.Option) error {
	return t.s.Reconciler.Configure(opts...)
}

// configureOptions returns the options of the flags given, and each as text.
func configureOptions(fs *pflag.FlagSet) (opts []reconciler.Option, said []string, err error) {
	add := func(opt reconciler.Option, text string) {
		opts, said = append(opts, opt), append(said, text)
	}
	if fs.Changed("concurrency") {
		n, _ := fs.GetInt("concurrency")
		add(reconciler.WithConcurrency(n), fmt.Sprintf("concurrency=%d", n))
	}
	if fs.Changed("round-size") {
		n, _ := fs.GetInt("round-size")
		add(reconciler.WithRoundLimits(n, nil), fmt.Sprintf("round-size=%d", n))
	}
	if fs.Changed("refresh") {
		d, _ := fs.GetDuration("refresh")
		add(reconciler.WithRefreshing(d, nil), fmt.Sprintf("refresh=%s", d))
	}
	if fs.Changed("prune") {
		d, _ := fs.GetDuration("prune")
		add(reconciler.WithPruning(d), fmt.Sprintf("prune=%s", d))
	}
	if fs.Changed("retry") {
		v, _ := fs.GetString("retry")
		lo, hi, ok := strings.Cut(v, ",")
		if !ok {
			return nil, nil, fmt.Errorf("%w: --retry=%q: want MIN,MAX", script.ErrUsage, v)
		}
		minB, err1 := time.ParseDuration(strings.TrimSpace(lo))
		maxB, err2 := time.ParseDuration(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("%w: --retry=%q: want two durations, MIN,MAX", script.ErrUsage, v)
		}
		add(reconciler.WithRetry(minB, maxB), fmt.Sprintf("retry=%s,%s", minB, maxB))
	}
	if fs.Changed("retry-jitter") {
		f, _ := fs.GetFloat64("retry-jitter")
		add(reconciler.WithRetryJitter(f), fmt.Sprintf("retry-jitter=%v", f))
	}
	return opts, said, nil
}
