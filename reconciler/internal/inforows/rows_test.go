package inforows

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler/internal/keyqueue"
	"github.com/converge-go/converge/tables"
)

// recordedWrites is a tables.Writer that keeps the retries rows of each
// Write.
type recordedWrites struct{ writes [][]tables.RetryInfo }

func (w *recordedWrites) Write(_ *tables.Info, retries []tables.RetryInfo) {
	w.writes = append(w.writes, append([]tables.RetryInfo(nil), retries...))
}

func (w *recordedWrites) Refreshed(string, time.Time) {}

// The writer of the retries table owns the rows out of date: the key
// queue tells it of each failure that changes, a write writes them once,
// a prune's WriteRow leaves them for the next write, and a burst of them
// leaves no memory held once written.
func TestInfoWriterWritesTheFailuresToldOnce(t *testing.T) {
	rec := &recordedWrites{}
	q := keyqueue.New[string](nil)
	w := New[string, *keyqueue.State[string]](rec, "r")
	q.Configure(keyqueue.Settings[string]{FailureChanged: w.Changed})
	t0 := time.Unix(1_000, 0)
	s := q.Add(keyqueue.Change[string]{Key: "k", Task: keyqueue.Task[string]{Obj: "v", Rev: 1, Asked: 1, StatusID: 10}})
	require.NotNil(t, s)
	q.Done(s, "", keyqueue.Task[string]{}, keyqueue.Outcome[string]{Ran: true, Err: errors.New("no"), Written: true, RetryAt: t0.Add(time.Second).UnixNano()}, t0)

	w.WriteRow(tables.Info{})
	require.Len(t, rec.writes, 1)
	assert.Empty(t, rec.writes[0], "a prune's row: the failures wait")

	w.Write(tables.Info{State: tables.StateRunning})
	require.Len(t, rec.writes, 2)
	require.Len(t, rec.writes[1], 1)
	row := rec.writes[1][0]
	assert.Equal(t, "k", row.Key)
	assert.Equal(t, 1, row.Attempts)
	assert.Equal(t, "no", row.LastError)
	assert.Equal(t, t0.Add(time.Second), row.NextAttempt)
	require.Len(t, row.Errors, 1, "the key's history")

	w.Write(tables.Info{State: tables.StateRunning})
	assert.Len(t, rec.writes, 2, "nothing changed: nothing written")

	taken := q.Get(keyqueue.Due, 1, t0.Add(time.Second).UnixNano())
	require.Len(t, taken, 1)
	q.Done(taken[0], "", keyqueue.Task[string]{}, keyqueue.Outcome[string]{Ran: true, Settled: true, Written: true}, t0)
	w.Write(tables.Info{State: tables.StateRunning})
	require.Len(t, rec.writes, 3)
	assert.Equal(t, []tables.RetryInfo{{Reconciler: "r", Key: "k"}}, rec.writes[2], "the row removed")

	for i := range OutdatedShrinkAbove + 1 {
		s := q.Add(keyqueue.Change[string]{Key: fmt.Sprint(i), Task: keyqueue.Task[string]{Obj: "v", Rev: 2, Asked: 2}})
		q.Done(s, "", keyqueue.Task[string]{}, keyqueue.Outcome[string]{Ran: true, Err: errors.New("no"), Written: true, RetryAt: t0.UnixNano()}, t0)
	}
	w.Write(tables.Info{State: tables.StateRunning})
	assert.Len(t, rec.writes[3], OutdatedShrinkAbove+1)
	assert.Empty(t, w.outdated, "written: made anew")
}

// A key is shown as it is when printable, in hex otherwise, and a
// printable key that looks like hex is shown in hex too.
func TestDisplayKeyTellsEveryKeyApart(t *testing.T) {
	assert.Equal(t, "a/b", DisplayKey("a/b"))
	assert.Equal(t, "0x0001", DisplayKey("\x00\x01"))
	assert.Equal(t, "0x3078", DisplayKey("0x"))
	assert.NotEqual(t, DisplayKey("0x0001"), DisplayKey("\x00\x01"))
}

// Without tables to write to there is no writer, and its methods do
// nothing.
func TestNilWriterWritesNothing(t *testing.T) {
	w := New[string, *keyqueue.State[string]](nil, "r")
	assert.Nil(t, w)
	w.Write(tables.Info{})
	w.WriteRow(tables.Info{})
	w.Refreshed(time.Now())
}
