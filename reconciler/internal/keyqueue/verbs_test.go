package keyqueue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verbs one key goes through, each test in the manner of workqueue's:
// changes in, work out, outcomes in. Times are Unix ns, passed in.

var (
	errTarget = errors.New("target says no")
	t0        = time.Unix(1_000, 0)
)

func version(rev, id uint64) Task[string] {
	return Task[string]{Obj: "v", Rev: rev, Asked: rev, StatusID: id, Since: t0}
}

func succeeded() Outcome[string] { return Outcome[string]{Ran: true, Settled: true, Written: true} }

func failed(retryAt int64, errID uint64) Outcome[string] {
	return Outcome[string]{Ran: true, Err: errTarget, Written: true, RetryAt: retryAt, ErrID: errID}
}

// failures records what Settings.FailureChanged tells, as the retries
// table's writer does: the keys whose failure changed since the last take,
// with their State, or nil once the failure ended.
type failures map[string]*State[string]

func (f failures) changed(key string, s *State[string]) { f[key] = s }

// take returns what was told since the last take, and forgets it.
func (f failures) take() map[string]*State[string] {
	told := make(map[string]*State[string], len(f))
	for k, s := range f {
		told[k] = s
		delete(f, k)
	}
	return told
}

// takeRetries takes up to n retries due at now, in a slice of its own.
func takeRetries(q *Queue[string], n int, now int64) []*State[string] {
	return append([]*State[string](nil), q.Get(Due, n, now)...)
}

func TestSuccessLeavesNothingBehind(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	require.NotNil(t, s, "a change of a key nobody holds starts at once")
	assert.Equal(t, 1, q.Figures().Active)
	q.Done(s, "", Task[string]{}, succeeded(), t0)
	assert.False(t, q.Figures().Tracked)
	assert.Zero(t, q.Figures().Active)
}

// A change read while its key runs is parked behind it, the newest only;
// once the running one is done, the parked one is queued.
func TestAddWhileRunningParksTheNewest(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	assert.Nil(t, q.Add(Change[string]{Key: "k", Task: version(2, 20)}), "parked, not started")
	assert.Nil(t, q.Add(Change[string]{Key: "k", Task: version(3, 30)}), "replaces what was parked")
	assert.Equal(t, 1, q.Figures().Parked)
	assert.Zero(t, q.Figures().Queued)

	q.Done(s, "", Task[string]{}, succeeded(), t0)
	assert.Zero(t, q.Figures().Parked)
	assert.Equal(t, 1, q.Figures().Queued)
	taken := q.Get(FromQueue, 10, 0)
	require.Len(t, taken, 1)
	assert.Equal(t, uint64(3), taken[0].View().Task.Rev, "the newest version")
	assert.Equal(t, uint64(2), taken[0].View().Task.Asked, "asked for since the first change parked")
}

// A failure waits for its retry time; taken then, it answers the Error
// status written for it, and counts its attempt.
func TestFailureWaitsForItsRetryTime(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	due := t0.Add(time.Second).UnixNano()
	q.Done(s, "", Task[string]{}, failed(due, 11), t0)
	assert.Equal(t, 1, q.Figures().Retrying)
	v := s.View()
	at, waiting := v.Due, v.Waiting
	assert.True(t, waiting)
	assert.Equal(t, due, at)
	f := q.Figures()
	next, ok := f.NextDue, f.RetryDue
	assert.True(t, ok)
	assert.Equal(t, due, next)

	assert.Empty(t, takeRetries(q, 10, due-1), "not due yet")
	taken := takeRetries(q, 10, due)
	require.Equal(t, []*State[string]{s}, taken)
	assert.Equal(t, 1, s.View().Attempts)
	assert.Equal(t, errTarget, s.View().Err)
	assert.Equal(t, uint64(11), s.View().Task.StatusID, "the retry answers the Error status")
	errs := q.Errors(5)
	require.Len(t, errs, 1)
	assert.EqualError(t, errs[0], "k: target says no")

	q.Done(s, "", Task[string]{}, failed(due+1, 12), t0)
	assert.Equal(t, 2, s.View().Attempts, "a second failure counts")
	q.Done(takeRetries(q, 1, due+1)[0], "", Task[string]{}, failed(due+2, 13), t0)
	assert.Equal(t, 3, s.View().Attempts)
}

// A failure the circuit breaker spared counts no attempt, but a first
// failure always does.
func TestSparedFailureCountsNoAttempt(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	spared := failed(t0.UnixNano(), 11)
	spared.Spared = true
	q.Done(s, "", Task[string]{}, spared, t0)
	assert.Equal(t, 1, s.View().Attempts, "the first failure counts")
	takeRetries(q, 1, t0.UnixNano())
	q.Done(s, "", Task[string]{}, spared, t0)
	assert.Equal(t, 1, s.View().Attempts)
}

// A newer version of a key waiting for a retry replaces the retry: it
// starts at once, with no failure to its name.
func TestNewerVersionReplacesARetry(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	q.Done(s, "", Task[string]{}, failed(t0.Add(time.Hour).UnixNano(), 11), t0)
	require.Equal(t, 1, q.Figures().Retrying)

	again := q.Add(Change[string]{Key: "k", Task: version(2, 20)})
	require.Same(t, s, again, "one record per key")
	assert.Zero(t, again.View().Attempts)
	assert.Zero(t, q.Figures().Retrying)
	ok := q.Figures().RetryDue
	assert.False(t, ok, "no retry left")
}

// A task that never started goes back to the queue, keeping its
// attempts; a successor parked meanwhile takes its place.
func TestNeverStartedGoesBackToTheQueue(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	q.Done(s, "", Task[string]{}, failed(t0.UnixNano(), 11), t0)
	takeRetries(q, 1, t0.UnixNano())
	q.Done(s, "", Task[string]{}, Outcome[string]{}, t0)
	assert.Equal(t, 1, q.Figures().Queued)
	assert.Equal(t, 1, s.View().Attempts, "a retry keeps its attempts")

	taken := q.Get(FromQueue, 1, 0)
	assert.Nil(t, q.Add(Change[string]{Key: "k", Task: version(2, 20)}))
	q.Done(taken[0], "", Task[string]{}, Outcome[string]{}, t0)
	taken = q.Get(FromQueue, 1, 0)
	require.Len(t, taken, 1)
	assert.Equal(t, uint64(2), taken[0].View().Task.Rev, "the successor instead")
	assert.Equal(t, uint64(1), taken[0].View().Task.Asked, "asked for since the first")
	assert.Zero(t, taken[0].View().Attempts, "a new version: no failure")
}

// The inline executor runs tasks without a record while no key has one:
// a success needs none, a failure or a task never started gets one.
func TestUntrackedTaskGetsARecordOnlyWhenItMust(t *testing.T) {
	q := New[string](nil)
	q.Done(nil, "a", version(1, 10), succeeded(), t0)
	assert.False(t, q.Figures().Tracked, "done: nothing to remember")

	q.Done(nil, "b", version(2, 20), failed(t0.UnixNano(), 21), t0)
	assert.Equal(t, 1, q.Figures().Retrying)
	q.Done(nil, "c", version(3, 30), Outcome[string]{}, t0)
	assert.Equal(t, 1, q.Figures().Queued)
	assert.True(t, q.Figures().Tracked)
}

// An Error status found on an object (written back, or there at start) is
// retried at once, once: the same status found again is known.
func TestAdoptedErrorIsRetriedOnce(t *testing.T) {
	q := New[string](nil)
	q.Add(Change[string]{Key: "k", Task: version(1, 10), As: Failed, ErrID: 10, Err: errTarget, Now: t0})
	q.Add(Change[string]{Key: "k", Task: version(1, 10), As: Failed, ErrID: 10, Err: errTarget, Now: t0})
	assert.Equal(t, 1, q.Figures().Retrying)
	taken := takeRetries(q, 10, t0.UnixNano())
	require.Len(t, taken, 1)
	assert.Equal(t, 1, taken[0].View().Attempts)
}

// A change of a queued key collapses into its place in the queue, as
// workqueue's Add of a dirty item does.
func TestQueuedKeyCollapses(t *testing.T) {
	q := New[string](nil)
	q.Add(Change[string]{Key: "a", Task: version(1, 10), As: Queued})
	q.Add(Change[string]{Key: "b", Task: version(2, 20), As: Queued})
	q.Add(Change[string]{Key: "a", Task: version(3, 30), As: Queued})
	assert.Equal(t, 2, q.Figures().Queued)
	taken := q.Get(FromQueue, 10, 0)
	require.Len(t, taken, 2)
	assert.Equal(t, []string{"a", "b"}, []string{taken[0].View().Key, taken[1].View().Key}, "a keeps its place")
	assert.Equal(t, uint64(3), taken[0].View().Task.Rev)
}

// Forget drops a key in any phase but running: the loop's check against
// the table found its task no longer current.
func TestForgetDropsTheKey(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	q.Done(s, "", Task[string]{}, failed(t0.UnixNano(), 11), t0)
	q.Done(s, "", Task[string]{}, Outcome[string]{Forget: true}, time.Time{})
	assert.False(t, q.Figures().Tracked)
	assert.Zero(t, q.Figures().Retrying)
	ok := q.Figures().RetryDue
	assert.False(t, ok)
}

// HoldsNewer tells whether a status found on an object is older than a
// version the queue holds for its key (the stale-status rule).
func TestHoldsNewer(t *testing.T) {
	q := New[string](nil)
	assert.False(t, q.holdsNewer([]byte("k"), 5), "nothing held")
	q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	assert.True(t, q.holdsNewer([]byte("k"), 9), "an older status")
	assert.False(t, q.holdsNewer([]byte("k"), 10), "the status that asked")
	assert.True(t, q.holdsNewer([]byte("k"), 0), "no identity: any version held may be newer")
}

// A delete read while a version runs makes status identity tell versions
// apart no more, and so does a prune with the object absent.
func TestSupersededAfterDeleteOrPrune(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	assert.False(t, s.View().Superseded)
	q.Add(Change[string]{Key: "k", Task: Task[string]{Rev: 2, Asked: 2, Delete: true}})
	assert.True(t, s.View().Superseded, "a delete read since it started")

	q.Done(s, "", Task[string]{}, succeeded(), t0)
	d := q.Get(FromQueue, 1, 0)[0]
	q.Done(d, "", Task[string]{}, succeeded(), t0)
	s = q.Add(Change[string]{Key: "k", Task: version(3, 30)})
	assert.Nil(t, q.Add(Change[string]{As: Pruned, Absent: func(string) bool { return false }}))
	assert.False(t, s.View().Superseded, "present in the prune's snapshot")
	q.Add(Change[string]{As: Pruned, Absent: func(string) bool { return true }})
	assert.True(t, s.View().Superseded, "absent from it")
}

// With priorities, a key taken from the queue that never started (a round
// cut by Pause, a stop or the breaker) keeps its turn within its priority;
// a probe of the circuit breaker (TakeOldest, TakeNewest) keeps none, and
// goes to the back, so that the probes get to every key in turn.
func TestRequeueKeepsTheTurnOfTheQueueNotOfAProbe(t *testing.T) {
	q := New[string](nil)
	q.Configure(Settings[string]{Priority: func(string) int { return 0 }, Share: 0.25})
	for i, key := range []string{"a", "b", "c"} {
		q.Add(Change[string]{Key: key, Task: version(uint64(i+1), uint64(10*(i+1))), As: Queued})
	}
	a := q.Get(FromQueue, 1, 0)[0]
	q.Done(a, "", Task[string]{}, Outcome[string]{}, t0)
	assert.Equal(t, "a", q.Get(Oldest, 1, 0)[0].View().Key, "a kept its turn")

	q.Done(a, "", Task[string]{}, Outcome[string]{}, t0)
	assert.Equal(t, "b", q.Get(Oldest, 1, 0)[0].View().Key, "the probe went to the back")
}

// The version held, found again at a newer revision (only a status of
// another reconciler changed), is the same work: the task follows the
// revision, and nothing is parked behind it.
func TestAddSameFollowsTheRevision(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	require.NotNil(t, s)
	assert.Nil(t, q.Add(Change[string]{Key: "k", Task: Task[string]{Obj: "v'", Rev: 5}, As: Same}))
	v := s.View()
	assert.Equal(t, "v'", v.Task.Obj)
	assert.Equal(t, uint64(5), v.Task.Rev)
	assert.Equal(t, uint64(10), v.Task.StatusID, "the same version: the status that asked is kept")
	assert.Equal(t, uint64(1), v.Task.Asked)
	assert.Zero(t, q.Figures().Parked, "not a successor")
	assert.Nil(t, q.Add(Change[string]{Key: "gone", Task: version(2, 20), As: Same}), "a key not held: nothing")
	assert.False(t, q.Figures().Queued > 0)
}

// The queue's other memory through its verbs: a change deferred waits in
// the backlog and drops the retry of its key; a re-check asked by Done is
// dropped when a change of its key is read; a delete read, or a status
// found written back over a newer one, makes the older statuses of the
// key stale.
func TestMemoryOfKeys(t *testing.T) {
	q := New[string](nil)
	s := q.Add(Change[string]{Key: "k", Task: version(1, 10)})
	q.Done(s, "", Task[string]{}, failed(100, 11), t0)
	require.Equal(t, 1, q.Figures().Retrying)
	q.Add(Change[string]{Key: "k", Task: version(2, 20), As: Backlogged, Keyed: true})
	f := q.Figures()
	assert.Equal(t, 1, f.Deferred)
	assert.Zero(t, f.Retrying, "the retry is dropped: a newer version waits")
	assert.Equal(t, uint64(2), q.Lows().Deferred)
	d := q.Take(Backlog, 5, 0, nil)
	require.Len(t, d, 1)
	assert.Equal(t, Task[string]{Obj: "v", Rev: 2, Asked: 2}, d[0], "the object, revision and request deferred")
	assert.Empty(t, q.Take(Backlog, 5, 0, nil), "taken")

	q.Done(nil, "r", version(3, 30), Outcome[string]{Ran: true, Settled: true, Written: true, RecheckAt: 50, Updated: "r", UpdatedID: 31}, t0)
	f = q.Figures()
	assert.Equal(t, 1, f.Rechecks)
	assert.Equal(t, int64(50), f.NextRecheck)
	assert.Empty(t, q.Take(Rechecks, 5, 49, nil), "not due yet")
	assert.Nil(t, q.Add(Change[string]{RawKey: []byte("r"), Task: version(4, 40), As: Seen}))
	assert.Zero(t, q.Figures().Rechecks, "replaced by the change read")
	assert.False(t, q.Figures().Tracked, "a change seen is not added")

	assert.False(t, q.Figures().Stale)
	assert.False(t, q.Stale([]byte("d"), 5))
	q.Add(Change[string]{RawKey: []byte("d"), Task: Task[string]{Rev: 5, Delete: true}, As: Seen, Cut: 7})
	assert.True(t, q.Figures().Stale)
	assert.True(t, q.Stale([]byte("d"), 5), "made before the delete was read")
	assert.False(t, q.Stale([]byte("d"), 8))
	q.Add(Change[string]{RawKey: []byte("o"), As: WrittenBack, Cut: 8})
	assert.True(t, q.Stale([]byte("o"), 8), "older than the version applied")
	assert.False(t, q.Stale([]byte("o"), 9))
	assert.False(t, q.Figures().Tracked, "no key is tracked for its cuts")
}

// A change seen that is no delete cuts nothing; one of another key drops
// no re-check.
func TestSeenUpdateCutsNothing(t *testing.T) {
	q := New[string](nil)
	q.Done(nil, "r", version(1, 10), Outcome[string]{Ran: true, Settled: true, Written: true, RecheckAt: 50, Updated: "r", UpdatedID: 11}, t0)
	q.Add(Change[string]{RawKey: []byte("other"), Task: version(2, 20), As: Seen, Cut: 30})
	assert.Equal(t, 1, q.Figures().Rechecks, "another key's change")
	assert.False(t, q.Figures().Stale, "no delete: no cut")
	q.Add(Change[string]{RawKey: []byte("r"), Task: version(3, 30), As: Seen, Cut: 30})
	assert.Zero(t, q.Figures().Rechecks)
	assert.False(t, q.Stale([]byte("r"), 11), "a version read cuts nothing")
}

// Re-checks come out due first, at most n of them, each with the object
// written and the Done status it was asked with; a later ask of a key
// replaces its re-check.
func TestTakeRechecksDueFirst(t *testing.T) {
	q := New[string](nil)
	ask := func(key string, id uint64, at int64) {
		q.Done(nil, key, version(1, id), Outcome[string]{Ran: true, Settled: true, Written: true, RecheckAt: at, Updated: key, UpdatedID: id}, t0)
	}
	ask("a", 1, 30)
	ask("b", 2, 10)
	ask("c", 3, 20)
	ask("a", 4, 5) // replaces a's: now due first
	assert.Equal(t, 3, q.Figures().Rechecks)
	assert.Equal(t, []Task[string]{{Obj: "a", StatusID: 4}}, q.Take(Rechecks, 1, 20, nil), "at most n")
	assert.Equal(t, []Task[string]{{Obj: "b", StatusID: 2}, {Obj: "c", StatusID: 3}}, q.Take(Rechecks, 5, 20, nil))
	assert.Zero(t, q.Figures().Rechecks)
	assert.False(t, q.Figures().RecheckDue)
}

// A prune marks only the updates running with their object absent: not a
// delete running, nor a version queued, which starts afresh.
func TestPrunedMarksOnlyRunningUpdates(t *testing.T) {
	q := New[string](nil)
	q.Configure(Settings[string]{Priority: func(string) int { return 0 }, Share: 0.25})
	del := q.Add(Change[string]{Key: "d", Task: Task[string]{Rev: 1, Asked: 1, Delete: true}, As: Queued})
	assert.Nil(t, del, "queued with priorities")
	running := q.Get(FromQueue, 1, 0)
	require.Len(t, running, 1)
	q.Add(Change[string]{Key: "u", Task: version(2, 20), As: Queued})
	q.Add(Change[string]{As: Pruned, Absent: func(string) bool { return true }})
	assert.False(t, running[0].View().Superseded, "a delete running")
	queued := q.Get(FromQueue, 1, 0)
	require.Len(t, queued, 1)
	assert.Equal(t, "u", queued[0].View().Key)
	assert.False(t, queued[0].View().Superseded, "queued when the prune ran")
}
