package sets

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Refresh marks every object of the table, or those the queries select
// (each object once, however many select it), for name's reconciler to
// apply again, in write transactions of at most [MaxObjectsPerTxn] objects
// each, and returns what it marked, to wait on with [Marked.Wait]. It is
// what Cilium's node Writer.Refresh does by hand for IPsec.
//
// Each marked object's status for name gets a fresh identity that asks for
// work: Refreshing if it was Done, a fresh Refreshing if it was
// Refreshing, and a fresh Pending if it was Pending or Error (terminal or
// not): a version not yet applied, or whose last attempt failed, stays one
// to apply, as a drift check (reconciler.WithDriftCheck) looks only at
// Refreshing objects, and its report-only mode, finding the target without
// it, would write it Done with nothing applied (the reconciler knows an
// Error it wrote itself, not one restored from a dump or carried over a
// restart). So an operation already under way when
// Refresh marks its object does not count: the reconciler finds its own
// status changed and applies the object again, and every attempt
// [Marked.Wait] counts began after the mark. The other names' statuses are
// left as they are, identities included: their reconcilers do not redo
// work. An object is read again in the transaction that marks it, so a
// write made since Refresh began is not overwritten, and one deleted
// meanwhile is not marked.
//
// It stops when ctx ends, returning what it marked so far (which Wait
// waits for) and ctx's error. An empty name, or one that
// reconciler.WithName refuses, is an error wrapping
// reconciler.ErrInvalidConfig, as is a query on no index of the table. Safe
// for concurrent use.
func (t *Table[Obj]) Refresh(ctx context.Context, name string, queries ...statedb.Query[Obj]) (*Marked[Obj], error) {
	if err := t.checkCall(ctx, "sets: Refresh"); err != nil {
		return nil, err
	}
	if err := checkName("sets: Refresh", name); err != nil {
		return nil, err
	}
	m := &Marked[Obj]{t: t, name: name, remaining: map[string]Obj{}, sem: make(chan struct{}, 1)}
	now := time.Now()
	e := edit[Obj]{
		needs: func(key string, _ status.Set) bool { _, done := m.remaining[key]; return !done },
		change: func(s status.Set) status.Set {
			switch st := s.Get(name); st.Kind {
			case status.KindDone, status.KindRefreshing:
				return s.Set(name, status.RefreshingAt(now))
			default: // Pending or Error: a version not known to be applied
				return s.Set(name, status.PendingAt(now))
			}
		},
		written: func(key string, obj Obj) { m.remaining[key] = obj },
	}
	txn := t.db.ReadTxn()
	if len(queries) == 0 {
		_, err := t.rewrite(ctx, "sets: Refresh", t.table.All(txn), e)
		m.marked = len(m.remaining)
		return m, err
	}
	lists := make([]func(func(Obj, statedb.Revision) bool), len(queries))
	for i, q := range queries {
		var err error
		if lists[i], err = t.list(txn, q); err != nil {
			return m, err
		}
	}
	for _, objs := range lists {
		if _, err := t.rewrite(ctx, "sets: Refresh", objs, e); err != nil {
			m.marked = len(m.remaining)
			return m, err
		}
	}
	m.marked = len(m.remaining)
	return m, nil
}

// list is table.List, with StateDB's panic for a query on no index of the
// table returned as an error.
func (t *Table[Obj]) list(txn statedb.ReadTxn, q statedb.Query[Obj]) (objs func(func(Obj, statedb.Revision) bool), err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sets: Refresh: table %q: bad query (%v): %w", t.table.Name(), v, reconciler.ErrInvalidConfig)
		}
	}()
	return t.table.List(txn, q), nil
}

// Marked is what one call of [Table.Refresh] marked for one name, to wait
// on. The zero Marked is not usable. Its methods are safe for concurrent
// use; concurrent Waits take turns.
type Marked[Obj any] struct {
	t      *Table[Obj]
	name   string
	marked int

	sem chan struct{} // held by the Wait under way

	// Under sem: the keys not yet attempted, with the version last seen.
	remaining map[string]Obj
	// What the attempts seen so far gave: written under sem and mu, read
	// under mu (a Wait that finds another under way returns it).
	mu     sync.Mutex
	result Result
}

// Len returns how many objects were marked: zero for a Marked not made by
// [Table.Refresh].
func (m *Marked[Obj]) Len() int {
	if m == nil {
		return 0
	}
	return m.marked
}

// Result is what the attempts of a refresh gave: how many objects were
// Done, which failed, how many were deleted before an attempt was seen.
// Done + len(Failed) + Deleted is never above [Marked.Len]; once a Wait returns nil,
// Done + len(Failed) + Deleted equals it.
type Result struct {
	Done    int
	Failed  []ObjectStatus // in key order
	Deleted int
}

// Err returns nil if no object failed, else an error wrapping
// reconciler.ErrObjectFailed that lists the first ten that did, with their
// error, and counts the rest.
func (r Result) Err() error {
	if len(r.Failed) == 0 {
		return nil
	}
	return fmt.Errorf("sets: %d object(s) failed: %s: %w", len(r.Failed), list(r.Failed), reconciler.ErrObjectFailed)
}

// Wait blocks until name's reconciler has attempted every marked object,
// and returns what the attempts gave. An object counts once its status for
// name is read Done (in Result.Done) or Error, retryable or terminal (in
// Result.Failed, with the status and its error text): no retry is waited
// for. One deleted before an attempt was seen counts in Result.Deleted.
// One the user changed since the mark, with a new status for name, is
// waited for until that version is attempted: the attempt of a newer
// version counts as the refresh's; one whose set lost name's entry reads
// as Pending and is waited for too (a name retired meanwhile leaves the
// wait to ctx).
//
// Outcomes seen are kept: a later call waits only for the objects not
// attempted yet, and returns the same counts for the others. When ctx
// ends first it returns the result so far and an error wrapping both
// ctx's error and [ErrNotSettled], listing the first ten objects not
// attempted (in key order) with their status, and counting the rest.
//
// It wakes on the table's changes (a change iterator of its own, closed on
// return) and never polls; each change of the table costs it a map look-up.
func (m *Marked[Obj]) Wait(ctx context.Context) (Result, error) {
	if m == nil || m.t == nil {
		return Result{}, fmt.Errorf("sets: Marked.Wait: the Marked was not made by Table.Refresh: %w", reconciler.ErrInvalidConfig)
	}
	if ctx == nil {
		return Result{}, fmt.Errorf("sets: Marked.Wait: nil context: %w", reconciler.ErrInvalidConfig)
	}
	select {
	case m.sem <- struct{}{}:
	default:
		select {
		case m.sem <- struct{}{}:
		case <-ctx.Done():
			return m.copyResult(), fmt.Errorf("sets: Marked.Wait: %w: %w: another Wait under way", ctx.Err(), ErrNotSettled)
		}
	}
	defer func() { <-m.sem }()
	if len(m.remaining) > 0 {
		f := follower[Obj]{t: m.t, remaining: m.remaining, settle: m.settle}
		if err := f.run(ctx); err != nil {
			res := m.copyResult()
			if ctx.Err() == nil {
				return res, err
			}
			return res, fmt.Errorf("sets: refresh of %q on table %q: %w: %w: %d of %d object(s) not attempted: %s",
				m.name, m.t.table.Name(), ctx.Err(), ErrNotSettled, len(m.remaining), m.marked, waiting(sortedKeys(m.remaining), m.unattempted))
		}
	}
	return m.copyResult(), nil
}

// settle is the follower's settle of Wait.
func (m *Marked[Obj]) settle(key string, obj Obj, deleted bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if deleted {
		m.result.Deleted++
		return true, nil
	}
	s, err := m.t.statuses(obj)
	if err != nil {
		return false, err
	}
	switch st := s.Get(m.name); st.Kind {
	case status.KindDone:
		m.result.Done++
	case status.KindError:
		i, _ := slices.BinarySearchFunc(m.result.Failed, showKey(key), func(f ObjectStatus, k string) int { return strings.Compare(f.Key, k) })
		m.result.Failed = slices.Insert(m.result.Failed, i, ObjectStatus{Key: showKey(key), Name: m.name, Status: st})
	default:
		return false, nil
	}
	return true, nil
}

// copyResult returns the result so far, not shared with later Waits.
func (m *Marked[Obj]) copyResult() Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.result
	r.Failed = slices.Clone(r.Failed)
	return r
}

// unattempted returns the status of the object with key, not attempted
// yet, for the error of Wait.
func (m *Marked[Obj]) unattempted(key string) []ObjectStatus {
	st := status.Status{Kind: status.KindPending}
	if s, err := m.t.statuses(m.remaining[key]); err == nil {
		st = s.Get(m.name)
	}
	return []ObjectStatus{{Key: showKey(key), Name: m.name, Status: st}}
}
