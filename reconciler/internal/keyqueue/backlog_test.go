package keyqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The backlog hands deferred changes back oldest first, its low revision
// the oldest's first asked; drained after growing past shrinkAbove it
// gives its memory back, and a small one keeps its ring for the next.
func TestBacklogIsFIFOAndGivesBackItsMemory(t *testing.T) {
	for _, n := range []int{3, 2 * shrinkAbove} {
		q := New[string](nil)
		for i := range n {
			rev := uint64(i + 1)
			q.Add(Change[string]{Key: "k", Task: Task[string]{Obj: "v", Rev: rev + 100, Asked: rev}, As: Backlogged})
		}
		assert.Equal(t, n, q.Figures().Deferred)
		assert.Equal(t, uint64(1), q.Lows().Deferred, "the oldest's first revision")
		buf := make([]Task[string], 0, 1)
		for i := range n {
			d := q.Take(Backlog, 1, 0, buf[:0])
			require.Len(t, d, 1)
			require.Equal(t, uint64(i+1), d[0].Asked, "oldest first")
			require.Equal(t, uint64(i+101), d[0].Rev)
		}
		assert.Empty(t, q.Take(Backlog, 1, 0, nil), "drained")
		assert.Zero(t, q.Lows().Deferred)
		if n > shrinkAbove {
			assert.Nil(t, q.deferred.ring, "a drained big backlog gives its memory back")
		} else {
			assert.NotNil(t, q.deferred.ring, "a small one keeps its ring")
		}
	}
}
