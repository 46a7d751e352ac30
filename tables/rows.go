package tables

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	yaml "go.yaml.in/yaml/v3"
)

// State is the state of a reconciler, as its row in the reconcilers table
// says; the same as its health says. The zero State is not one a
// reconciler writes.
type State string

// The states of a reconciler.
const (
	StateRunning  State = "running"  // nothing failing
	StateDegraded State = "degraded" // objects failing, a failed prune, or a broken limiter
	StatePaused   State = "paused"   // by reconciler.Reconciler.Pause
	StateStopped  State = "stopped"  // its job is not running
	StateWaiting  State = "waiting"  // for the tables of reconciler.WithStartAfter to be initialized
	// StateSettingUp: the setup step of reconciler.WithSetup has not
	// succeeded yet (Info.SetupError says why, if it failed).
	StateSettingUp State = "setting-up"
)

// Info is a row of the reconcilers table: the state of one reconciler as
// of its last round, keyed by ID ([InfoByID]). A reconciler writes it with
// [Writer.Write], its refresh job LastRefresh with [Writer.Refreshed].
// Times are zero until the event first happens, so the zero Info is a
// reconciler that has done nothing. A row is immutable once in the table:
// readers may share it between goroutines but must not modify it. It
// encodes to JSON and YAML (for db/show and the StateDB HTTP handler) with
// the field names of its tags, and renders as a table row for db/show.
type Info struct {
	ID     string `json:"id" yaml:"id"` // module ID, then "/name" if named
	Module string `json:"module" yaml:"module"`
	Name   string `json:"name,omitempty" yaml:"name,omitempty"`
	State  State  `json:"state" yaml:"state"`

	Objects   int    `json:"objects" yaml:"objects"`     // in the table
	Succeeded uint64 `json:"succeeded" yaml:"succeeded"` // operations since start
	Failed    uint64 `json:"failed" yaml:"failed"`       // operations since start
	// FailuresSinceSuccess counts the operations, of any object, that
	// failed since the last operation that succeeded.
	FailuresSinceSuccess int       `json:"failures-since-success" yaml:"failures-since-success"`
	LastError            string    `json:"last-error,omitempty" yaml:"last-error,omitempty"`
	LastErrorAt          time.Time `json:"last-error-at,omitzero" yaml:"last-error-at,omitempty"`

	Retrying int `json:"retrying" yaml:"retrying"` // objects failing
	// InFlight counts the operations not yet committed: running, finished,
	// or handed to the workers and waiting for one (while paused, those
	// wait for Resume without starting).
	InFlight int `json:"in-flight" yaml:"in-flight"`
	// Workers is how many operations the reconciler runs at once
	// (WithConcurrency); BusyWorkers how many were running one, or taking
	// one queued, at the end of the last round (one worker runs them
	// within the round: zero).
	Workers     int `json:"workers" yaml:"workers"`
	BusyWorkers int `json:"busy-workers" yaml:"busy-workers"`
	// OldestPending is when the status of the oldest object still to be
	// reconciled (collected, or waiting for a retry) was written.
	OldestPending time.Time `json:"oldest-pending,omitzero" yaml:"oldest-pending,omitempty"`

	LastPrune time.Time `json:"last-prune,omitzero" yaml:"last-prune,omitempty"`
	// LastPruneDuration is encoded as a Go duration string ("375µs").
	LastPruneDuration time.Duration `json:"last-prune-duration,omitempty" yaml:"last-prune-duration,omitempty"`
	LastPruneError    string        `json:"last-prune-error,omitempty" yaml:"last-prune-error,omitempty"`
	LastRefresh       time.Time     `json:"last-refresh,omitzero" yaml:"last-refresh,omitempty"` // last refresh sweep

	// DriftRepaired counts what Prune and refreshed Updates reported
	// repairing with ReportRepaired.
	DriftRepaired uint64 `json:"drift-repaired" yaml:"drift-repaired"`
	// DriftDetected counts the objects that reconciler.WithDriftCheck
	// found drifted and, with reconciler.WithDriftReportOnly, left so.
	DriftDetected uint64 `json:"drift-detected,omitempty" yaml:"drift-detected,omitempty"`

	// While the circuit breaker is open (WithCircuitBreaker):
	// TargetFailingSince is when it opened and TargetError why. The table
	// shows them in the State column. BreakerOpenings counts its openings
	// since the reconciler was registered.
	TargetFailingSince time.Time `json:"target-failing-since,omitzero" yaml:"target-failing-since,omitempty"`
	TargetError        string    `json:"target-error,omitempty" yaml:"target-error,omitempty"`
	BreakerOpenings    uint64    `json:"breaker-openings,omitempty" yaml:"breaker-openings,omitempty"`

	// While in StateSettingUp (reconciler.WithSetup): SetupAttempts counts
	// the calls of the setup step in this run of the reconciler so far,
	// SetupError is the last one's error. The table shows them in the
	// State column. Both are zero once setup succeeded.
	SetupAttempts int    `json:"setup-attempts,omitempty" yaml:"setup-attempts,omitempty"`
	SetupError    string `json:"setup-error,omitempty" yaml:"setup-error,omitempty"`
	// While a prune is held by reconciler.WithPruneGuard: PruneHeld is
	// set, and PruneHeldRemove of PruneHeldOf is what it would remove of
	// what the target holds. The table shows them in the LastPrune column.
	PruneHeld       bool `json:"prune-held,omitempty" yaml:"prune-held,omitempty"`
	PruneHeldRemove int  `json:"prune-held-remove,omitempty" yaml:"prune-held-remove,omitempty"`
	PruneHeldOf     int  `json:"prune-held-of,omitempty" yaml:"prune-held-of,omitempty"`
}

// infoEncoding is Info as encoded: durations as Go duration strings, like
// every other duration the reconciler shows.
type infoEncoding struct {
	infoFields
	LastPruneDuration string `json:"last-prune-duration,omitempty" yaml:"last-prune-duration,omitempty"`
}

// infoFields is Info without the methods that would recurse.
type infoFields Info

// MarshalJSON encodes the row, LastPruneDuration as a duration string.
func (i Info) MarshalJSON() ([]byte, error) { return json.Marshal(i.encoding()) }

// MarshalYAML encodes the row as MarshalJSON does, in block style.
func (i Info) MarshalYAML() (any, error) {
	data, err := i.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var block func(n *yaml.Node)
	block = func(n *yaml.Node) {
		n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
		for _, c := range n.Content {
			block(c)
		}
	}
	block(&doc)
	return doc.Content[0], nil
}

func (i Info) encoding() infoEncoding {
	e := infoEncoding{infoFields: infoFields(i)}
	e.infoFields.LastPruneDuration = 0
	if i.LastPruneDuration != 0 {
		e.LastPruneDuration = i.LastPruneDuration.String()
	}
	return e
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (i *Info) UnmarshalJSON(data []byte) error {
	var e infoEncoding
	if err := json.Unmarshal(data, &e); err != nil {
		return err
	}
	return i.decode(e)
}

func (i *Info) decode(e infoEncoding) error {
	*i = Info(e.infoFields)
	if e.LastPruneDuration != "" {
		d, err := time.ParseDuration(e.LastPruneDuration)
		if err != nil {
			return fmt.Errorf("last-prune-duration: %w", err)
		}
		i.LastPruneDuration = d
	}
	return nil
}

// TableHeader implements statedb.TableWritable, for db/show.
func (*Info) TableHeader() []string {
	return []string{"Module", "Name", "State", "Objects", "Succeeded", "Failed", "Retrying", "InFlight", "Workers", "OldestPending", "LastError", "LastPrune", "LastRefresh"}
}

// TableRow implements statedb.TableWritable. Times show as ages.
func (i *Info) TableRow() []string {
	lastErr := i.LastError
	if lastErr != "" {
		lastErr += " (" + age(i.LastErrorAt) + ")"
	}
	prune := age(i.LastPrune)
	if i.LastPruneError != "" {
		prune += ": " + i.LastPruneError
	}
	if i.PruneHeld {
		prune += fmt.Sprintf(", held: would remove %d of %d", i.PruneHeldRemove, i.PruneHeldOf)
	}
	state := string(i.State)
	if !i.TargetFailingSince.IsZero() {
		state += ", target failing for " + time.Since(i.TargetFailingSince).Round(time.Millisecond).String()
	}
	if i.SetupError != "" {
		state += ", setup failing (" + strconv.Itoa(i.SetupAttempts) + " attempt(s)): " + i.SetupError
	}
	return []string{
		i.Module, i.Name, state, strconv.Itoa(i.Objects),
		strconv.FormatUint(i.Succeeded, 10), strconv.FormatUint(i.Failed, 10),
		strconv.Itoa(i.Retrying), strconv.Itoa(i.InFlight),
		strconv.Itoa(i.BusyWorkers) + "/" + strconv.Itoa(i.Workers), age(i.OldestPending),
		lastErr, prune, age(i.LastRefresh),
	}
}

// RetryInfo is a row of the reconciler-retries table: one failing object of
// one reconciler (or one drifted and left so, see Drifted), keyed by [RetryKey] ([RetryByKey]) and indexed by
// reconciler ([RetryByReconciler]). A reconciler writes it with
// [Writer.Write] when the object's failure changes, and removes it when the
// object succeeds, changes or is deleted. A row is immutable once in the
// table: readers may share it between goroutines but must not modify it
// (nor the Errors slice).
type RetryInfo struct {
	Reconciler  string    `json:"reconciler" yaml:"reconciler"` // Info.ID
	Key         string    `json:"key" yaml:"key"`               // the object's primary key, in hex if not printable
	Delete      bool      `json:"delete,omitempty" yaml:"delete,omitempty"`
	Attempts    int       `json:"attempts" yaml:"attempts"`
	FirstFailed time.Time `json:"first-failed" yaml:"first-failed"`
	NextAttempt time.Time `json:"next-attempt" yaml:"next-attempt"` // zero while an attempt runs
	LastError   string    `json:"last-error" yaml:"last-error"`
	// Errors are the object's recent errors, oldest first: the last 4
	// distinct ones (by text) since the version retried first failed, the
	// newest being LastError's (bounded). A failure with the newest one's
	// text updates its At and Attempt rather than adding one. Each text is
	// cut to 256 bytes and "…". Nil in rows written without it.
	Errors []ErrorRecord `json:"errors,omitempty" yaml:"errors,omitempty"`

	// Drifted marks the row of an object that is not failing but drifted
	// from the target and was left so (reconciler.WithDriftReportOnly):
	// Attempts is zero. The row goes when the object changes, is found in
	// sync again, or is deleted.
	Drifted bool `json:"drifted,omitempty" yaml:"drifted,omitempty"`
}

// ErrorRecord is one error of a failing object's history
// ([RetryInfo.Errors]): its text, when a failure with that text last
// happened, and which attempt that was (RetryInfo.Attempts then). The zero
// ErrorRecord is not one a reconciler writes.
type ErrorRecord struct {
	Error   string    `json:"error" yaml:"error"`
	At      time.Time `json:"at" yaml:"at"`
	Attempt int       `json:"attempt" yaml:"attempt"`
}

// TableHeader implements statedb.TableWritable, for db/show.
func (*RetryInfo) TableHeader() []string {
	return []string{"Reconciler", "Key", "Op", "Attempts", "FirstFailed", "NextAttempt", "LastError", "Errors", "Drifted"}
}

// TableRow implements statedb.TableWritable. NextAttempt shows as "in D",
// "running" while an attempt runs, or "due" once its time has passed: the
// attempt starts in the round under way (and may run already: the rows are
// written at the end of each round), or the circuit breaker holds it (the
// reconcilers table says "target failing").
func (r *RetryInfo) TableRow() []string {
	op, next := "update", "running"
	if r.Delete {
		op = "delete"
	}
	if !r.NextAttempt.IsZero() {
		next = "due"
		if d := time.Until(r.NextAttempt).Round(time.Millisecond); d > 0 {
			next = "in " + d.String()
		}
	}
	drifted := ""
	if r.Drifted {
		drifted, next = "drifted", "" // no attempt runs or waits
	}
	return []string{r.Reconciler, r.Key, op, strconv.Itoa(r.Attempts), age(r.FirstFailed), next, r.LastError, errorsCell(r.Errors), drifted}
}

// errorsCell renders the history of a retries row compactly: how many
// distinct errors it holds and the attempts at which each last happened,
// "3 (#1 #4 #6)"; "" for none.
func errorsCell(errs []ErrorRecord) string {
	if len(errs) == 0 {
		return ""
	}
	b := strconv.AppendInt(make([]byte, 0, 8+6*len(errs)), int64(len(errs)), 10)
	sep := " (#"
	for _, e := range errs {
		b = strconv.AppendInt(append(b, sep...), int64(e.Attempt), 10)
		sep = " #"
	}
	return string(append(b, ')'))
}

// Indexes of the tables.
var (
	// InfoByID is the primary index of the reconcilers table.
	InfoByID = statedb.Index[*Info, string]{
		Name:       "id",
		FromObject: func(i *Info) index.KeySet { return index.NewKeySet(index.String(i.ID)) },
		FromKey:    index.String,
		FromString: index.FromString,
		Unique:     true,
	}
	// RetryByKey is the primary index of the retries table: the
	// reconciler's ID and the object's key, as RetryKey makes them.
	RetryByKey = statedb.Index[*RetryInfo, string]{
		Name:       "key",
		FromObject: func(r *RetryInfo) index.KeySet { return index.NewKeySet(index.String(RetryKey(r.Reconciler, r.Key))) },
		FromKey:    index.String,
		FromString: index.FromString,
		Unique:     true,
	}
	// RetryByReconciler indexes the retries table by reconciler ID, to
	// list one reconciler's failing objects without a scan.
	RetryByReconciler = statedb.Index[*RetryInfo, string]{
		Name:       "reconciler",
		FromObject: func(r *RetryInfo) index.KeySet { return index.NewKeySet(index.String(r.Reconciler)) },
		FromKey:    index.String,
		FromString: index.FromString,
		Unique:     false,
	}
)

// RetryKey returns the primary key of a retries row: the reconciler's ID and
// the object's key, separated by a space.
func RetryKey(reconciler, key string) string { return reconciler + " " + key }

// age renders how long ago t was, or "" for the zero time.
func age(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return time.Since(t).Round(time.Millisecond).String() + " ago"
}
