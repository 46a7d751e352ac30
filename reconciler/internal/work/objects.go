package work

import (
	"fmt"
	"log/slog"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler/internal/inforows"
	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/status"
)

// Objects is how a reconciler reads and writes the user's objects: the
// table and its primary index, and the functions Register was given to
// copy an object and to read and replace the reconciler's status in it.
// Register sets it once; it is read-only after, so safe for concurrent use
// as far as the user's functions are (the jobs and the workers all call
// them). The zero value is not usable.
type Objects[Obj any] struct {
	Table     statedb.RWTable[Obj]
	Primary   statedb.Indexer[Obj] // Table.PrimaryIndexer()
	Clone     func(Obj) Obj
	SetStatus func(Obj, status.Status) Obj
	GetStatus func(Obj) status.Status
	Set       *SetEntry[Obj] // WithStatusSet's; nil without
}

// SetEntry is where a reconciler of WithStatusSet keeps its status: the
// entry Name of the set that Get reads and Put stores.
type SetEntry[Obj any] struct {
	Name string
	Get  func(Obj) status.Set
	Put  func(Obj, status.Set) Obj
}

// UseSet keeps the status in the entry name of the set get and put reach.
func (t *Objects[Obj]) UseSet(name string, get func(Obj) status.Set, put func(Obj, status.Set) Obj) {
	t.Set = &SetEntry[Obj]{name, get, put}
	t.SetStatus = func(obj Obj, st status.Status) Obj { return put(obj, get(obj).Set(name, st)) }
	t.GetStatus = func(obj Obj) status.Status { return get(obj).Get(name) }
}

// KeyOf returns obj's primary key. StateDB does not store an object whose
// primary indexer gives it no key, so every object read from the table has
// one; ok is false only for an object a user function changed (see
// reconciler.ErrNoPrimaryKey).
func (t *Objects[Obj]) KeyOf(obj Obj) (key string, ok bool) {
	k, ok := t.Primary.ObjectToKey(obj)
	return string(k), ok
}

// Lookup returns the object of the table with obj's primary key. An object
// without a primary key is never found.
func (t *Objects[Obj]) Lookup(txn statedb.ReadTxn, obj Obj) (Obj, statedb.Revision, bool) {
	q, ok := t.Primary.QueryFromObject(obj)
	if !ok {
		var zero Obj
		return zero, 0, false
	}
	return t.Table.Get(txn, q)
}

// WithStatus returns a copy of obj carrying the status st. Objects read
// from the table are shared: SetStatus is given a clone, never obj itself.
func (t *Objects[Obj]) WithStatus(obj Obj, st status.Status) Obj {
	return t.SetStatus(t.Clone(obj), st)
}

// OpKey returns o's primary key for messages.
func (t *Objects[Obj]) OpKey(o *Op[Obj]) string {
	if o.Key != "" {
		return inforows.DisplayKey(o.Key)
	}
	key, _ := t.KeyOf(o.Obj)
	return inforows.DisplayKey(key)
}

// WrittenBack returns the change that records, in the key queue, that cur,
// found where the version asked for by the status statusID was applied or
// tried, was written back over what the target got, if it was: cur carries
// another status of this reconciler, one that asks for nothing and is
// older than statusID, or found where the version had no identity
// (statusID zero: nothing tells which is older). Every status before
// statusID is stale then, and cur is new work when its change is read. So
// is a Done without identity (a literal, or decoded), whose age nothing
// tells. ok is false if cur was not written back, or has no primary key.
func (t *Objects[Obj]) WrittenBack(cur Obj, statusID uint64) (c keyqueue.Change[Obj], ok bool) {
	st := t.GetStatus(cur)
	switch {
	case st.IsPendingOrRefreshing(), st.ID() == 0 && st.Kind != status.KindDone, statusID != 0 && st.ID() >= statusID:
		return c, false
	}
	key, ok := t.Primary.ObjectToKey(cur)
	if !ok {
		return c, false
	}
	return keyqueue.Change[Obj]{RawKey: key, As: keyqueue.WrittenBack, Cut: max(statusID, st.ID()+1) - 1}, true
}

// LogNoKey logs that an object without a primary key was met where, and is
// left alone. It happens only when a user function (clone, setStatus, or
// Update on its argument) changed the fields the primary index reads.
func LogNoKey(log *slog.Logger, where string, obj any) {
	log.Error("Reconciler met an object without a primary key; leaving it alone",
		"where", where, "error", ErrNoPrimaryKey, "object", fmt.Sprintf("%v", obj))
}
