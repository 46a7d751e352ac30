package reconciler_test

// Claim 4 of the guarantee review: "Objects put back". An object put back
// as it was before (the very Go object read before its delete, status
// identity included) is applied again when the doc says so; once the table
// is quiet the target holds the table.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/statedb"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// waitAllDone waits until every object of the table is Done.
func (e *o30Env) waitAllDone() {
	e.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		objs, watch := e.table.AllWatch(e.db.ReadTxn())
		var notDone *o30Obj
		for o := range objs {
			if o.Status.Kind != status.KindDone {
				notDone = o
				break
			}
		}
		if notDone == nil {
			return
		}
		select {
		case <-watch:
		case <-deadline.C:
			e.t.Fatalf("object %s (%q) not Done within 20s: %v", notDone.ID, notDone.Value, notDone.Status)
		}
	}
}

// settle waits for every object to be Done and the reconciler to have
// handled every change: it writes a marker object so that the revision
// waited for is that of an insert.
func (e *o30Env) settle() {
	e.t.Helper()
	e.waitAllDone()
	rev := e.put(&o30Obj{ID: "~marker", Value: fmt.Sprint(time.Now().UnixNano())})
	e.waitRev(rev)
	e.waitAllDone()
	// WaitUntilReconciled returns while failed objects (a delete, which
	// leaves no status) wait for a retry: wait until none does.
	require.Eventually(e.t, func() bool {
		_, low, err := e.rec.WaitUntilReconciled(context.Background(), rev)
		return err == nil && low == 0
	}, 20*time.Second, time.Millisecond, "retries still pending")
}

// takeOut reads and deletes id in one transaction and returns the object
// as it was.
func (e *o30Env) takeOut(id string) (*o30Obj, statedb.Revision) {
	e.t.Helper()
	wtxn := e.db.WriteTxn(e.table)
	o, _, found := e.table.Get(wtxn, o30ByID.Query(id))
	if !found {
		wtxn.Abort()
		return nil, 0
	}
	_, _, err := e.table.Delete(wtxn, o)
	require.NoError(e.t, err)
	rev := e.table.Revision(wtxn)
	wtxn.Commit()
	return o, rev
}

// The basic case: Done object read, deleted, the delete handed to Delete,
// the very object put back: it is applied again.
func TestGuaranteePutBackAfterDeleteRead(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			for i := range 20 {
				id := fmt.Sprintf("k%d", i)
				e.put(&o30Obj{ID: id, Value: "1"})
				e.waitAllDone()
				was, _ := e.takeOut(id)
				e.settle()
				require.Positive(t, tgt.deleteCount(id))
				e.putAsIs(was)
				e.settle()
				e.requireConverged("put back " + id)
			}
		})
	}
}

// A newer version's update applied to the target and then failed: it
// waits for a retry (far away) when the older version is put back as it
// was, Done: the older one is applied again ("a newer version of the key
// that the reconciler holds (queued, running or waiting for a retry)").
func TestGuaranteePutBackOverNewerWaitingForRetry(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			tgt.afterUpdate = func(_ context.Context, o *o30Obj) error {
				if o.Value == "2" {
					return errors.New("applied, then failed")
				}
				return nil
			}
			e := newO30Env(t, tgt, v.config(reconciler.WithRetry(time.Hour, time.Hour)))
			e.start()
			e.put(&o30Obj{ID: "k", Value: "1"})
			e.waitAllDone()
			was, _ := e.get("k")
			e.put(&o30Obj{ID: "k", Value: "2"})
			o30WaitKind(t, e, "k", status.KindError)
			e.putAsIs(was)
			e.settle()
			e.requireConverged("v1 put back over v2 waiting for a retry")
		})
	}
}

// As above, the newer version cut short by a stop of the hive (its update
// applied, then its context cancelled), the older one put back while the
// hive is stopped. Stopping does not make the reconciler forget.
// (TestGuaranteeUpdateCutShortThenOlderPutBackWhileStopped is the same attack.)

// A newer version's update is running when the older version is put back
// as it was, Done: the older one is applied again after it.
func TestGuaranteePutBackOverNewerRunning(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			entered := make(chan struct{}, 1)
			release := make(chan struct{})
			tgt.afterUpdate = func(ctx context.Context, o *o30Obj) error {
				if o.Value == "2" {
					entered <- struct{}{}
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}
			e := newO30Env(t, tgt, v.config())
			e.start()
			e.put(&o30Obj{ID: "k", Value: "1"})
			e.waitAllDone()
			was, _ := e.get("k")
			e.put(&o30Obj{ID: "k", Value: "2"})
			o30Wait(t, entered, "the update of k to 2")
			e.putAsIs(was)
			close(release)
			e.settle()
			e.requireConverged("v1 put back over v2 running")
		})
	}
}

func o30WaitKind(t *testing.T, e *o30Env, id string, kind status.Kind) *o30Obj {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		o, _, watch, found := e.table.GetWatch(e.db.ReadTxn(), o30ByID.Query(id))
		if found && o.Status.Kind == kind {
			return o
		}
		select {
		case <-watch:
		case <-deadline.C:
			t.Fatalf("%s did not reach %v (last %v)", id, kind, o)
		}
	}
}

// Delete, a prune (which removes the object from the target, whether or
// not the loop read the delete first) and the object put back as it was, at
// several moments relative to the prune, with round limits that keep a
// backlog of fresh changes ahead of the delete.
func TestGuaranteePutBackAroundPrunes(t *testing.T) {
	type mode struct {
		name        string
		roundLimits bool
	}
	for _, v := range o30Variants {
		for _, m := range []mode{{"unlimited", false}, {"rounds-of-1-at-200/s", true}} {
			t.Run(v.String()+","+m.name, func(t *testing.T) {
				tgt := newO30Target()
				var opts []reconciler.Option
				if m.roundLimits {
					opts = append(opts, reconciler.WithRoundLimits(1, rate.NewLimiter(200, 1)))
				}
				e := newO30Env(t, tgt, v.config(opts...))
				e.start()
				for i := range 12 {
					id := fmt.Sprintf("k%d", i)
					e.put(&o30Obj{ID: id, Value: "1"})
					e.settle()
					// A backlog of fresh changes ahead of the delete.
					e.put(o30Objs(fmt.Sprintf("filler%d", i), 10, "1")...)
					was, _ := e.takeOut(id)
					before := tgt.pruneCount()
					switch i % 4 {
					case 0: // put back once a prune has run
						e.rec.Prune()
						o30WaitPrunes(t, tgt, before+1)
						e.putAsIs(was)
					case 1: // two prunes, the second after the put back
						e.rec.Prune()
						o30WaitPrunes(t, tgt, before+1)
						e.putAsIs(was)
						e.rec.Prune()
						o30WaitPrunes(t, tgt, before+2)
					case 2: // put back while a prune is asked for
						e.rec.Prune()
						e.putAsIs(was)
						o30WaitPrunes(t, tgt, before+1)
					case 3: // deleted and put back twice around prunes
						e.rec.Prune()
						o30WaitPrunes(t, tgt, before+1)
						e.putAsIs(was)
						again, _ := e.takeOut(id)
						e.rec.Prune()
						o30WaitPrunes(t, tgt, before+2)
						e.putAsIs(again)
					}
					e.settle()
					e.requireConverged("put back " + id)
				}
			})
		}
	}
}

func o30WaitPrunes(t *testing.T, tgt *o30Target, n int) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for tgt.pruneCount() < n {
		select {
		case <-tgt.pruneCh:
		case <-deadline.C:
			t.Fatalf("prune %d did not run within 20s (%d ran)", n, tgt.pruneCount())
		}
	}
}

// o30Flaky makes the target fail some operations (some after applying
// them) and yield at random, while on.
type o30Flaky struct {
	on   atomic.Bool
	mu   sync.Mutex
	rand *rand.Rand
}

func (f *o30Flaky) roll(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rand.IntN(n)
}

var errO30Flaky = errors.New("flaky target")

func (f *o30Flaky) before(context.Context, *o30Obj) error {
	if !f.on.Load() {
		return nil
	}
	for range f.roll(50) {
		runtime.Gosched()
	}
	if f.roll(10) == 0 {
		return errO30Flaky
	}
	return nil
}

func (f *o30Flaky) after(context.Context, *o30Obj) error {
	if f.on.Load() && f.roll(10) == 0 {
		return errO30Flaky
	}
	return nil
}

// A random mix of writes, deletes, objects put back as they were (the
// very object read in the transaction that deleted it), prunes, pauses,
// stops and starts, against a target that fails and yields at random. At
// every quiet point, and at the end, the target must hold the table.
func TestGuaranteePutBackModel(t *testing.T) {
	type cfg struct {
		v     o30Variant
		round int
	}
	var cfgs []cfg
	for _, v := range o30Variants {
		cfgs = append(cfgs, cfg{v, 1000}, cfg{v, 2})
	}
	for _, c := range cfgs {
		t.Run(fmt.Sprintf("%v,round=%d", c.v, c.round), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rnd := rand.New(rand.NewPCG(seed, 30))
			flaky := &o30Flaky{rand: rand.New(rand.NewPCG(seed, 31))}
			tgt := newO30Target()
			tgt.beforeUpdate, tgt.beforeDelete = flaky.before, flaky.before
			tgt.afterUpdate, tgt.afterDelete = flaky.after, flaky.after
			e := newO30Env(t, tgt, c.v.config(
				reconciler.WithRoundLimits(c.round, nil),
				reconciler.WithRetry(time.Millisecond, 4*time.Millisecond),
			))
			e.start()
			const keys = 6
			removed := map[string]*o30Obj{}
			paused := false
			value := 0
			var history []string
			quiet := func(what string) {
				flaky.on.Store(false)
				if !e.running {
					e.start()
					history = append(history, "start")
				}
				if paused {
					e.rec.Resume()
					paused = false
					history = append(history, "resume")
				}
				e.settle()
				want, _ := e.tableState()
				got := tgt.snapshot()
				for k := range want {
					if k == "~marker" {
						continue
					}
					if want[k] != got[k] {
						t.Fatalf("%s: key %s: table %q Done, target %q; history of the last steps:\n%v", what, k, want[k], got[k], history)
					}
				}
				e.requireConverged(what)
				history = history[:0]
			}
			for step := range 400 {
				flaky.on.Store(true)
				id := fmt.Sprintf("m%d", rnd.IntN(keys))
				switch r := rnd.IntN(100); {
				case r < 30:
					value++
					e.put(&o30Obj{ID: id, Value: fmt.Sprint(value)})
					history = append(history, fmt.Sprintf("put %s=%d", id, value))
				case r < 55:
					if o, _ := e.takeOut(id); o != nil {
						removed[id] = o
						history = append(history, fmt.Sprintf("delete %s (was %q %v)", id, o.Value, o.Status))
					}
				case r < 80:
					if o := removed[id]; o != nil {
						if _, there := e.get(id); !there {
							e.putAsIs(o)
							history = append(history, fmt.Sprintf("put back %s=%q %v", id, o.Value, o.Status))
						}
					}
				case r < 88:
					e.rec.Prune()
					history = append(history, "prune")
				case r < 92:
					if paused {
						e.rec.Resume()
						history = append(history, "resume")
					} else {
						e.rec.Pause()
						history = append(history, "pause")
					}
					paused = !paused
				case r < 95:
					if e.running {
						e.stop()
						history = append(history, "stop")
					} else {
						e.start()
						history = append(history, "start")
					}
				case r < 97:
					quiet(fmt.Sprintf("quiet point at step %d", step))
				default:
					for range rnd.IntN(2000) {
						runtime.Gosched()
					}
				}
			}
			quiet("end")
		})
	}
}

// A newer version applied and then failed, waiting for a retry, over a
// stop and a start of the hive; the older version put back as it was, Done,
// while stopped or after the start: it is applied again ("What it remembers
// lives as long as the reconciler, across stops and starts").
func TestGuaranteePutBackOverNewerWaitingForRetryAcrossStop(t *testing.T) {
	for _, v := range o30Variants {
		for _, whileStopped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v,putBackWhileStopped=%v", v, whileStopped), func(t *testing.T) {
				tgt := newO30Target()
				tgt.afterUpdate = func(_ context.Context, o *o30Obj) error {
					if o.Value == "2" {
						return errors.New("applied, then failed")
					}
					return nil
				}
				e := newO30Env(t, tgt, v.config(reconciler.WithRetry(time.Hour, time.Hour)))
				e.start()
				e.put(&o30Obj{ID: "k", Value: "1"})
				e.waitAllDone()
				was, _ := e.get("k")
				e.put(&o30Obj{ID: "k", Value: "2"})
				o30WaitKind(t, e, "k", status.KindError)
				e.stop()
				if whileStopped {
					e.putAsIs(was)
					e.start()
				} else {
					e.start()
					e.putAsIs(was)
				}
				e.settle()
				e.requireConverged("v1 put back over v2 waiting for a retry, across a stop")
			})
		}
	}
}

// A delete read and handed to Delete, a stop and a start, then the very
// object put back: applied again.
func TestGuaranteePutBackAfterDeleteReadAcrossStop(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			e.put(&o30Obj{ID: "k", Value: "1"})
			e.waitAllDone()
			was, _ := e.takeOut("k")
			e.settle()
			require.Positive(t, tgt.deleteCount("k"))
			e.stop()
			e.start()
			e.putAsIs(was)
			e.settle()
			e.requireConverged("put back after a delete read, across a stop")
		})
	}
}

// The reconciler remembers the keys of the last 8192 deletes it read at
// least: k's delete followed by 8191 deletes of other keys, each read,
// then k put back as it was: applied again.
func TestGuaranteePutBackAfter8191OtherDeletes(t *testing.T) {
	for _, v := range []o30Variant{{1, false}, {4, true}} {
		for _, rounds := range []string{"one-transaction", "many-rounds"} {
			t.Run(v.String()+","+rounds, func(t *testing.T) {
				tgt := newO30Target()
				e := newO30Env(t, tgt, v.config())
				e.start()
				others := o30Objs("o", 8191, "1")
				e.put(others...)
				e.put(&o30Obj{ID: "k", Value: "1"})
				e.settle()
				was, _ := e.takeOut("k")
				e.settle()
				require.Positive(t, tgt.deleteCount("k"))
				ids := o30IDs(others)
				if rounds == "one-transaction" {
					e.del(ids...)
				} else {
					for start := 0; start < len(ids); start += 500 {
						e.del(ids[start:min(start+500, len(ids))]...)
						e.settle()
					}
				}
				e.settle()
				for _, id := range ids {
					require.Positive(t, tgt.deleteCount(id))
				}
				e.putAsIs(was)
				e.settle()
				e.requireConverged("k put back after 8191 other deletes")
			})
		}
	}
}

// A Delete that removed the object from the target and then failed waits
// for a retry when the object is put back as it was (Done): the retry is
// dropped ("retried until it succeeds or the object is inserted again") and
// the object applied again, its delete having been read.
func TestGuaranteePutBackOverFailedDelete(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			failed := make(chan struct{}, 1)
			tgt.afterDelete = func(context.Context, *o30Obj) error {
				select {
				case failed <- struct{}{}:
				default:
				}
				return errors.New("deleted, then failed")
			}
			e := newO30Env(t, tgt, v.config(reconciler.WithRetry(time.Hour, time.Hour)))
			e.start()
			e.put(&o30Obj{ID: "k", Value: "1"})
			e.waitAllDone()
			was, _ := e.takeOut("k")
			o30Wait(t, failed, "the failing Delete")
			e.putAsIs(was)
			e.settle()
			e.requireConverged("put back over a failed delete")
		})
	}
}

// A delete made while the hive is stopped, the object put back as it was
// at some moment right after the start: the target holds it in the end.
func TestGuaranteeDeleteWhileStoppedPutBackAfterStart(t *testing.T) {
	for _, v := range o30Variants {
		t.Run(v.String(), func(t *testing.T) {
			tgt := newO30Target()
			e := newO30Env(t, tgt, v.config())
			e.start()
			for i := range 10 {
				id := fmt.Sprintf("k%d", i)
				e.put(&o30Obj{ID: id, Value: "1"})
				e.settle()
				e.stop()
				was, _ := e.takeOut(id)
				e.start()
				for range i * 200 {
					runtime.Gosched()
				}
				e.putAsIs(was)
				e.settle()
				e.requireConverged(fmt.Sprintf("iteration %d", i))
			}
		})
	}
}
