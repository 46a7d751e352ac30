package keyqueue

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// takeDue returns the keys of the re-checks due at now, in the order
// takeDue hands them out.
func takeDue(q *recheckHeap[string], now int64) (keys []string) {
	for _, c := range q.takeDue(now, math.MaxInt, nil) {
		keys = append(keys, c.Obj)
	}
	return keys
}

// Re-checks come out in due order, only once due; a later ask of a key
// replaces its re-check, and Drop forgets it.
func TestRechecksComeOutDueFirst(t *testing.T) {
	var q recheckHeap[string]
	_, ok := q.next()
	assert.False(t, ok, "empty")
	q.ask("a", "a", 1, 30)
	q.ask("b", "b", 2, 10)
	q.ask("c", "c", 3, 20)
	q.ask("a", "a", 4, 5) // replaces a's: now due first
	assert.Equal(t, 3, q.count())
	next, ok := q.next()
	assert.True(t, ok)
	assert.Equal(t, int64(5), next)
	assert.Nil(t, takeDue(&q, 4), "nothing due yet")
	assert.Equal(t, []string{"a", "b"}, takeDue(&q, 10))
	q.drop([]byte("c"))
	assert.Zero(t, q.count())
	assert.Nil(t, takeDue(&q, 100), "c was dropped")
	assert.Nil(t, q.byKey, "emptied: no memory held")
}

// The status identity a re-check was asked with comes back with it, for
// the caller to compare with the object's current status.
func TestRechecksKeepTheStatusAskedWith(t *testing.T) {
	var q recheckHeap[string]
	q.ask("a", "a", 7, 1)
	q.ask("a", "a2", 8, 1)
	assert.Equal(t, []Task[string]{{Obj: "a2", StatusID: 8}}, q.takeDue(1, math.MaxInt, nil))
}
