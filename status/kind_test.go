package status_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// allKinds lists every defined kind with its name.
var allKinds = []struct {
	kind status.Kind
	name string
}{
	{status.KindUnset, "Unset"},
	{status.KindPending, "Pending"},
	{status.KindRefreshing, "Refreshing"},
	{status.KindDone, "Done"},
	{status.KindError, "Error"},
}

func TestKindString(t *testing.T) {
	for _, tc := range allKinds {
		assert.Equal(t, tc.name, tc.kind.String())
	}
	assert.Equal(t, "Kind(5)", status.Kind(5).String())
	assert.Equal(t, "Kind(255)", status.Kind(255).String())
}

func TestKindValuesAreStable(t *testing.T) {
	// The zero Kind must be KindUnset: a zero Status is ignored by
	// reconcilers.
	var zero status.Kind
	assert.Equal(t, status.KindUnset, zero)
	assert.Equal(t, status.KindUnset, status.Status{}.Kind)
}

func TestParseKind(t *testing.T) {
	for _, tc := range allKinds {
		t.Run(tc.name, func(t *testing.T) {
			k, err := status.ParseKind(tc.name)
			require.NoError(t, err)
			assert.Equal(t, tc.kind, k)
		})
	}

	k, err := status.ParseKind("")
	require.NoError(t, err, "empty string is KindUnset")
	assert.Equal(t, status.KindUnset, k)

	for _, bad := range []string{
		"pending", "PENDING", " Pending", "Pending ", "Kind(5)", "Bogus",
		"P", "0", "1", "\x00", "Done\n", "Errored",
	} {
		t.Run("bad/"+bad, func(t *testing.T) {
			k, err := status.ParseKind(bad)
			require.Error(t, err)
			assert.ErrorIs(t, err, status.ErrMalformed)
			assert.Contains(t, err.Error(), "unknown kind")
			assert.Equal(t, status.KindUnset, k)
		})
	}
}

func TestKindMarshalText(t *testing.T) {
	for _, tc := range allKinds {
		text, err := tc.kind.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, tc.name, string(text))
	}
	for _, bad := range []status.Kind{5, 6, 200, 255} {
		text, err := bad.MarshalText()
		require.Error(t, err, "kind %d", uint8(bad))
		assert.ErrorIs(t, err, status.ErrMalformed)
		assert.Nil(t, text)
	}
}

func TestKindUnmarshalText(t *testing.T) {
	for _, tc := range allKinds {
		k := status.Kind(200) // overwritten on success
		require.NoError(t, k.UnmarshalText([]byte(tc.name)))
		assert.Equal(t, tc.kind, k)
	}

	k := status.KindDone
	require.NoError(t, k.UnmarshalText(nil))
	assert.Equal(t, status.KindUnset, k, "empty text is KindUnset")

	for _, bad := range []string{"done", "Kind(9)", "x", "Pending\x00"} {
		k := status.KindDone
		err := k.UnmarshalText([]byte(bad))
		require.Error(t, err, bad)
		assert.ErrorIs(t, err, status.ErrMalformed)
		assert.Equal(t, status.KindDone, k, "receiver unchanged on error")
	}
}

func TestKindTextRoundTrip(t *testing.T) {
	for _, tc := range allKinds {
		text, err := tc.kind.MarshalText()
		require.NoError(t, err)
		var k status.Kind
		require.NoError(t, k.UnmarshalText(text))
		assert.Equal(t, tc.kind, k)
		parsed, err := status.ParseKind(tc.kind.String())
		require.NoError(t, err)
		assert.Equal(t, tc.kind, parsed)
	}
}

func TestKindKeyDistinct(t *testing.T) {
	seen := map[string]status.Kind{}
	for _, tc := range allKinds {
		key := tc.kind.Key()
		require.NotEmpty(t, key, tc.name)
		if prev, dup := seen[string(key)]; dup {
			t.Fatalf("kinds %s and %s share the key %q", prev, tc.kind, key)
		}
		seen[string(key)] = tc.kind
		// Stable: the same kind always yields the same key.
		assert.Equal(t, key, tc.kind.Key())
	}
	assert.Len(t, seen, len(allKinds))
}

func TestKindKeyUnknownIsUnsetKey(t *testing.T) {
	// Out-of-range kinds are indexed like KindUnset, the kind reconcilers
	// ignore, rather than panicking.
	for _, k := range []status.Kind{5, 100, 255} {
		assert.Equal(t, status.KindUnset.Key(), k.Key(), "kind %d", uint8(k))
	}
}

func TestKindKeyDoesNotAllocate(t *testing.T) {
	var sink int
	for _, tc := range allKinds {
		k := tc.kind
		allocs := testing.AllocsPerRun(100, func() {
			sink += len(k.Key())
		})
		assert.Zero(t, allocs, "Key of %s allocates", k)
	}
	allocs := testing.AllocsPerRun(100, func() {
		sink += len(status.Kind(77).Key())
	})
	assert.Zero(t, allocs, "Key of an unknown kind allocates")
	assert.NotZero(t, sink)
}

func TestErrMalformedIsSentinel(t *testing.T) {
	_, err := status.ParseKind("nope")
	assert.True(t, errors.Is(err, status.ErrMalformed))
	assert.False(t, errors.Is(errors.New("malformed status"), status.ErrMalformed))
}
