package main

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/cilium/statedb"

	"github.com/converge-go/converge/status"
)

// soakEnd is how the soak's final convergence went.
type soakEnd struct {
	took       time.Duration // from the end of the churn until the comparison
	objects    int           // in the table at the comparison
	rewritten  int           // terminal versions written again without the fault
	notSettled string        // what was still not settled when the bound passed; empty if all was
	mismatches int           // keys whose target entry differs from the table
	examples   []string      // the first few of them
}

// converge ends the soak: it writes the objects of terminal versions again
// without the fault, asks for a prune that starts after the last damage to
// the target, waits until every object is Done and every damaged entry is
// repaired (or ctx ends), then compares the target with the table.
func (e *soakEnv) converge(ctx context.Context) (soakEnd, error) {
	var end soakEnd
	t0 := time.Now()

	wtxn := e.db.WriteTxn(e.tbl)
	var terminal []*soakObject
	for o := range e.tbl.All(wtxn) {
		if o.terminal {
			terminal = append(terminal, o)
		}
	}
	for _, o := range terminal {
		e.tbl.Insert(wtxn, &soakObject{id: o.id, seq: e.seq.Add(1), dep: o.dep, st: status.Pending()})
	}
	wtxn.Commit()
	end.rewritten = len(terminal)

	gen := e.target.startPruneGen()
	e.r.Prune()
	end.notSettled = e.settle(ctx, gen)
	end.took = time.Since(t0)

	// Every object Done means every version was applied, so the target
	// holds each object's seq with the value its dependency had then; no
	// dependency changed since the churn stopped.
	txn := e.db.ReadTxn()
	want := map[uint64]soakEntry{}
	for o := range e.tbl.All(txn) {
		w := soakEntry{seq: o.seq}
		if d, _, ok := e.deps.Get(txn, soakDepIndex.Query(o.dep)); ok {
			w.depVal = d.val
		}
		want[o.id] = w
	}
	end.objects = len(want)
	got := e.target.snapshot()
	var bad []uint64
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			bad = append(bad, id)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			bad = append(bad, id)
		}
	}
	slices.Sort(bad)
	end.mismatches = len(bad)
	for _, id := range bad[:min(len(bad), 5)] {
		w, inTable := want[id]
		g, inTarget := got[id]
		o, _, _ := e.tbl.Get(txn, soakIDIndex.Query(id))
		switch {
		case !inTarget:
			end.examples = append(end.examples, fmt.Sprintf("key %d: in the table (seq %d, status %s), not in the target", id, w.seq, o.st))
		case !inTable:
			end.examples = append(end.examples, fmt.Sprintf("key %d: in the target (seq %d), not in the table", id, g.seq))
		default:
			end.examples = append(end.examples, fmt.Sprintf("key %d: table seq %d dependency value %d (status %s), target seq %d dependency value %d", id, w.seq, w.depVal, o.st, g.seq, g.depVal))
		}
	}
	return end, nil
}

// settle waits until a prune of generation gen has finished, no object is
// Pending, Refreshing or Error, and no damaged entry is left in the target.
// It returns what was still unsettled when ctx ended, or "".
func (e *soakEnv) settle(ctx context.Context, gen uint64) string {
	kinds := [...]status.Kind{status.KindPending, status.KindRefreshing, status.KindError}
	for {
		txn := e.db.ReadTxn()
		var watches [len(kinds)]<-chan struct{}
		var busy [len(kinds)]int
		for i, k := range kinds {
			var objs iter.Seq2[*soakObject, statedb.Revision]
			objs, watches[i] = e.tbl.ListWatch(txn, soakStatusIndex.Query(k))
			for range objs {
				busy[i]++
			}
		}
		drifted, changed := e.target.driftLeft()
		pruned, _ := e.target.prunedSince(gen)
		if busy == [len(kinds)]int{} && drifted == 0 && pruned {
			return ""
		}
		select {
		case <-ctx.Done():
			return fmt.Sprintf("%d Pending, %d Refreshing, %d Error objects; %d damaged target entries; prune after the churn finished: %v",
				busy[0], busy[1], busy[2], drifted, pruned)
		case <-watches[0]:
		case <-watches[1]:
		case <-watches[2]:
		case <-changed:
		}
	}
}
