package reconcilertest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// subject is the untyped view of a Subject that the commands use.
type subject interface {
	subjectName() string
	tableName() string
	db() *statedb.DB

	// tableRevision is the table's revision in txn.
	tableRevision(txn statedb.ReadTxn) statedb.Revision
	waitUntilReconciled(ctx context.Context, rev statedb.Revision) (statedb.Revision, statedb.Revision, error)
	// unreconciled counts the objects that are Pending or Refreshing and
	// names the first few; watch closes on a change of the table.
	unreconciled(txn statedb.ReadTxn) (n int, first []string, watch <-chan struct{})
	// statusOf returns the status of the object with key; watch closes on
	// a change of the table.
	statusOf(txn statedb.ReadTxn, key string) (st status.Status, found bool, watch <-chan struct{}, err error)
	initialized(txn statedb.ReadTxn) (bool, []string)
	prune()
	pause()
	resume()
	// startWaitForObject looks for the object with key at once, then
	// returns a function that waits for it with reconciler.WaitForObject
	// (after waiting for it to appear, if it was not there). See
	// waitObjectCmd for what the function returns.
	startWaitForObject(ctx context.Context, key string, stopOnError bool) (func() (st status.Status, seen bool, err error), error)
	recorder() CallRecorder

	health() (*cell.SimpleHealth, string)
	// moduleID is Subject.ModuleID, if set.
	moduleID() (cell.FullModuleID, bool)
	metrics() *metrics.ExpVar
	target() targetView
	// targetRecorder is the Subject's Target, nil if it has none.
	targetRecorder() CallRecorder
	faults() faultControl

	// save remembers the objects with keys as they are, deleting them in
	// the same transaction if del; putBack inserts what save remembered.
	// See saveCmd.
	save(keys []string, del bool) error
	putBack(keys []string) error
}

// targetView is the untyped view of a Subject's target: its Target or
// TargetReader.
type targetView interface {
	// read returns what the target holds and a channel that is closed at
	// its next change (for a TargetReader other than Target, after
	// pollInterval).
	read() (map[string]string, <-chan struct{}, error)
	// reader is the target itself, for reconciler/target/set and unset.
	reader() TargetReader
	// diff compares the target with the table in txn as Target.Diff does,
	// and returns a channel as read does.
	diff(txn statedb.ReadTxn) (string, <-chan struct{}, error)
}

// faultControl is the untyped view of a FaultyOps.
type faultControl interface {
	Inject(Fault) error
	Clear(key string) int
	Faults() []Fault
}

type typedSubject[Obj any] struct {
	s Subject[Obj]

	mu    sync.Mutex
	saved map[string]Obj // by reconciler/save, for reconciler/put-back
}

// recordingTarget is the view of a Target, which wakes waiters on every
// change.
type recordingTarget[Obj any] struct {
	t     *Target[Obj]
	table statedb.Table[Obj]
}

func (v recordingTarget[Obj]) reader() TargetReader { return v.t }

func (v recordingTarget[Obj]) read() (map[string]string, <-chan struct{}, error) {
	state, watch := v.t.StateWatch()
	return state, watch, nil
}

func (v recordingTarget[Obj]) diff(txn statedb.ReadTxn) (string, <-chan struct{}, error) {
	_, watch := v.t.StateWatch() // before the read, so that no change is missed
	return v.t.Diff(txn, v.table), watch, nil
}

// readerTarget is the view of any other TargetReader, which is polled.
type readerTarget[Obj any] struct {
	r          TargetReader
	table      statedb.Table[Obj]
	key, value func(Obj) string // nil if not given
}

func (v readerTarget[Obj]) reader() TargetReader { return v.r }

func (v readerTarget[Obj]) read() (map[string]string, <-chan struct{}, error) {
	state, err := readTarget(v.r)
	return state, pollAfter(), err
}

func (v readerTarget[Obj]) diff(txn statedb.ReadTxn) (string, <-chan struct{}, error) {
	if v.key == nil || v.value == nil {
		return "", nil, errors.New("comparing a TargetReader with the table needs Subject.Key and Subject.Value")
	}
	got, err := readTarget(v.r)
	if err != nil {
		return "", nil, err
	}
	want := map[string]string{}
	for obj := range v.table.All(txn) {
		want[v.key(obj)] = v.value(obj)
	}
	return diffState(got, want), pollAfter(), nil
}

func (t *typedSubject[Obj]) subjectName() string { return t.s.Name }
func (t *typedSubject[Obj]) tableName() string   { return t.s.Table.Name() }
func (t *typedSubject[Obj]) db() *statedb.DB     { return t.s.DB }
func (t *typedSubject[Obj]) prune()              { t.s.Reconciler.Prune() }
func (t *typedSubject[Obj]) pause()              { t.s.Reconciler.Pause() }
func (t *typedSubject[Obj]) resume()             { t.s.Reconciler.Resume() }

func (t *typedSubject[Obj]) tableRevision(txn statedb.ReadTxn) statedb.Revision {
	return t.s.Table.Revision(txn)
}

func (t *typedSubject[Obj]) waitUntilReconciled(ctx context.Context, rev statedb.Revision) (statedb.Revision, statedb.Revision, error) {
	return t.s.Reconciler.WaitUntilReconciled(ctx, rev)
}

func (t *typedSubject[Obj]) initialized(txn statedb.ReadTxn) (bool, []string) {
	ok, _ := t.s.Table.Initialized(txn)
	return ok, t.s.Table.PendingInitializers(txn)
}

func (t *typedSubject[Obj]) unreconciled(txn statedb.ReadTxn) (int, []string, <-chan struct{}) {
	objs, watch := t.s.Table.AllWatch(txn)
	var (
		n     int
		first []string
	)
	for obj := range objs {
		if !t.s.GetStatus(obj).IsPendingOrRefreshing() {
			continue
		}
		n++
		if len(first) < 5 {
			first = append(first, t.describe(obj))
		}
	}
	return n, first, watch
}

// describe names an object for messages: its key, or its table row.
func (t *typedSubject[Obj]) describe(obj Obj) string {
	if t.s.Key != nil {
		return t.s.Key(obj)
	}
	return fmt.Sprint(obj)
}

func (t *typedSubject[Obj]) statusOf(txn statedb.ReadTxn, key string) (status.Status, bool, <-chan struct{}, error) {
	obj, found, watch, err := t.find(txn, key)
	if err != nil || !found {
		return status.Status{}, false, watch, err
	}
	return t.s.GetStatus(obj), true, watch, nil
}

// find returns the object with key, and a channel that closes on a change
// of the table.
func (t *typedSubject[Obj]) find(txn statedb.ReadTxn, key string) (obj Obj, found bool, watch <-chan struct{}, err error) {
	objs, watch := t.s.Table.AllWatch(txn)
	if t.s.Key != nil {
		for obj := range objs {
			if t.s.Key(obj) == key {
				return obj, true, watch, nil
			}
		}
		return obj, false, watch, nil
	}
	obj, found, err = getByPrimaryKey(txn, t.s.Table, key)
	return obj, found, watch, err
}

func (t *typedSubject[Obj]) startWaitForObject(ctx context.Context, key string, stopOnError bool) (func() (status.Status, bool, error), error) {
	first, found, _, err := t.find(t.s.DB.ReadTxn(), key)
	if err != nil {
		return nil, err
	}
	opts := []reconciler.WaitOption{reconciler.FailIfAbsent()} // seen once: absent means deleted
	if stopOnError {
		opts = append(opts, reconciler.StopOnError())
	}
	return func() (status.Status, bool, error) {
		obj := first
		for !found {
			var watch <-chan struct{}
			if obj, found, watch, err = t.find(t.s.DB.ReadTxn(), key); err != nil {
				return status.Status{}, false, err
			}
			if found {
				break
			}
			select {
			case <-ctx.Done():
				return status.Status{}, false, ctx.Err()
			case <-watch:
			}
		}
		query, ok := t.s.Table.PrimaryIndexer().QueryFromObject(obj)
		if !ok {
			return status.Status{}, false, fmt.Errorf("the object has no primary key")
		}
		got, err := reconciler.WaitForObject(ctx, t.s.DB, t.s.Table, query, t.s.GetStatus, opts...)
		if errors.Is(err, reconciler.ErrObjectNotFound) || errors.Is(err, reconciler.ErrObjectDeleted) {
			return status.Status{}, true, err // got may be the zero value
		}
		return t.s.GetStatus(got), true, err
	}, nil
}

// getByPrimaryKey parses key with the primary index's FromString.
func getByPrimaryKey[Obj any](txn statedb.ReadTxn, table statedb.Table[Obj], key string) (obj Obj, found bool, err error) {
	defer func() {
		// An index without FromString makes statedb call a nil function.
		if v := recover(); v != nil {
			err = fmt.Errorf("cannot parse key %q with the primary index of table %q (%v): set Subject.Key", key, table.Name(), v)
		}
	}()
	anyObj, _, found, err := statedb.AnyTable{Meta: table}.Get(txn, "", key)
	if err != nil {
		return obj, false, fmt.Errorf("bad key %q for table %q: %w", key, table.Name(), err)
	}
	if found {
		obj = anyObj.(Obj)
	}
	return obj, found, nil
}

func (t *typedSubject[Obj]) recorder() CallRecorder {
	switch {
	case t.s.Faults != nil:
		return t.s.Faults
	case t.s.Target != nil:
		return t.s.Target
	}
	return nil
}

func (t *typedSubject[Obj]) targetRecorder() CallRecorder {
	if t.s.Target == nil {
		return nil
	}
	return t.s.Target
}

func (t *typedSubject[Obj]) health() (*cell.SimpleHealth, string) {
	return t.s.Health, t.s.HealthScope
}

func (t *typedSubject[Obj]) metrics() *metrics.ExpVar { return t.s.Metrics }

func (t *typedSubject[Obj]) moduleID() (cell.FullModuleID, bool) {
	return t.s.ModuleID, len(t.s.ModuleID) > 0
}

func (t *typedSubject[Obj]) target() targetView {
	switch {
	case t.s.Target != nil:
		return recordingTarget[Obj]{t.s.Target, t.s.Table}
	case t.s.TargetReader != nil:
		return readerTarget[Obj]{t.s.TargetReader, t.s.Table, t.s.Key, t.s.Value}
	}
	return nil
}

func (t *typedSubject[Obj]) faults() faultControl {
	if t.s.Faults == nil {
		return nil
	}
	return t.s.Faults
}
