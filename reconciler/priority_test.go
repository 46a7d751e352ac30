package reconciler_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/metrics"
	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// priorityByPrefix is a priority function: objects whose ID starts with
// "high" come first.
func priorityByPrefix(it *item) int {
	if strings.HasPrefix(it.ID, "high") {
		return 1
	}
	return 0
}

// roundHook is metrics whose Round calls a function, on the reconciler's
// goroutine, at the end of every round.
type roundHook struct {
	*metrics.ExpVar
	round func(metrics.RoundStats)
}

func (m *roundHook) Round(_ cell.FullModuleID, _ string, s metrics.RoundStats) { m.round(s) }

// A steady stream of high-priority writes, enough to fill every round,
// never holds a low-priority one back for more rounds than WithPriority's
// bound: with n changes before it and a share of s of rounds of R objects,
// ⌈(n+1)/(s·R)⌉ rounds. The changes before it are of its priority too, so
// that only the share takes them, and the bound is met exactly. Rounds are
// counted by the reconciler's own round
// metrics, which also write the stream, between rounds: the same rounds
// every run, whatever the machine's speed.
func TestPriorityDoesNotStarveLowerPriorities(t *testing.T) {
	const (
		roundSize = 10
		share     = 0.2
		before    = 30  // low-priority changes written just before the one watched
		stream    = 200 // rounds during which high-priority writes go on
	)
	var (
		f         *fixture
		rounds    int // the round metrics' count, on the reconciler's goroutine
		written   int // the round after which the low object was written
		doneAt    int // the round that committed it
		highsDone int // high-priority objects Done by then
		seq       int
		done      = make(chan struct{})
	)
	highs := func(n int) []*item {
		objs := make([]*item, n)
		for i := range objs {
			objs[i] = &item{ID: fmt.Sprintf("high%06d", seq), Value: "1", Status: status.Pending()}
			seq++
		}
		return objs
	}
	insert := func(objs ...*item) {
		wtxn := f.db.WriteTxn(f.table)
		for _, o := range objs {
			_, _, err := f.table.Insert(wtxn, o)
			require.NoError(t, err)
		}
		wtxn.Commit()
	}
	hook := &roundHook{ExpVar: metrics.NewUnpublishedExpVar(), round: func(metrics.RoundStats) {
		rounds++
		switch {
		case written == 0:
			// The first round: the low object comes after three rounds'
			// worth of others of its priority, and before the stream.
			early := items("early", before, "1")
			for _, it := range early {
				it.Status = status.Pending()
			}
			insert(early...)
			insert(&item{ID: "low", Value: "1", Status: status.Pending()})
			written = rounds
		case doneAt == 0:
			txn := f.db.ReadTxn()
			if low, _, _ := f.table.Get(txn, itemID.Query("low")); low.Status.Kind == status.KindDone {
				doneAt = rounds
				for it := range f.table.List(txn, f.index.Query(status.KindDone)) {
					if priorityByPrefix(it) > 0 {
						highsDone++
					}
				}
				close(done)
			}
		}
		if rounds < stream {
			insert(highs(roundSize)...) // a round's worth: the queue never shrinks
		}
	}}
	f = newFixture(t, newTarget(), nil,
		reconciler.WithMetrics(hook),
		reconciler.WithRoundLimits(roundSize, nil),
		reconciler.WithPriority(priorityByPrefix, share))
	f.start()
	recv(t, done, "the low-priority object to be Done")

	bound := int(math.Ceil((before + 1) / (share * roundSize)))
	waited := doneAt - written
	t.Logf("low-priority object Done %d rounds after it was written (bound %d), after %d high-priority ones", waited, bound, highsDone)
	assert.LessOrEqual(t, waited, bound, "rounds the low-priority object waited")
	assert.GreaterOrEqual(t, highsDone, (waited-1)*int(roundSize*(1-share)), "high-priority objects written after it went first")
	f.caughtUp()
}

// The priority of a version is read once, when its change is read:
// requeues of that version (held by the breaker, cut by Pause or a stop)
// do not read it again.
func TestPriorityReadOncePerVersion(t *testing.T) {
	for _, v := range []variant{{1, false}, {4, false}, {4, true}} {
		t.Run(v.String(), func(t *testing.T) {
			var mu sync.Mutex
			reads := map[string]int{}
			prio := func(it *item) int {
				mu.Lock()
				reads[it.ID+"="+it.Value]++
				mu.Unlock()
				return priorityByPrefix(it)
			}
			o, m, f := startBreaker(t, v, 2, time.Millisecond, 4*time.Millisecond, reconciler.WithPriority(prio, 0))
			o.down()
			f.upsert(items("low", 10, "1")...)
			f.upsert(items("high", 10, "1")...)
			m.waitOpen(t, 1)
			o.waitCalls(t, o.calls.Load()+20) // probes, held and requeued
			f.rec.Pause()
			f.rec.Resume()
			f.stop()
			f.start()
			o.waitCalls(t, o.calls.Load()+5)
			o.recover()
			f.converged(o.tg)
			mu.Lock()
			defer mu.Unlock()
			for version, n := range reads {
				assert.Equal(t, 1, n, "priority of %s read %d times", version, n)
			}
			assert.Len(t, reads, 20)
		})
	}
}

// A round cut short by a stop gives the changes it never started back
// their turn: after the start they go before those of the same priority
// read after them, first read first, not to the back of their priority.
func TestPriorityRoundCutShortKeepsItsTurn(t *testing.T) {
	for _, v := range []variant{{1, false}, {1, true}} {
		t.Run(v.String(), func(t *testing.T) {
			tg := newTarget()
			f := v.start(t, tg, nil, reconciler.WithRoundLimits(4, nil), reconciler.WithPriority(ppPrio, 0.001))
			f.upsert(&item{ID: "m", Value: "0"}) // the backlog, which priorities do not order
			f.caughtUp()
			h := tg.hold("high-00000")
			f.upsert(items("high", 12, "1")...) // one read; a round of 4 starts with the first
			h.wait(t)
			f.stop() // the other three of the round never start
			f.start()
			f.caughtUp()
			var want []string
			for i := range 12 {
				want = append(want, fmt.Sprintf("update high-%05d=1", i))
			}
			order := slices.DeleteFunc(tg.applied(), func(c string) bool { return c == "update m=0" })
			require.Equal(t, want, order)
		})
	}
}
