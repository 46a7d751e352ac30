package status_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/status"
)

func names(s status.Set) []string {
	var out []string
	for name := range s.All() {
		out = append(out, name)
	}
	return out
}

func TestSetPendingMergesNames(t *testing.T) {
	s := status.NewSet().Set("b", status.Done()).Set("d", status.Error(errors.New("x")))
	given := []string{"c", "a", "b", "c"}
	p := s.Pending(given...)

	assert.Equal(t, []string{"a", "b", "c", "d"}, names(p), "merged, sorted, no repeats")
	assert.Equal(t, []string{"c", "a", "b", "c"}, given, "the caller's slice is untouched")
	id := p.Get("a").ID()
	for name, st := range p.All() {
		assert.Equal(t, status.KindPending, st.Kind, name)
		assert.Equal(t, id, st.ID(), "%s: one fresh identity for all", name)
	}
	assert.NotEqual(t, s.Get("b").ID(), id)

	// Value semantics: s is as it was.
	assert.Equal(t, []string{"b", "d"}, names(s))
	assert.Equal(t, status.KindDone, s.Get("b").Kind)
	assert.Equal(t, status.KindError, s.Get("d").Kind)

	// Changing the result does not reach back into s or into given.
	_ = p.Set("a", status.Done())
	given[0] = "z"
	assert.Equal(t, status.KindPending, p.Get("a").Kind)
	assert.Equal(t, []string{"a", "b", "c", "d"}, names(p))
}

func TestSetPendingWithoutNamesKeepsNames(t *testing.T) {
	s := status.NewSet().Set("a", status.Done())
	p := s.Pending()
	assert.Equal(t, []string{"a"}, names(p))
	assert.Equal(t, status.KindPending, p.Get("a").Kind)
	assert.Empty(t, names(status.Set{}.Pending()), "a zero set stays empty")
	assert.Equal(t, []string{"x"}, names(status.Set{}.Pending("x")))
}

func TestSetDelete(t *testing.T) {
	s := status.NewSet().Set("a", status.Done()).Set("b", status.Done()).Set("c", status.Done())
	d := s.Delete("b")
	assert.Equal(t, []string{"a", "c"}, names(d))
	assert.Equal(t, []string{"a", "b", "c"}, names(s), "s is unchanged")
	assert.Equal(t, status.KindPending, d.Get("b").Kind, "a deleted name reads as Pending")
	assert.Equal(t, []string{"a", "c"}, names(d.Pending()), "Pending does not bring it back")
	assert.Equal(t, []string{"a", "b", "c"}, names(d.Pending("b")), "unless named")

	same := s.Delete("missing")
	assert.Equal(t, names(s), names(same))
	assert.Empty(t, names(status.Set{}.Delete("a")))

	// Deleting from a copy never changes what another copy sees.
	d2 := d.Set("a", status.Error(errors.New("e")))
	assert.Equal(t, status.KindDone, d.Get("a").Kind)
	assert.Equal(t, status.KindError, d2.Get("a").Kind)
}

func TestSetIsDoneAndIsPendingOrRefreshing(t *testing.T) {
	empty := status.NewSet()
	assert.True(t, empty.IsDone(), "vacuously, as the StateDB reconciler's StatusSet")
	assert.False(t, empty.IsPendingOrRefreshing())

	done := empty.Set("a", status.Done()).Set("b", status.Done())
	assert.True(t, done.IsDone())
	assert.False(t, done.IsPendingOrRefreshing())

	refreshing := done.Set("b", status.Refreshing())
	assert.False(t, refreshing.IsDone())
	assert.True(t, refreshing.IsPendingOrRefreshing())

	failed := done.Set("b", status.Error(errors.New("e")))
	assert.False(t, failed.IsDone())
	assert.False(t, failed.IsPendingOrRefreshing())

	assert.True(t, failed.Pending().IsPendingOrRefreshing())
	assert.False(t, failed.Pending().IsDone())
}

func TestSetAllStopsWhenAsked(t *testing.T) {
	s := status.NewSet().Set("a", status.Done()).Set("b", status.Done()).Set("c", status.Done())
	var seen []string
	for name := range s.All() {
		seen = append(seen, name)
		if len(seen) == 2 {
			break
		}
	}
	assert.Equal(t, []string{"a", "b"}, seen)
	m := maps.Collect(s.All())
	assert.Len(t, m, 3)
	assert.Equal(t, []string{"a", "b", "c"}, slices.Sorted(maps.Keys(m)))
}

func TestSetEncodingsAreStable(t *testing.T) {
	s := status.NewSet()
	for _, name := range []string{"zeta", "alpha", "mid"} {
		s = s.Set(name, status.Done())
	}
	j1, err := json.Marshal(s)
	require.NoError(t, err)
	y1, err := yaml.Marshal(s)
	require.NoError(t, err)
	for range 20 {
		j, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(j1), string(j), "JSON output does not depend on map order")
		y, err := yaml.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(y1), string(y), "YAML output does not depend on map order")
	}
	assert.Regexp(t, `^\{"alpha":.*"mid":.*"zeta":`, string(j1))
	assert.Regexp(t, `(?s)^alpha:.*mid:.*zeta:`, string(y1))
}
