package reconcilertest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// Registry tells the script commands which reconcilers there are. Create
// it outside the hive with [NewRegistry], hand it to the code that
// registers the reconcilers (for example with [Registry.Cell]), and pass it
// to [ScriptCommands]. Each reconciler is added with [Add] under its name;
// the commands look it up when they run, so a reconciler added again by a
// restarted hive replaces the old one. Its methods are safe for concurrent
// use. The zero Registry is not usable.
type Registry struct {
	mu       sync.Mutex
	subjects map[string]subject
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{subjects: map[string]subject{}}
}

// Cell provides the registry to a hive, so that a module can take
// *Registry as a parameter and [Add] its reconcilers.
func (r *Registry) Cell() cell.Cell {
	return cell.Provide(func() *Registry { return r })
}

// Subject is a reconciler as the script commands see it. Name, DB, Table,
// Reconciler and GetStatus are required; the rest enable more commands.
type Subject[Obj any] struct {
	// Name is the name given to reconciler.WithName, "" for none. The
	// commands select a reconciler with --name=NAME; without it they use
	// the only one registered, or the one named "".
	Name string

	DB         *statedb.DB
	Table      statedb.Table[Obj]
	Reconciler reconciler.Reconciler[Obj]
	GetStatus  func(Obj) status.Status // the getStatus given to reconciler.Register

	// Key gives an object's key, as used by reconciler/status and
	// reconciler/wait --key, and as the target holds it. If nil, the key
	// of Target or Faults is used, and without either the table's primary
	// index parses the key (as statedb's db/get does; the index needs
	// FromString).
	Key func(Obj) string

	// Target is the recording target, for reconciler/target and friends.
	// Set it or TargetReader, not both.
	Target *Target[Obj]

	// TargetReader is a target system of your own, for reconciler/target:
	// see [TargetReader]. If it is also a [TargetWriter],
	// reconciler/target/set and reconciler/target/unset change it. Set it
	// or Target, not both; with Target, the commands read Target.
	TargetReader TargetReader

	// Value gives the value the target should hold for an object, under
	// its Key, for reconciler/target --table with a TargetReader. If nil,
	// the value of Target is used.
	Value func(Obj) string

	// Faults wraps the operations given to the reconciler, for
	// reconciler/fault.
	Faults *FaultyOps[Obj]

	// Setup is the setup step given to reconciler.WithSetup, for
	// reconciler/setup-fault.
	Setup *SetupFault

	// Health is the hive's health provider and HealthScope the full name of
	// the reconcile job's scope in it, for reconciler/health. The default
	// scope is "job-reconcile", or "job-reconcile-NAME" for a named
	// reconciler: what a job group created with the provider itself gives.
	Health      *cell.SimpleHealth
	HealthScope string

	// Metrics is the metrics.ExpVar given to reconciler.WithMetrics, for
	// reconciler/metrics.
	Metrics *metrics.ExpVar

	// ModuleID is the module the reconciler was registered in
	// (reconciler.Params' ModuleID). reconciler/retries uses it to find the
	// reconciler's rows; without it, it uses the one reconciler of the
	// reconcilers table with the Subject's name.
	ModuleID cell.FullModuleID

	// Sets is the table's sets.Table, for reconcilers that share a
	// status.Set, for the sets/* commands. Give it to every Subject of the
	// table (they may share one).
	Sets *sets.Table[Obj]
}

// Add adds s to reg, replacing any subject with the same name. It returns
// an error if a required field is missing.
func Add[Obj any](reg *Registry, s Subject[Obj]) error {
	var errs []error
	check := func(ok bool, what string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must not be nil", what))
		}
	}
	check(reg != nil, "registry")
	check(s.DB != nil, "Subject.DB")
	check(s.Table != nil, "Subject.Table")
	check(s.Reconciler != nil, "Subject.Reconciler")
	check(s.GetStatus != nil, "Subject.GetStatus")
	if s.Target != nil && s.TargetReader != nil {
		errs = append(errs, errors.New("set Subject.Target or Subject.TargetReader, not both"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("reconcilertest.Add(%q): %w", s.Name, errors.Join(errs...))
	}
	if s.Target != nil {
		s.TargetReader = s.Target
		if s.Key == nil {
			s.Key = s.Target.key
		}
		if s.Value == nil {
			s.Value = s.Target.value
		}
	}
	if s.Key == nil && s.Faults != nil {
		s.Key = s.Faults.key
	}
	if s.HealthScope == "" {
		s.HealthScope = "job-reconcile"
		if s.Name != "" {
			s.HealthScope += "-" + s.Name
		}
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.subjects[s.Name] = &typedSubject[Obj]{s: s}
	return nil
}

// lookup finds the subject named name; if name was not given, the one named
// "" or the only one.
func (r *Registry) lookup(name string, given bool) (subject, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.subjects[name]; ok {
		return s, nil
	}
	names := slices.Sorted(maps.Keys(r.subjects))
	if !given && len(names) == 1 {
		return r.subjects[names[0]], nil
	}
	switch {
	case len(names) == 0:
		return nil, errors.New("no reconciler registered: call reconcilertest.Add when registering it (is the hive populated?)")
	case given:
		return nil, fmt.Errorf("no reconciler named %q; registered: %s", name, quoteAll(names))
	default:
		return nil, fmt.Errorf("several reconcilers registered (%s): choose one with --name", quoteAll(names))
	}
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
