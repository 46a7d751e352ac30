package reconcilertest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/statedb"
)

// Op names an operation the reconciler calls.
type Op string

// The operations recorded in a [Call] and selected by a [Fault]. Batch
// operations are recorded entry by entry, as OpUpdate or OpDelete with
// Call.Batch set.
const (
	OpUpdate Op = "update"
	OpDelete Op = "delete"
	OpPrune  Op = "prune"
)

// ParseOp parses "update", "delete" or "prune".
func ParseOp(s string) (Op, error) {
	switch op := Op(s); op {
	case OpUpdate, OpDelete, OpPrune:
		return op, nil
	}
	return "", fmt.Errorf("unknown operation %q: want update, delete or prune", s)
}

// Call is one operation recorded by a [Target] or a [FaultyOps], in the
// order the calls returned.
type Call struct {
	Seq      int              // position in the log, from 1
	Op       Op               // OpUpdate, OpDelete or OpPrune
	Key      string           // the object's key; empty for OpPrune
	Revision statedb.Revision // the object's revision; zero for OpPrune
	Value    string           // for OpUpdate on a Target: the value stored
	Batch    int              // the batch call's number, from 1; zero for a single operation
	Err      error            // the call's outcome; nil on success

	// Prune only. Desired is how many objects the desired set held; Removed
	// (set by a Target) the keys the prune removed. Txn is the transaction
	// the prune was given; its table revision tells which changes the
	// desired set included.
	Desired int
	Removed []string
	Txn     statedb.ReadTxn
}

// String formats the call on one line, for example
// "update a rev=7 value=1", "update b rev=8 batch=2 err=injected fault" or
// "prune desired=2 removed=stray".
func (c Call) String() string {
	var b strings.Builder
	b.WriteString(string(c.Op))
	if c.Op == OpPrune {
		fmt.Fprintf(&b, " desired=%d", c.Desired)
		if len(c.Removed) > 0 {
			fmt.Fprintf(&b, " removed=%s", strings.Join(c.Removed, ","))
		}
	} else {
		fmt.Fprintf(&b, " %s rev=%d", c.Key, c.Revision)
	}
	if c.Op == OpUpdate && c.Value != "" {
		fmt.Fprintf(&b, " value=%s", c.Value)
	}
	if c.Batch > 0 {
		fmt.Fprintf(&b, " batch=%d", c.Batch)
	}
	if c.Err != nil {
		fmt.Fprintf(&b, " err=%s", c.Err)
	}
	return b.String()
}

// callLog records calls in order. Its methods are safe for concurrent use.
// Target and FaultyOps embed it, which gives them Calls, CallsWatch,
// InFlight, InFlightWatch and ResetCalls.
type callLog struct {
	mu      sync.Mutex
	calls   []Call
	running map[int]Call // calls started and not yet returned, by start number
	started int          // start numbers given so far
	batches int
	changed chan struct{} // closed on every start and record; nil until first needed
}

// wake must be called with mu held.
func (l *callLog) wake() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// begin notes that call c started and returns its start number, which
// finish or abandon take.
func (l *callLog) begin(c Call) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[int]Call{}
	}
	l.started++
	l.running[l.started] = c
	l.wake()
	return l.started
}

// finish records c, a call that returned, and ends the running call with
// start number id.
func (l *callLog) finish(id int, c Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, id)
	c.Seq = len(l.calls) + 1
	l.calls = append(l.calls, c)
	l.wake()
}

// abandon ends the running call with start number id without recording
// it: a batch's entries that a panic kept from being attempted. Ending a
// call that already finished does nothing.
func (l *callLog) abandon(id int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.running[id]; ok {
		delete(l.running, id)
		l.wake()
	}
}

// nextBatch numbers a batch call.
func (l *callLog) nextBatch() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches++
	return l.batches
}

// Calls returns a copy of the calls recorded so far, oldest first.
func (l *callLog) Calls() []Call {
	calls, _ := l.CallsWatch()
	return calls
}

// CallsWatch returns a copy of the calls recorded so far and a channel that
// is closed when the next call is recorded.
func (l *callLog) CallsWatch() ([]Call, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return slices.Clone(l.calls), l.changed
}

// InFlight returns the calls that have started and not yet returned, such
// as those a delay fault holds, in the order they started. Their Seq and
// Err are zero.
func (l *callLog) InFlight() []Call {
	calls, _ := l.InFlightWatch()
	return calls
}

// InFlightWatch returns the calls in flight, like InFlight, and a channel
// that is closed when a call starts or returns.
func (l *callLog) InFlightWatch() ([]Call, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	ids := slices.Sorted(maps.Keys(l.running))
	calls := make([]Call, len(ids))
	for i, id := range ids {
		calls[i] = l.running[id]
	}
	return calls, l.changed
}

// ResetCalls forgets the calls recorded so far (numbering starts again
// from 1), releasing the transactions held by recorded prunes. Calls in
// flight are kept, and recorded when they return.
func (l *callLog) ResetCalls() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls, l.batches = nil, 0
	l.wake()
}

// CallRecorder is what [Target] and [FaultyOps] have in common: a log of
// the calls they saw. The reconciler/calls and reconciler/prune commands
// read it.
type CallRecorder interface {
	Calls() []Call
	CallsWatch() ([]Call, <-chan struct{})
	InFlight() []Call
	InFlightWatch() ([]Call, <-chan struct{})
	ResetCalls()
}
