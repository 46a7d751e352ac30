package reconciler_test

// The StateDB reconciler's status_test.go is an internal test: it reads
// StatusSet's unexported fields and sets Status.Error to a *string, so it
// cannot be built against this package. The tests below check, through
// the exported API only, what it checks that holds for converge's
// statuses; each names the test it follows and what it leaves out
// (docs/migration.md lists those differences).

import (
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-go/converge/compat/reconciler"
)

// ago matches the age a String method appends, in any format.
var ago = regexp.MustCompile(`\([^()]* ago\)`)

// sameStringOnceDecoded checks that set survives a JSON round trip: the
// decoded set describes itself alike, but for ages.
func sameStringOnceDecoded(t *testing.T, set reconciler.StatusSet) {
	t.Helper()
	data, err := json.Marshal(set)
	require.NoError(t, err)
	var back reconciler.StatusSet
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, ago.ReplaceAllString(set.String(), "(ago)"), ago.ReplaceAllString(back.String(), "(ago)"))
}

// Follows TestStatusString. Left out: the format of the age, which is
// compact here ("1h ago", not "1.0h ago").
func TestUpstreamStatusString(t *testing.T) {
	s := reconciler.StatusPending()
	assert.Regexp(t, `^Pending \(.+ ago\)$`, s.String())
	s.UpdatedAt = time.Now().Add(-time.Hour)
	assert.Regexp(t, `^Pending \(1h ago\)$`, s.String())
	assert.Regexp(t, `^Done \(.+ ago\)$`, reconciler.Status{Kind: reconciler.StatusKindDone, UpdatedAt: time.Now()}.String())
	assert.Regexp(t, `^Error: hey I'm an error \(.+ ago\)$`, reconciler.StatusError(errors.New("hey I'm an error")).String())
	assert.Regexp(t, `^Error: <nil> \(.+ ago\)$`, reconciler.StatusError(nil).String())
}

// Follows TestStatusJSONYAML: the same keys and values, and a JSON round
// trip that gives the status back. Left out: the order of the keys (kind
// comes first here) and the Error field's type (a string here).
func TestUpstreamStatusJSONYAML(t *testing.T) {
	for _, tc := range []struct {
		s    reconciler.Status
		want map[string]string
	}{
		{
			reconciler.Status{Kind: reconciler.StatusKindDone, UpdatedAt: time.Unix(1, 0).UTC()},
			map[string]string{"kind": "Done", "updated-at": "1970-01-01T00:00:01Z"},
		},
		{
			reconciler.Status{Kind: reconciler.StatusKindPending, UpdatedAt: time.Unix(2, 0).UTC()},
			map[string]string{"kind": "Pending", "updated-at": "1970-01-01T00:00:02Z"},
		},
		{
			reconciler.Status{Kind: reconciler.StatusKindError, UpdatedAt: time.Unix(3, 0).UTC(), Error: "some-error"},
			map[string]string{"kind": "Error", "updated-at": "1970-01-01T00:00:03Z", "error": "some-error"},
		},
		{
			reconciler.Status{Kind: reconciler.StatusKindRefreshing, UpdatedAt: time.Unix(4, 0).UTC()},
			map[string]string{"kind": "Refreshing", "updated-at": "1970-01-01T00:00:04Z"},
		},
	} {
		t.Run(tc.s.Kind.String(), func(t *testing.T) {
			data, err := json.Marshal(tc.s)
			require.NoError(t, err)
			var fields map[string]string
			require.NoError(t, json.Unmarshal(data, &fields))
			assert.Equal(t, tc.want, fields, "JSON %s", data)

			var back reconciler.Status
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Equal(t, tc.s, back)

			data, err = yaml.Marshal(tc.s)
			require.NoError(t, err)
			fields = nil
			require.NoError(t, yaml.Unmarshal(data, &fields))
			assert.Equal(t, tc.want, fields, "YAML %s", data)
		})
	}
}

// Follows TestStatusSetYAML: a set is a mapping from name to status.
// Left out: the order of each status's keys.
func TestUpstreamStatusSetYAML(t *testing.T) {
	set := reconciler.StatusSet{}.
		Set("done", reconciler.Status{Kind: reconciler.StatusKindDone, UpdatedAt: time.Unix(1, 0).UTC()}).
		Set("error", reconciler.Status{Kind: reconciler.StatusKindError, UpdatedAt: time.Unix(2, 0).UTC(), Error: "failed"})
	data, err := yaml.Marshal(set)
	require.NoError(t, err)
	var fields map[string]map[string]string
	require.NoError(t, yaml.Unmarshal(data, &fields))
	assert.Equal(t, map[string]map[string]string{
		"done":  {"kind": "Done", "updated-at": "1970-01-01T00:00:01Z"},
		"error": {"kind": "Error", "updated-at": "1970-01-01T00:00:02Z", "error": "failed"},
	}, fields, "YAML %s", data)
	assert.Regexp(t, `^done:\n(.*\n)+error:\n`, string(data), "names in order")
}

// Follows TestStatusSet. Left out: the String of an empty set, which has
// the set's age here ("Pending (0s ago)", not "Pending"); the number of
// entries is counted through All.
func TestUpstreamStatusSet(t *testing.T) {
	set := reconciler.NewStatusSet()
	assert.Regexp(t, `^Pending \(.+ ago\)$`, set.String())
	sameStringOnceDecoded(t, set)

	s := set.Get("foo")
	assert.Equal(t, reconciler.StatusKindPending, s.Kind)
	assert.NotZero(t, s.ID())
	assert.False(t, set.IsPendingOrRefreshing(), "an empty set asks for nothing")
	assert.True(t, set.IsDone(), "an empty set has nothing left to do")

	set = set.Set("foo", reconciler.StatusDone())
	assert.False(t, set.IsPendingOrRefreshing())
	assert.True(t, set.IsDone())

	set = set.Set("bar", reconciler.StatusError(errors.New("fail")))
	sameStringOnceDecoded(t, set)
	assert.False(t, set.IsPendingOrRefreshing())
	assert.False(t, set.IsDone())
	assert.Equal(t, reconciler.StatusKindDone, set.Get("foo").Kind)
	assert.Equal(t, reconciler.StatusKindError, set.Get("bar").Kind)
	assert.Regexp(t, `^Errored: bar \(fail\), Done: foo \(.* ago\)$`, set.String())

	previous := set
	set = set.Set("foo", reconciler.StatusRefreshing())
	assert.Equal(t, reconciler.StatusKindDone, previous.Get("foo").Kind, "Set leaves the set it is called on alone")
	assert.Equal(t, reconciler.StatusKindRefreshing, set.Get("foo").Kind)
	assert.True(t, set.IsPendingOrRefreshing())
	assert.False(t, set.IsDone())
	assert.Len(t, maps.Collect(set.All()), 2)

	set = set.Pending()
	assert.NotZero(t, set.Get("foo").ID())
	for _, name := range []string{"foo", "bar", "baz"} {
		assert.Equal(t, reconciler.StatusKindPending, set.Get(name).Kind, name)
	}
	assert.True(t, set.IsPendingOrRefreshing())
	assert.False(t, set.IsDone())
	assert.Regexp(t, `^Pending: bar foo \(.* ago\)$`, set.String())
	sameStringOnceDecoded(t, set)
}

// Follows TestStatusSetPendingWithReconcilers. The set's own identity and
// time, unexported in the StateDB reconciler, are read here as those of a
// name without an entry.
func TestUpstreamStatusSetPendingWithReconcilers(t *testing.T) {
	set := reconciler.NewStatusSet().
		Set("existing", reconciler.StatusError(errors.New("previous failure"))).
		Set("done", reconciler.StatusDone())
	existing, done := set.Get("existing"), set.Get("done")
	names := []string{"new-b", "existing", "new-a", "new-b"}

	pending := set.Pending(names...)

	assert.Equal(t, existing, set.Get("existing"), "Pending leaves the set it is called on alone")
	assert.Equal(t, done, set.Get("done"))
	assert.Equal(t, []string{"new-b", "existing", "new-a", "new-b"}, names, "and the names it is given")

	all := maps.Collect(pending.All())
	assert.Equal(t, []string{"done", "existing", "new-a", "new-b"}, slices.Sorted(maps.Keys(all)))
	own := pending.Get("not-in-the-set")
	for name, s := range all {
		assert.Equal(t, reconciler.StatusKindPending, s.Kind, name)
		assert.Empty(t, s.GetError(), name)
		assert.Equal(t, own.ID(), s.ID(), name)
		assert.Equal(t, own.UpdatedAt, s.UpdatedAt, name)
	}
	assert.NotEqual(t, set.Get("not-in-the-set").ID(), own.ID(), "Pending gives the set a fresh identity")
	assert.Regexp(t, `^Pending: done existing new-a new-b \(.* ago\)$`, pending.String())
	sameStringOnceDecoded(t, pending)
}

// Follows TestStatusSetDelete. Left out: the String of the empty set, as
// in TestUpstreamStatusSet.
func TestUpstreamStatusSetDelete(t *testing.T) {
	set := reconciler.NewStatusSet().
		Set("first", reconciler.StatusDone()).
		Set("middle", reconciler.StatusError(errors.New("failed"))).
		Set("last", reconciler.StatusRefreshing())
	original := maps.Collect(set.All())

	assert.Equal(t, set, set.Delete("missing"), "deleting a name not in the set changes nothing")

	deleted := set.Delete("middle")
	assert.Equal(t, original, maps.Collect(set.All()), "Delete leaves the set it is called on alone")
	assert.Equal(t, map[string]reconciler.Status{"first": original["first"], "last": original["last"]}, maps.Collect(deleted.All()))

	pending := deleted.Pending()
	assert.Equal(t, []string{"first", "last"}, slices.Sorted(maps.Keys(maps.Collect(pending.All()))), "a deleted name stays out")
	assert.Equal(t, reconciler.StatusKindPending, pending.Get("first").Kind)
	assert.Equal(t, reconciler.StatusKindPending, pending.Get("last").Kind)
	readded := deleted.Pending("middle")
	assert.Contains(t, maps.Collect(readded.All()), "middle")
	assert.Equal(t, reconciler.StatusKindPending, readded.Get("middle").Kind)

	empty := deleted.Delete("first").Delete("last")
	assert.Empty(t, maps.Collect(empty.All()))
}
