package reconcilertest

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/reconciler"
)

// FaultyOps wraps operations and injects faults into their calls: errors,
// terminal errors, retry-after errors, panics and delays, chosen per key,
// per operation, for the next N calls or at random with a seed (see
// [Fault]). Without faults it passes every call through unchanged. It
// records every call it sees with its outcome, so it also counts the
// attempts that never reached the wrapped operations.
//
// Give the FaultyOps to [reconciler.Register] as the operations, and
// [FaultyOps.Batch] (or [FaultyOps.Processor], for ProcessBatch) as the
// batch operations. Inject and Clear may be called
// at any time from any goroutine, also while operations run; a fault
// applies to calls that start after it was injected. Use [NewFaultyOps];
// the zero FaultyOps is not usable.
type FaultyOps[Obj any] struct {
	callLog
	faults faultSet
	key    func(Obj) string
	ops    reconciler.Operations[Obj]
	batch  reconciler.BatchOperations[Obj]
}

var (
	_ reconciler.Operations[struct{}]      = (*FaultyOps[struct{}])(nil)
	_ reconciler.BatchOperations[struct{}] = (*FaultyOps[struct{}])(nil)
	_ CallRecorder                         = (*FaultyOps[struct{}])(nil)
)

// NewFaultyOps wraps ops and, if not nil, batch. key gives an object's key,
// which faults select on. It panics if key or ops is nil.
func NewFaultyOps[Obj any](key func(Obj) string, ops reconciler.Operations[Obj], batch reconciler.BatchOperations[Obj]) *FaultyOps[Obj] {
	if key == nil || ops == nil {
		panic("reconcilertest.NewFaultyOps: key function and operations must not be nil")
	}
	return &FaultyOps[Obj]{key: key, ops: ops, batch: batch}
}

// Batch returns f as BatchOperations if it wraps batch operations, and nil
// otherwise, ready to pass to [reconciler.Register] next to f.
func (f *FaultyOps[Obj]) Batch() reconciler.BatchOperations[Obj] {
	if f.batch == nil {
		return nil
	}
	return f
}

// Inject adds a fault. It returns an error, and adds nothing, if a field is
// out of range. The newest fault that matches a call decides what happens
// to it.
func (f *FaultyOps[Obj]) Inject(fault Fault) error {
	if err := f.faults.add(fault); err != nil {
		return fmt.Errorf("reconcilertest: %w", err)
	}
	return nil
}

// Clear removes the faults for key, or every fault if key is "", and
// releases the operations they delay. It returns how many faults it
// removed.
func (f *FaultyOps[Obj]) Clear(key string) int { return f.faults.clear(key) }

// Faults returns the active faults, oldest first, with Next counting the
// calls each has left.
func (f *FaultyOps[Obj]) Faults() []Fault { return f.faults.list() }

// apply runs the fault that fires for a call before the wrapped operation,
// if any; id is the call's start number. A single call decides its fault
// before it shows in flight (begin), so that a script that sees it in
// flight and then clears or adds faults changes nothing for it: it holds
// on the fault it was given. proceed reports whether the call
// should go on to the wrapped operation; if not, err is its outcome. A
// panic fault runs beforePanic if not nil, records the call and panics.
func (f *FaultyOps[Obj]) apply(ctx context.Context, id int, c Call, beforePanic func()) (proceed bool, err error) {
	return f.fire(ctx, id, c, beforePanic, f.faults.decide(c.Op, c.Key, false))
}

// applyAfter runs the fault with After that fires for a call whose wrapped
// operation returned err, if it returned nil, and returns the call's
// outcome.
func (f *FaultyOps[Obj]) applyAfter(ctx context.Context, id int, c Call, err error) error {
	recheck, err := f.applyAfterRecheck(ctx, id, c, err)
	if recheck > 0 {
		reconciler.RecheckAfter(ctx, recheck)
	}
	return err
}

// applyAfterRecheck is applyAfter that returns the re-check a ModeRecheck
// fault asks for instead of asking it.
func (f *FaultyOps[Obj]) applyAfterRecheck(ctx context.Context, id int, c Call, err error) (time.Duration, error) {
	if err != nil {
		return 0, err
	}
	r := f.faults.decide(c.Op, c.Key, true)
	if r != nil && r.Mode == ModeRecheck {
		return r.Duration, nil
	}
	_, err = f.fire(ctx, id, c, nil, r)
	return 0, err
}

// fire runs rule r, if not nil, as apply describes.
func (f *FaultyOps[Obj]) fire(ctx context.Context, id int, c Call, beforePanic func(), r *rule) (proceed bool, err error) {
	if r == nil {
		return true, nil
	}
	what := string(c.Op)
	if c.Key != "" {
		what += " " + c.Key
	}
	injected := fmt.Errorf("%w: %s", ErrInjected, what)
	switch r.Mode {
	case ModeError:
		return false, injected
	case ModeTerminal:
		return false, reconciler.TerminalError(injected)
	case ModeRetryAfter:
		return false, reconciler.RetryAfter(r.Duration, injected)
	case ModePanic:
		msg := "injected panic: " + what
		if beforePanic != nil {
			beforePanic()
		}
		c.Err = fmt.Errorf("%s", msg)
		f.finish(id, c)
		panic(msg)
	case ModeDelay:
		var timeout <-chan time.Time
		if r.Duration > 0 {
			t := time.NewTimer(r.Duration)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-timeout:
		case <-r.release:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

// Update implements [reconciler.Operations].
func (f *FaultyOps[Obj]) Update(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj Obj) error {
	c := Call{Op: OpUpdate, Key: f.key(obj), Revision: rev}
	r := f.faults.decide(c.Op, c.Key, false) // before the call shows in flight: see apply
	id := f.begin(c)
	proceed, err := f.fire(ctx, id, c, nil, r)
	if proceed {
		err = f.applyAfter(ctx, id, c, f.ops.Update(ctx, txn, rev, obj))
	}
	c.Err = err
	f.finish(id, c)
	return err
}

// Delete implements [reconciler.Operations].
func (f *FaultyOps[Obj]) Delete(ctx context.Context, txn statedb.ReadTxn, rev statedb.Revision, obj Obj) error {
	c := Call{Op: OpDelete, Key: f.key(obj), Revision: rev}
	r := f.faults.decide(c.Op, c.Key, false) // before the call shows in flight: see apply
	id := f.begin(c)
	proceed, err := f.fire(ctx, id, c, nil, r)
	if proceed {
		err = f.applyAfter(ctx, id, c, f.ops.Delete(ctx, txn, rev, obj))
	}
	c.Err = err
	f.finish(id, c)
	return err
}

// Prune implements [reconciler.Operations]. Only faults without a key
// apply to it.
func (f *FaultyOps[Obj]) Prune(ctx context.Context, txn statedb.ReadTxn, objects iter.Seq2[Obj, statedb.Revision]) error {
	c := Call{Op: OpPrune, Txn: txn}
	for range objects {
		c.Desired++
	}
	r := f.faults.decide(c.Op, c.Key, false) // before the call shows in flight: see apply
	id := f.begin(c)
	proceed, err := f.fire(ctx, id, c, nil, r)
	if proceed {
		err = f.applyAfter(ctx, id, c, f.ops.Prune(ctx, txn, objects))
	}
	c.Err = err
	f.finish(id, c)
	return err
}

// UpdateBatch implements [reconciler.BatchOperations]. Entries hit by a
// fault get its outcome; the others go to the wrapped UpdateBatch (or to
// Update one by one if f wraps no batch operations).
func (f *FaultyOps[Obj]) UpdateBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[Obj]) {
	f.runBatch(ctx, txn, OpUpdate, batch)
}

// DeleteBatch implements [reconciler.BatchOperations], like UpdateBatch.
func (f *FaultyOps[Obj]) DeleteBatch(ctx context.Context, txn statedb.ReadTxn, batch []reconciler.BatchEntry[Obj]) {
	f.runBatch(ctx, txn, OpDelete, batch)
}

func (f *FaultyOps[Obj]) runBatch(ctx context.Context, txn statedb.ReadTxn, op Op, batch []reconciler.BatchEntry[Obj]) {
	n := f.nextBatch()
	calls := make([]Call, len(batch))
	ids := make([]int, len(batch)) // every entry is in flight from the start
	for i := range batch {
		calls[i] = Call{Op: op, Key: f.key(batch[i].Object), Revision: batch[i].Revision, Batch: n}
		ids[i] = f.begin(calls[i])
	}
	defer func() {
		// The entries after one that panicked were never attempted.
		for _, id := range ids {
			f.abandon(id)
		}
	}()
	var pass []int // entries going to the wrapped operations
	flush := func() {
		f.forward(ctx, txn, op, batch, pass)
		for _, i := range pass {
			batch[i].RecheckAfter, batch[i].Result = f.applyAfterRecheck(ctx, ids[i], calls[i], batch[i].Result)
			calls[i].Err = batch[i].Result
			f.finish(ids[i], calls[i])
		}
		pass = nil
	}
	for i := range batch {
		proceed, err := f.apply(ctx, ids[i], calls[i], flush)
		if proceed {
			pass = append(pass, i)
			continue
		}
		batch[i].Result, calls[i].Err = err, err
		f.finish(ids[i], calls[i])
	}
	flush()
}

// forward hands the entries of batch at indexes pass to the wrapped
// operations and sets their results.
func (f *FaultyOps[Obj]) forward(ctx context.Context, txn statedb.ReadTxn, op Op, batch []reconciler.BatchEntry[Obj], pass []int) {
	if len(pass) == 0 {
		return
	}
	if f.batch == nil {
		for _, i := range pass {
			e := &batch[i]
			if op == OpUpdate {
				e.Result = f.ops.Update(ctx, txn, e.Revision, e.Object)
			} else {
				e.Result = f.ops.Delete(ctx, txn, e.Revision, e.Object)
			}
		}
		return
	}
	sub := batch
	if len(pass) < len(batch) {
		sub = make([]reconciler.BatchEntry[Obj], len(pass))
		for j, i := range pass {
			sub[j] = batch[i]
		}
	}
	if op == OpUpdate {
		f.batch.UpdateBatch(ctx, txn, sub)
	} else {
		f.batch.DeleteBatch(ctx, txn, sub)
	}
	if len(pass) < len(batch) {
		for j, i := range pass {
			batch[i].Result = sub[j].Result
		}
	}
}

// Processor returns f as batch operations that also implement
// [reconciler.BatchProcessor], to pass to [reconciler.Register] in place
// of [FaultyOps.Batch]: the reconciler then calls ProcessBatch with a
// batch's deletes and updates. They have f's Prune too, so they may also
// serve alone, with no Operations given to Register.
//
// ProcessBatch records every entry with one batch number, deletes first,
// and applies the faults to each as UpdateBatch and DeleteBatch do (a
// re-check sets the upserted entry's RecheckAfter). The
// entries no fault stopped go to the wrapped operations in one call:
// ProcessBatch if the wrapped batch operations implement it (its error is
// returned), else DeleteBatch then UpdateBatch, else Delete and Update one
// by one. Wrapped batch operations given some of the entries must leave
// them in place: their results are copied back by position.
func (f *FaultyOps[Obj]) Processor() reconciler.BatchOperations[Obj] {
	return faultyProcessor[Obj]{f}
}

// faultyProcessor is a FaultyOps that implements BatchProcessor.
type faultyProcessor[Obj any] struct{ *FaultyOps[Obj] }

var _ reconciler.BatchProcessor[struct{}] = faultyProcessor[struct{}]{}

// ProcessBatch implements [reconciler.BatchProcessor].
func (p faultyProcessor[Obj]) ProcessBatch(ctx context.Context, txn statedb.ReadTxn, deleted, upserted []reconciler.BatchEntry[Obj]) error {
	return p.processBatch(ctx, txn, deleted, upserted)
}

// batchPart is the deletes or the updates of a ProcessBatch call: the
// entries, their calls and start numbers, and the indexes of those going
// to the wrapped operations.
type batchPart[Obj any] struct {
	op    Op
	batch []reconciler.BatchEntry[Obj]
	calls []Call
	ids   []int
	pass  []int
}

func (f *FaultyOps[Obj]) processBatch(ctx context.Context, txn statedb.ReadTxn, deleted, upserted []reconciler.BatchEntry[Obj]) (err error) {
	n := f.nextBatch()
	parts := [2]batchPart[Obj]{{op: OpDelete, batch: deleted}, {op: OpUpdate, batch: upserted}}
	for p := range parts {
		pt := &parts[p]
		pt.calls, pt.ids = make([]Call, len(pt.batch)), make([]int, len(pt.batch))
		for i := range pt.batch {
			pt.calls[i] = Call{Op: pt.op, Key: f.key(pt.batch[i].Object), Revision: pt.batch[i].Revision, Batch: n}
			pt.ids[i] = f.begin(pt.calls[i])
		}
	}
	defer func() {
		// The entries after one that panicked were never attempted.
		for p := range parts {
			for _, id := range parts[p].ids {
				f.abandon(id)
			}
		}
	}()
	flush := func() {
		err = f.forwardParts(ctx, txn, &parts)
		for p := range parts {
			pt := &parts[p]
			for _, i := range pt.pass {
				e := &pt.batch[i]
				if e.Result == nil && err == nil {
					var recheck time.Duration
					if recheck, e.Result = f.applyAfterRecheck(ctx, pt.ids[i], pt.calls[i], nil); recheck > 0 {
						e.RecheckAfter = recheck
					}
				}
				pt.calls[i].Err = e.Result
				if e.Result == nil {
					pt.calls[i].Err = err
				}
				f.finish(pt.ids[i], pt.calls[i])
			}
			pt.pass = nil
		}
	}
	for p := range parts {
		pt := &parts[p]
		for i := range pt.batch {
			proceed, ferr := f.apply(ctx, pt.ids[i], pt.calls[i], flush)
			if proceed {
				pt.pass = append(pt.pass, i)
				continue
			}
			pt.batch[i].Result, pt.calls[i].Err = ferr, ferr
			f.finish(pt.ids[i], pt.calls[i])
		}
	}
	flush()
	return err
}

// forwardParts hands the passing entries of both parts to the wrapped
// operations in one call, as Processor describes, and returns the error
// of a wrapped ProcessBatch.
func (f *FaultyOps[Obj]) forwardParts(ctx context.Context, txn statedb.ReadTxn, parts *[2]batchPart[Obj]) error {
	bp, ok := f.batch.(reconciler.BatchProcessor[Obj])
	if !ok {
		f.forward(ctx, txn, OpDelete, parts[0].batch, parts[0].pass)
		f.forward(ctx, txn, OpUpdate, parts[1].batch, parts[1].pass)
		return nil
	}
	if len(parts[0].pass)+len(parts[1].pass) == 0 {
		return nil
	}
	var subs [2][]reconciler.BatchEntry[Obj]
	for p := range parts {
		pt := &parts[p]
		subs[p] = pt.batch
		if len(pt.pass) < len(pt.batch) {
			subs[p] = make([]reconciler.BatchEntry[Obj], len(pt.pass))
			for j, i := range pt.pass {
				subs[p][j] = pt.batch[i]
			}
		}
	}
	err := bp.ProcessBatch(ctx, txn, subs[0], subs[1])
	for p := range parts {
		if pt := &parts[p]; len(pt.pass) < len(pt.batch) {
			for j, i := range pt.pass {
				pt.batch[i].Result = subs[p][j].Result
			}
		}
	}
	return err
}
