package main

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	upstream "github.com/cilium/statedb/reconciler"

	convidx "github.com/converge-go/converge/index"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// impl names what reconciles the table in one run.
type impl int

const (
	implConverge impl = iota // github.com/converge-go/converge/reconciler
	implUpstream             // github.com/cilium/statedb/reconciler
	implFloor                // a bare Changes() + CompareAndSwap loop in one write txn
	implNone                 // nothing: the inserter alone, for allocation baselines
)

func (i impl) String() string {
	return [...]string{"converge", "upstream", "floor", "insert-only"}[i]
}

// object is the row type of every benchmark table. It carries one status
// per library so that both reconcile the very same type; a run sets and
// reads only the field of the library under test.
type object struct {
	id   uint64
	conv status.Status
	up   upstream.Status
}

func (o *object) clone() *object {
	c := *o
	return &c
}

func (o *object) TableHeader() []string { return []string{"ID", "Converge", "Upstream"} }
func (o *object) TableRow() []string {
	return []string{strconv.FormatUint(o.id, 10), o.conv.String(), o.up.String()}
}

var idIndex = statedb.Index[*object, uint64]{
	Name: "id",
	FromObject: func(o *object) index.KeySet {
		return index.NewKeySet(index.Uint64(o.id))
	},
	FromKey: index.Uint64,
	Unique:  true,
}

// convStatusIndex indexes the converge status kind.
var convStatusIndex = convidx.NewStatusIndex(func(o *object) status.Status { return o.conv })

// upStatusIndex indexes the upstream status kind. statedb v0.8.3 ships no
// such index, so it is defined here the same way as converge's.
var upStatusIndex = statedb.Index[*object, upstream.StatusKind]{
	Name: "status",
	FromObject: func(o *object) index.KeySet {
		return index.NewKeySet(o.up.Kind.Key())
	},
	FromKey: upstream.StatusKind.Key,
	Unique:  false,
}

// Status accessors handed to the two Register functions.
func convGet(o *object) status.Status { return o.conv }
func convSet(o *object, s status.Status) *object {
	o.conv = s
	return o
}
func upGet(o *object) upstream.Status { return o.up }
func upSet(o *object, s upstream.Status) *object {
	o.up = s
	return o
}

var (
	errFailOnce    = errors.New("benchmark: first attempt fails")
	errAlwaysFails = errors.New("benchmark: every attempt fails")
)

// ops implements the single-object operations of both libraries (their
// method sets are identical) and counts what it is asked to do.
type ops struct {
	delay     time.Duration   // each Update sleeps this long
	attempts  []atomic.Uint32 // per object id: Update calls, when failOnce
	failOnce  bool            // the first Update of every object fails
	failBelow uint64          // every Update of an object with a lower id fails
	failures  atomic.Int64    // failed Update calls
	updates   atomic.Int64    // Update calls, single or in batches
	target    int64           // when updates reaches target, reached is closed
	reached   chan struct{}   //
	pruned    chan int        // objects seen by each Prune
	prunedAt  atomic.Int64    // when the first Prune ended (Unix ns)
}

func newOps(s setup) *ops {
	o := &ops{delay: s.updateDelay, failOnce: s.failOnce, failBelow: uint64(s.failBelow), reached: make(chan struct{}), pruned: make(chan int, 16)}
	if s.failOnce {
		o.attempts = make([]atomic.Uint32, s.objects)
	}
	o.target = int64(s.updateTarget)
	return o
}

func (o *ops) update(obj *object) error {
	if n := o.updates.Add(1); n == o.target {
		close(o.reached)
	}
	if o.delay > 0 {
		time.Sleep(o.delay)
	}
	if o.failOnce && o.attempts[obj.id].Add(1) == 1 {
		o.failures.Add(1)
		return errFailOnce
	}
	if obj.id < o.failBelow {
		o.failures.Add(1)
		return errAlwaysFails
	}
	return nil
}

func (o *ops) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, obj *object) error {
	return o.update(obj)
}

func (o *ops) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *object) error {
	return nil
}

func (o *ops) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*object, statedb.Revision]) error {
	n := 0
	for range objs {
		n++
	}
	o.prunedAt.CompareAndSwap(0, time.Now().UnixNano())
	select {
	case o.pruned <- n:
	default:
	}
	return nil
}

// convBatch and upBatch are the batch operations of each library.
type convBatch struct{ *ops }

func (b convBatch) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []reconciler.BatchEntry[*object]) {
	for i := range batch {
		batch[i].Result = b.update(batch[i].Object)
	}
}

func (b convBatch) DeleteBatch(context.Context, statedb.ReadTxn, []reconciler.BatchEntry[*object]) {}

type upBatch struct{ *ops }

func (b upBatch) UpdateBatch(_ context.Context, _ statedb.ReadTxn, batch []upstream.BatchEntry[*object]) {
	for i := range batch {
		batch[i].Result = b.update(batch[i].Object)
	}
}

func (b upBatch) DeleteBatch(context.Context, statedb.ReadTxn, []upstream.BatchEntry[*object]) {}
