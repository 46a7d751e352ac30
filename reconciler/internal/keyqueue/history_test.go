package keyqueue

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The recent errors of a failing key: the last HistoryLen distinct texts,
// oldest first, kept while the key fails and dropped when its failure ends.

// failWith returns the outcome of a failed update with err.
func failWith(err error, retryAt int64, errID uint64) Outcome[string] {
	return Outcome[string]{Ran: true, Err: err, Written: true, RetryAt: retryAt, ErrID: errID}
}

// failAgain takes s's retry (due at its time) and fails it with err at now.
func failAgain(t *testing.T, q *Queue[string], err error, now time.Time) *State[string] {
	t.Helper()
	taken := takeRetries(q, 1, now.UnixNano())
	require.Len(t, taken, 1, "the retry is due")
	q.Done(taken[0], "", Task[string]{}, failWith(err, now.UnixNano(), 0), now)
	return taken[0]
}

// texts returns the texts and attempts of s's history, "text#attempt".
func texts(s *State[string]) []string {
	var out []string
	for _, r := range s.View().History(nil) {
		out = append(out, fmt.Sprintf("%s#%d", r.Error, r.Attempt))
	}
	return out
}

func TestHistoryKeepsTheLastDistinctErrors(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	assert.Empty(t, s.View().History(nil), "no failure, no history")
	q.Done(s, "", Task[string]{}, failWith(errors.New("a"), t0.UnixNano(), 11), t0)
	assert.Equal(t, []string{"a#1"}, texts(s))

	// The same text again updates the newest record: its time and attempt.
	t1 := t0.Add(time.Second)
	failAgain(t, q, errors.New("a"), t1)
	hist := s.View().History(nil)
	require.Len(t, hist, 1)
	assert.Equal(t, ErrorRecord{Error: "a", At: time.Unix(0, t1.UnixNano()), Attempt: 2}, hist[0])

	// New texts append; past HistoryLen the oldest goes. A text seen
	// before, but not the newest, is appended again: it is what happened.
	at := t1
	for _, text := range []string{"b", "b", "c", "a", "d", "e"} {
		at = at.Add(time.Second)
		failAgain(t, q, errors.New(text), at)
	}
	assert.Equal(t, []string{"c#5", "a#6", "d#7", "e#8"}, texts(s))
	hist = s.View().History(nil)
	for i := 1; i < len(hist); i++ {
		assert.True(t, hist[i-1].At.Before(hist[i].At), "oldest first")
	}
	assert.Equal(t, s.View().Err.Error(), hist[len(hist)-1].Error, "the newest is the last error")
	assert.Equal(t, s.View().Attempts, hist[len(hist)-1].Attempt)
}

// A failure the circuit breaker spared counts no attempt: its record keeps
// the attempt number the key has.
func TestHistorySparedFailureKeepsTheAttempt(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	q.Done(s, "", Task[string]{}, failWith(errors.New("a"), t0.UnixNano(), 11), t0)
	taken := takeRetries(q, 1, t0.UnixNano())
	require.Len(t, taken, 1)
	o := failWith(errors.New("down"), t0.UnixNano(), 12)
	o.Spared = true
	q.Done(taken[0], "", Task[string]{}, o, t0)
	assert.Equal(t, []string{"a#1", "down#1"}, texts(s))
}

func TestHistoryTextsAreBounded(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	long := strings.Repeat("x", MaxErrorText-1) + "é" + strings.Repeat("y", 1000) // é straddles the bound
	q.Done(s, "", Task[string]{}, failWith(errors.New(long), t0.UnixNano(), 11), t0)
	hist := s.View().History(nil)
	require.Len(t, hist, 1)
	assert.Equal(t, strings.Repeat("x", MaxErrorText-1)+"…", hist[0].Error, "cut before the rune that passes the bound")
	assert.True(t, utf8.ValidString(hist[0].Error))
	assert.LessOrEqual(t, len(hist[0].Error), MaxErrorText+len("…"))

	exact := strings.Repeat("z", MaxErrorText)
	failAgain(t, q, errors.New(exact), t0)
	assert.Equal(t, exact, s.View().History(nil)[1].Error, "a text of the bound is kept whole")

	// A long text failing again is the same record: compared once cut.
	failAgain(t, q, errors.New(long), t0)
	failAgain(t, q, errors.New(long+"tail past the bound"), t0)
	assert.Len(t, s.View().History(nil), 3)

	failAgain(t, q, nil, t0)
	assert.Equal(t, "", s.View().History(nil)[3].Error, "a nil error has an empty text")
}

// The history goes exactly when the key's failure does: on a success, a
// terminal error, a newer version, a delete, or a commit that found the
// object changed; not while the key is retried.
func TestHistoryClearedWhenTheFailureEnds(t *testing.T) {
	rows := map[*Queue[string]]failures{} // the failures told of each queue
	fail := func(t *testing.T) (*Queue[string], *State[string]) {
		q := New[string](nil)
		told := failures{}
		rows[q] = told
		q.Configure(Settings[string]{FailureChanged: told.changed})
		s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
		q.Done(s, "", Task[string]{}, failWith(errors.New("a"), t0.UnixNano(), 11), t0)
		failAgain(t, q, errors.New("b"), t0)
		require.Len(t, s.View().History(nil), 2)
		told.take()
		return q, s
	}
	// rowGone checks that the retries row of k goes with the history.
	rowGone := func(t *testing.T, q *Queue[string]) {
		outdated := rows[q].take()
		require.Contains(t, outdated, "k")
		if s := outdated["k"]; s != nil {
			assert.Zero(t, s.View().Attempts, "the row is removed")
			assert.Empty(t, s.View().History(nil), "and the history with it")
		}
	}
	t.Run("done", func(t *testing.T) {
		q, s := fail(t)
		taken := takeRetries(q, 1, t0.UnixNano())
		require.Len(t, taken, 1)
		q.Done(taken[0], "", Task[string]{}, succeeded(), t0)
		assert.Empty(t, s.View().History(nil))
		rowGone(t, q)
	})
	t.Run("terminal", func(t *testing.T) {
		q, s := fail(t)
		taken := takeRetries(q, 1, t0.UnixNano())
		q.Done(taken[0], "", Task[string]{}, Outcome[string]{Ran: true, Err: errTarget, Settled: true, Written: true}, t0)
		assert.Empty(t, s.View().History(nil))
		rowGone(t, q)
	})
	t.Run("newer version while waiting", func(t *testing.T) {
		q, s := fail(t)
		started := q.Add(Change[string]{Key: "k", Task: version(2, 20)})
		require.Same(t, s, started, "the same record, a new version")
		assert.Empty(t, s.View().History(nil), "a newer version keeps no history of the old one")
		q.Done(s, "", Task[string]{}, failWith(errors.New("c"), t0.UnixNano(), 21), t0)
		assert.Equal(t, []string{"c#1"}, texts(s))
	})
	t.Run("newer version parked behind a failing retry", func(t *testing.T) {
		q, s := fail(t)
		taken := takeRetries(q, 1, t0.UnixNano())
		assert.Nil(t, q.Add(Change[string]{Key: "k", Task: version(2, 20)}), "parked")
		q.Done(taken[0], "", Task[string]{}, failWith(errors.New("c"), t0.UnixNano(), 0), t0)
		assert.Empty(t, s.View().History(nil), "the successor replaces the failing version")
		rowGone(t, q)
	})
	t.Run("delete", func(t *testing.T) {
		q, s := fail(t)
		started := q.Add(Change[string]{Key: "k", Task: Task[string]{Rev: 3, Asked: 3, Delete: true, Since: t0}})
		require.Same(t, s, started)
		assert.Empty(t, s.View().History(nil))
		rowGone(t, q)
		q.Done(s, "", Task[string]{}, failWith(errors.New("delete failed"), t0.UnixNano(), 0), t0)
		assert.Equal(t, []string{"delete failed#1"}, texts(s), "a failing delete has its own history")
	})
	t.Run("backlogged newer version", func(t *testing.T) {
		q, s := fail(t)
		q.Add(Change[string]{Key: "k", Task: version(4, 40), As: Backlogged, Keyed: true})
		assert.Empty(t, s.View().History(nil))
		rowGone(t, q)
	})
	t.Run("object changed at commit", func(t *testing.T) {
		q, s := fail(t)
		taken := takeRetries(q, 1, t0.UnixNano())
		q.Done(taken[0], "", Task[string]{}, Outcome[string]{Ran: true, Err: errTarget}, t0) // not written
		assert.Empty(t, s.View().History(nil))
		rowGone(t, q)
	})
	t.Run("forgotten", func(t *testing.T) {
		q, s := fail(t)
		taken := takeRetries(q, 1, t0.UnixNano())
		q.Done(taken[0], "", Task[string]{}, Outcome[string]{Forget: true}, t0)
		assert.Empty(t, s.View().History(nil))
		rowGone(t, q)
	})
	t.Run("kept while retried", func(t *testing.T) {
		q, s := fail(t)
		taken := takeRetries(q, 1, t0.UnixNano())
		assert.Len(t, s.View().History(nil), 2, "running again")
		q.Done(taken[0], "", Task[string]{}, Outcome[string]{}, t0) // never started: requeued
		assert.Len(t, s.View().History(nil), 2, "requeued")
	})
}

// An Error status found (written back, or there at start) starts a
// history of one, at the time the status was written.
func TestHistoryOfAnAdoptedError(t *testing.T) {
	q := New[string](nil)
	since := t0.Add(-time.Minute)
	task := version(1, 10)
	task.Since = since
	q.Add(Change[string]{Key: "k", Task: task, As: Failed, ErrID: 10, Err: errors.New("found"), Now: t0})
	taken := takeRetries(q, 1, t0.UnixNano())
	require.Len(t, taken, 1)
	assert.Equal(t, []ErrorRecord{{Error: "found", At: time.Unix(0, since.UnixNano()), Attempt: 1}}, taken[0].View().History(nil))
}

// BenchmarkHistoryMemory measures the heap a failing key's history takes:
// 10k keys failing with 4 distinct 100-byte errors each, then with 4
// distinct texts past the bound (the most a history holds). The record of a
// key without a failure (its State) is not counted: it exists without
// a history.
func BenchmarkHistoryMemory(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("text=%dB", size), func(b *testing.B) {
			const n = 10_000
			errs := make([]error, HistoryLen)
			for i := range errs {
				errs[i] = errors.New(strings.Repeat(string(rune('a'+i)), size))
			}
			var perKey float64
			for b.Loop() {
				q := New[string](nil)
				states := make([]*State[string], n)
				for i := range states {
					states[i] = q.Add(Change[string]{Key: fmt.Sprint(i), Task: version(uint64(i+1), uint64(i+1))})
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for round, err := range errs {
					now := t0.Add(time.Duration(round) * time.Second)
					if round > 0 {
						taken := q.Get(Due, n, now.UnixNano())
						if len(taken) != n {
							b.Fatalf("%d retries due, want %d", len(taken), n)
						}
						copy(states, taken)
					}
					for _, s := range states {
						q.Done(s, "", Task[string]{}, failWith(err, now.UnixNano(), 0), now)
					}
				}
				// The other memory a failure takes (the retry heap, the
				// watermarks) is measured without a history: subtract it.
				runtime.GC()
				runtime.ReadMemStats(&after)
				withHistory := float64(after.HeapAlloc) - float64(before.HeapAlloc)
				for _, s := range states {
					if len(s.View().History(nil)) != HistoryLen {
						b.Fatalf("history of %d, want %d", len(s.View().History(nil)), HistoryLen)
					}
					s.hist = nil
				}
				runtime.GC()
				var without runtime.MemStats
				runtime.ReadMemStats(&without)
				perKey = (withHistory - (float64(without.HeapAlloc) - float64(before.HeapAlloc))) / n
				runtime.KeepAlive(q)
			}
			b.ReportMetric(perKey, "B/failing-object")
		})
	}
}
