package reconciler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnWrites(t *testing.T) {
	var w ownWrites
	w.add(10, 12, 0)
	w.add(13, 14, 0) // contiguous: merged
	w.add(20, 20, 0)
	require.Equal(t, []revRange{{10, 14}, {20, 20}}, w.ranges)

	// Changes are read in increasing revision order.
	require.False(t, w.has(9))
	require.True(t, w.has(10))
	require.True(t, w.has(14))
	require.False(t, w.has(15), "a user's write between two commits")
	require.True(t, w.has(20))
	require.False(t, w.has(21))
	require.Empty(t, w.ranges, "ranges passed are forgotten")

	// Ranges that reading has passed are forgotten when a commit adds one,
	// so they do not pile up while no Error change comes.
	w.add(30, 31, 0)
	w.add(40, 41, 35)
	require.Equal(t, []revRange{{40, 41}}, w.ranges)
	w.add(50, 51, 60)
	require.Equal(t, []revRange{{50, 51}}, w.ranges, "the new range is kept even if reading is past it")
}
