package reconcilertest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/tables"
)

func retriesCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "print the reconciler's failing objects, or wait until one matches",
			Args:    "[regexp]",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				timeoutFlag(fs)
				fs.Bool("absent", false, "wait until no line matches the regexp (until no object fails, without one)")
				fs.Bool("errors", false, "end each line with the object's recent errors: ' errors=[#ATTEMPT TEXT | ...]', oldest first")
			},
			Detail: []string{
				"The command prints the reconciler's rows of the reconciler-retries table, which tables.Cell provides (the hive must include it), one line per failing object, sorted by key:",
				"",
				"  KEY: OP attempts=N first-failed=AGE next=NEXT error=MESSAGE",
				"",
				"An object that drifted from the target and was left so (reconciler.WithDriftReportOnly) shows as 'KEY: drifted'.",
				"OP is update or delete, AGE how long ago the object first failed, and NEXT 'in DURATION'; 'running' while an attempt runs; once the time has passed, 'held by breaker' while the reconciler's circuit breaker is open (only its probes start), else 'due': the attempt starts in the round under way, and may already run (the rows are written at the end of each round).",
				"With a regexp, it waits until a line matches it, for example '^b: .*attempts=[3-9]'; with --absent, until no line does (or, without a regexp, until no object fails).",
				"The rows are written once per round, so a retry shows up just after the Error status.",
				"With --errors, each line ends with the object's recent errors (tables.RetryInfo.Errors), oldest first, each with the attempt at which it last happened.",
				"It waits on the table's watch channel.",
			},
			RegexpArgs: func(rawArgs ...string) []int {
				if len(rawArgs) > 0 {
					return []int{0}
				}
				return nil
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) > 1 {
				return nil, fmt.Errorf("%w: expected at most one regexp", script.ErrUsage)
			}
			sub, timeout, err := lookupTimed(s, reg)
			if err != nil {
				return nil, err
			}
			absent, err := s.Flags.GetBool("absent")
			if err != nil {
				return nil, err
			}
			var re *regexp.Regexp
			if len(args) == 1 {
				if re, err = regexp.Compile(args[0]); err != nil {
					return nil, fmt.Errorf("bad regexp %q: %w", args[0], err)
				}
			}
			tables, err := retryTables(sub.db())
			if err != nil {
				return nil, err
			}
			if tables.errors, err = s.Flags.GetBool("errors"); err != nil {
				return nil, err
			}
			waiting := re != nil || absent
			var lines []string
			what := "for a failing object to match"
			switch {
			case absent && re == nil:
				what = "for no object to fail"
			case absent:
				what = "for no failing object to match"
			}
			err = waitFor(s, timeout, what, func() (bool, watches, string, error) {
				var w watches
				lines, w, err = tables.lines(sub, time.Now())
				if err != nil {
					return false, watches{}, "", err
				}
				matched := slices.ContainsFunc(lines, func(l string) bool { return re == nil || re.MatchString(l) })
				state := "failing objects:\n" + strings.Join(lines, "\n")
				if len(lines) == 0 {
					state = "no failing objects"
				}
				if !waiting {
					return true, w, state, nil
				}
				return matched != absent, w, state, nil
			})
			if err != nil {
				return nil, err
			}
			out := strings.Join(lines, "\n")
			if out != "" {
				out += "\n"
			}
			return func(*script.State) (string, string, error) { return out, "", nil }, nil
		},
	)
}

// retryTableSet is the tables of tables.Cell, found by name.
type retryTableSet struct {
	reconcilers statedb.Table[*tables.Info]
	retries     statedb.Table[*tables.RetryInfo]
	errors      bool // lines end with the recent errors (see formatErrors)
}

// retryTables finds the tables of tables.Cell in db.
func retryTables(db *statedb.DB) (retryTableSet, error) {
	var t retryTableSet
	txn := db.ReadTxn()
	recs, _ := db.GetTable(txn, tables.ReconcilersTableName).(statedb.Table[*tables.Info])
	retries, _ := db.GetTable(txn, tables.RetriesTableName).(statedb.Table[*tables.RetryInfo])
	if recs == nil || retries == nil {
		return t, fmt.Errorf("no %q table in the hive's StateDB: include tables.Cell in the hive to keep the failing objects of reconcilers", tables.RetriesTableName)
	}
	t.reconcilers, t.retries = recs, retries
	return t, nil
}

// lines returns the lines of sub's failing objects, and the channels that
// close when they (or, while sub's ID is not known, the reconcilers table)
// change.
func (t retryTableSet) lines(sub subject, now time.Time) ([]string, watches, error) {
	txn := sub.db().ReadTxn()
	id, watch, err := t.reconcilerID(txn, sub)
	if err != nil || id == "" {
		return nil, watches{watch}, err
	}
	rows, watch := t.retries.ListWatch(txn, tables.RetryByReconciler.Query(id))
	info, _, infoWatch, _ := t.reconcilers.GetWatch(txn, tables.InfoByID.Query(id))
	held := info != nil && !info.TargetFailingSince.IsZero()
	var lines []string
	for r := range rows {
		line := formatRetry(r, now, held)
		if t.errors {
			line += formatErrors(r.Errors)
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return lines, watches{watch, infoWatch}, nil
}

// reconcilerID returns the ID of sub in the reconcilers table: from its
// ModuleID if the Subject has one, else the one row with sub's name. It
// returns "" and the table's watch channel while there is no such row yet.
func (t retryTableSet) reconcilerID(txn statedb.ReadTxn, sub subject) (string, <-chan struct{}, error) {
	if mod, ok := sub.moduleID(); ok {
		return metrics.Key(mod, sub.subjectName()), nil, nil
	}
	rows, watch := t.reconcilers.AllWatch(txn)
	var ids []string
	for r := range rows {
		if r.Name == sub.subjectName() {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) > 1 {
		return "", nil, fmt.Errorf("several reconcilers named %q in table %q (%s): set Subject.ModuleID to choose one", sub.subjectName(), tables.ReconcilersTableName, quoteAll(ids))
	}
	if len(ids) == 0 {
		return "", watch, nil
	}
	return ids[0], nil, nil
}

// formatRetry renders a row of the retries table as one line; held says
// that the reconciler's circuit breaker is open.
func formatRetry(r *tables.RetryInfo, now time.Time, held bool) string {
	if r.Drifted && r.Attempts == 0 {
		return r.Key + ": drifted" // reconciler.WithDriftReportOnly
	}
	op := "update"
	if r.Delete {
		op = "delete"
	}
	var next string
	switch d := r.NextAttempt.Sub(now).Round(time.Millisecond); {
	case r.NextAttempt.IsZero():
		next = "running"
	case d > 0:
		next = "in " + d.String()
	case held:
		next = "held by breaker"
	default:
		next = "due"
	}
	return fmt.Sprintf("%s: %s attempts=%s first-failed=%s next=%s error=%s",
		r.Key, op, strconv.Itoa(r.Attempts), now.Sub(r.FirstFailed).Round(time.Millisecond), next, r.LastError)
}
