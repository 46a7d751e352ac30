package main

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// soakObject is the row of the soak's reconciled table. Unlike object, it
// has content that the target must end up holding (seq, and the value of
// its dependency), and says how its Update should fail.
type soakObject struct {
	id       uint64
	seq      uint64 // the write that made this version: the content the target must hold
	dep      uint64 // the soakDep whose value the target records beside seq
	fails    uint8  // Update fails this many times for this version, then succeeds
	terminal bool   // Update fails with reconciler.TerminalError
	st       status.Status
}

func (o *soakObject) clone() *soakObject {
	c := *o
	return &c
}

func (o *soakObject) TableHeader() []string {
	return []string{"ID", "Seq", "Dep", "Fails", "Terminal", "Status"}
}

func (o *soakObject) TableRow() []string {
	return []string{
		strconv.FormatUint(o.id, 10), strconv.FormatUint(o.seq, 10), strconv.FormatUint(o.dep, 10),
		strconv.Itoa(int(o.fails)), strconv.FormatBool(o.terminal), o.st.String(),
	}
}

var soakIDIndex = statedb.Index[*soakObject, uint64]{
	Name:       "id",
	FromObject: func(o *soakObject) index.KeySet { return index.NewKeySet(index.Uint64(o.id)) },
	FromKey:    index.Uint64,
	Unique:     true,
}

func soakGetStatus(o *soakObject) status.Status { return o.st }
func soakSetStatus(o *soakObject, s status.Status) *soakObject {
	o.st = s
	return o
}

// soakDep is a row of the dependency table: objects with dep == id record
// its val in the target, and a change of it re-reconciles them
// (WithDependency).
type soakDep struct {
	id  uint64
	val uint64
}

func (d *soakDep) TableHeader() []string { return []string{"ID", "Value"} }
func (d *soakDep) TableRow() []string {
	return []string{strconv.FormatUint(d.id, 10), strconv.FormatUint(d.val, 10)}
}

var soakDepIndex = statedb.Index[*soakDep, uint64]{
	Name:       "id",
	FromObject: func(d *soakDep) index.KeySet { return index.NewKeySet(index.Uint64(d.id)) },
	FromKey:    index.Uint64,
	Unique:     true,
}

var (
	errSoakFail     = errors.New("soak: this attempt fails")
	errSoakTerminal = errors.New("soak: this version can never be applied")
)

// soakEntry is what the target holds for one object: the seq of the version
// applied and the value its dependency had when it was applied.
type soakEntry struct {
	seq    uint64
	depVal uint64
}

// soakAttempt counts the failed attempts at one version of an object.
type soakAttempt struct {
	seq uint64
	n   uint8
}

// soakTarget is the soak's target system, a map, and the operations that
// apply objects to it. The workload damages it now and then (drift: an entry
// made wrong, or an orphan entry added) so that refresh and prune have
// something to repair.
type soakTarget struct {
	deps  statedb.Table[*soakDep]
	delay time.Duration // each Update and Delete sleeps this long, as a target would take

	mu       sync.Mutex
	entries  map[uint64]soakEntry
	drifted  map[uint64]struct{} // entries made wrong and not yet put right
	attempts map[uint64]soakAttempt
	pruneGen uint64        // bumped by the workload; a prune records the value it started with
	pruned   uint64        // the pruneGen the last finished prune started with
	changed  chan struct{} // closed, and replaced, when drift is repaired or a prune finishes

	updates, deletes, failures, terminals, prunes atomic.Int64
	refreshRepairs, pruneRepairs                  atomic.Int64
}

func newSoakTarget(delay time.Duration) *soakTarget {
	return &soakTarget{
		delay:    delay,
		entries:  map[uint64]soakEntry{},
		drifted:  map[uint64]struct{}{},
		attempts: map[uint64]soakAttempt{},
		changed:  make(chan struct{}),
	}
}

// signal wakes whoever waits on t.changed; t.mu must be held.
func (t *soakTarget) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// shouldFail counts an attempt at o and reports whether it must fail.
func (t *soakTarget) shouldFail(o *soakObject) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.attempts[o.id]
	if a.seq != o.seq {
		a = soakAttempt{seq: o.seq}
	}
	a.n++
	if a.n <= o.fails {
		t.attempts[o.id] = a
		return true
	}
	delete(t.attempts, o.id)
	return false
}

func (t *soakTarget) Update(ctx context.Context, txn statedb.ReadTxn, _ statedb.Revision, o *soakObject) error {
	if t.delay > 0 {
		time.Sleep(t.delay)
	}
	t.updates.Add(1)
	switch {
	case o.terminal:
		t.terminals.Add(1)
		return reconciler.TerminalError(errSoakTerminal)
	case o.fails > 0 && t.shouldFail(o):
		t.failures.Add(1)
		return errSoakFail
	}
	var want soakEntry
	want.seq = o.seq
	if d, _, ok := t.deps.Get(txn, soakDepIndex.Query(o.dep)); ok {
		want.depVal = d.val
	}
	t.mu.Lock()
	prev, had := t.entries[o.id]
	t.entries[o.id] = want
	if _, ok := t.drifted[o.id]; ok {
		delete(t.drifted, o.id)
		t.signal()
	}
	t.mu.Unlock()
	if o.st.Kind == status.KindRefreshing && had && prev != want {
		t.refreshRepairs.Add(1)
		reconciler.ReportRepaired(ctx, 1)
	}
	return nil
}

func (t *soakTarget) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, o *soakObject) error {
	if t.delay > 0 {
		time.Sleep(t.delay)
	}
	t.deletes.Add(1)
	t.mu.Lock()
	delete(t.entries, o.id)
	delete(t.attempts, o.id)
	if _, ok := t.drifted[o.id]; ok {
		delete(t.drifted, o.id)
		t.signal()
	}
	t.mu.Unlock()
	return nil
}

// Prune removes every entry whose object is not in objs.
func (t *soakTarget) Prune(ctx context.Context, _ statedb.ReadTxn, objs iter.Seq2[*soakObject, statedb.Revision]) error {
	t.mu.Lock()
	gen, size := t.pruneGen, len(t.entries)
	t.mu.Unlock()
	want := make(map[uint64]struct{}, size)
	for o := range objs {
		want[o.id] = struct{}{}
	}
	removed := 0
	t.mu.Lock()
	for id := range t.entries {
		if _, ok := want[id]; !ok {
			delete(t.entries, id)
			delete(t.drifted, id)
			removed++
		}
	}
	t.pruned = max(t.pruned, gen)
	t.signal()
	t.mu.Unlock()
	t.prunes.Add(1)
	t.pruneRepairs.Add(int64(removed))
	reconciler.ReportRepaired(ctx, removed)
	return nil
}

// drift damages the target: it makes the entries of up to n of the given
// ids wrong (refresh must put them right) and adds n orphan entries with
// ids from orphanBase on (prune must remove them).
func (t *soakTarget) drift(ids []uint64, n int, orphanBase uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	made := 0
	for _, id := range ids {
		if made == n {
			break
		}
		if e, ok := t.entries[id]; ok && e.seq != 0 {
			t.entries[id] = soakEntry{seq: 0, depVal: e.depVal + 1}
			t.drifted[id] = struct{}{}
			made++
		}
	}
	for i := range uint64(n) {
		t.entries[orphanBase+i] = soakEntry{seq: 1}
	}
}

// driftLeft returns how many damaged entries are not yet repaired, and a
// channel closed at the next repair or prune.
func (t *soakTarget) driftLeft() (int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.drifted), t.changed
}

// startPruneGen starts a new prune generation: a prune that finishes with
// it started after this call.
func (t *soakTarget) startPruneGen() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneGen++
	return t.pruneGen
}

// prunedSince reports whether a prune of generation gen or later finished,
// and a channel closed at the next repair or prune.
func (t *soakTarget) prunedSince(gen uint64) (bool, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pruned >= gen, t.changed
}

// snapshot copies the target.
func (t *soakTarget) snapshot() map[uint64]soakEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[uint64]soakEntry, len(t.entries))
	for id, e := range t.entries {
		out[id] = e
	}
	return out
}
