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
		for i := range n {
			d, ok := q.Undefer()
			require.True(t, ok)
			require.Equal(t, uint64(i+1), d.Asked, "oldest first")
			require.Equal(t, uint64(i+101), d.Rev)
		}
		_, ok := q.Undefer()
		assert.False(t, ok, "drained")
		assert.Zero(t, q.Lows().Deferred)
		if n > shrinkAbove {
			assert.Nil(t, q.deferred.ring, "a drained big backlog gives its memory back")
		} else {
			assert.NotNil(t, q.deferred.ring, "a small one keeps its ring")
		}
	}
}
