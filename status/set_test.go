package status_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

func TestNewSetGetUnknownIsPending(t *testing.T) {
	before := time.Now()
	s := status.NewSet()
	after := time.Now()

	a, b := s.Get("a"), s.Get("b")
	for _, st := range []status.Status{a, b} {
		assert.Equal(t, status.KindPending, st.Kind)
		assert.True(t, st.IsPendingOrRefreshing())
		assert.Empty(t, st.Error)
		assert.NotZero(t, st.ID())
		assert.False(t, st.UpdatedAt.Before(before))
		assert.False(t, st.UpdatedAt.After(after))
	}
	// Names without an entry carry the set's identity and creation time.
	assert.Equal(t, a.ID(), b.ID())
	assert.Equal(t, a.UpdatedAt, b.UpdatedAt)
	assert.Equal(t, a.ID(), s.Get("a").ID(), "Get is stable")
	assert.Empty(t, maps.Collect(s.All()))

	other := status.NewSet()
	assert.NotEqual(t, a.ID(), other.Get("a").ID(), "each set has its own identity")
	assert.NotEqual(t, a.ID(), status.Pending().ID())
}

func TestSetSetReturnsCopy(t *testing.T) {
	s0 := status.NewSet()
	pendingID := s0.Get("a").ID()

	done := status.Done()
	s1 := s0.Set("a", done)
	assert.Equal(t, status.KindPending, s0.Get("a").Kind, "receiver unchanged")
	assert.Equal(t, pendingID, s0.Get("a").ID())
	assert.Empty(t, maps.Collect(s0.All()))

	got := s1.Get("a")
	assert.Equal(t, status.KindDone, got.Kind)
	assert.Equal(t, done.ID(), got.ID(), "Get returns the stored status itself")
	assert.Equal(t, pendingID, s1.Get("other").ID(), "unknown names keep the set identity")

	// Replacing an entry does not touch the receiver either.
	failed := status.Error(errors.New("disk full"))
	s2 := s1.Set("a", failed)
	assert.Equal(t, done.ID(), s1.Get("a").ID())
	assert.Equal(t, failed.ID(), s2.Get("a").ID())
	assert.Len(t, maps.Collect(s2.All()), 1, "replaced, not added")

	// Two sets derived from one are independent.
	s3 := s1.Set("b", status.Done())
	s4 := s1.Set("c", status.Done())
	assert.ElementsMatch(t, []string{"a", "b"}, slices.Collect(maps.Keys(maps.Collect(s3.All()))))
	assert.ElementsMatch(t, []string{"a", "c"}, slices.Collect(maps.Keys(maps.Collect(s4.All()))))
	assert.ElementsMatch(t, []string{"a"}, slices.Collect(maps.Keys(maps.Collect(s1.All()))))
}

func TestSetManyNamesStaySortedAndIndependent(t *testing.T) {
	names := []string{"m", "c", "x", "a", "q", "b", "z", "", "aa", "é", "A"}
	s := status.NewSet()
	var history []status.Set
	for _, n := range names {
		s = s.Set(n, status.Done())
		history = append(history, s)
	}
	for i, h := range history {
		assert.Len(t, maps.Collect(h.All()), i+1, "set after %d inserts", i+1)
		for _, n := range names[:i+1] {
			assert.Equal(t, status.KindDone, h.Get(n).Kind, "name %q", n)
		}
		for _, n := range names[i+1:] {
			assert.Equal(t, status.KindPending, h.Get(n).Kind, "name %q", n)
		}
	}
	// The String form lists names in sorted order (the empty name first,
	// rendered as an empty word).
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	assert.Equal(t, "Done: "+strings.Join(sorted, " "), withoutAge(s.String()))
}

func TestSetSortedByName(t *testing.T) {
	past := time.Now().Add(-10 * time.Minute)
	done := status.Status{Kind: status.KindDone, UpdatedAt: past}
	s := status.NewSet().Set("c", done).Set("a", done).Set("b", done)
	assert.Equal(t, "Done: a b c (10m ago)", s.String())

	// Replacing keeps the order.
	s = s.Set("b", done).Set("a", done)
	assert.Equal(t, "Done: a b c (10m ago)", s.String())
	assert.Len(t, maps.Collect(s.All()), 3)
}

func TestSetPending(t *testing.T) {
	s := status.NewSet().
		Set("a", status.Done()).
		Set("b", status.Error(errors.New("boom"))).
		Set("c", status.Refreshing())
	before := map[string]status.Status{}
	maps.Copy(before, maps.Collect(s.All()))
	oldSetID := s.Get("unknown").ID()

	p := s.Pending()

	// Receiver unchanged.
	assert.Equal(t, before, maps.Collect(s.All()))
	assert.Equal(t, oldSetID, s.Get("unknown").ID())

	all := maps.Collect(p.All())
	require.ElementsMatch(t, []string{"a", "b", "c"}, slices.Collect(maps.Keys(all)), "names are kept")
	id := p.Get("a").ID()
	require.NotZero(t, id)
	for name, st := range all {
		assert.Equal(t, status.KindPending, st.Kind, name)
		assert.Empty(t, st.Error, name)
		assert.Equal(t, id, st.ID(), "%s: one identity for the whole set", name)
		for _, old := range before {
			assert.NotEqual(t, old.ID(), st.ID(), "%s: fresh identity", name)
		}
		assert.False(t, st.UpdatedAt.Before(before["a"].UpdatedAt))
	}
	assert.NotEqual(t, oldSetID, id)
	// Names added later read as pending with the same identity.
	assert.Equal(t, id, p.Get("d").ID())
	assert.Equal(t, status.KindPending, p.Get("d").Kind)

	// Marking pending again gives a new identity.
	assert.NotEqual(t, id, p.Pending().Get("a").ID())

	// Writing one reconciler's status keeps the others' identity.
	p2 := p.Set("a", status.Done())
	assert.Equal(t, id, p2.Get("b").ID())
	assert.Equal(t, id, p.Get("a").ID())
}

func TestSetAllCopies(t *testing.T) {
	s := status.NewSet().Set("a", status.Done()).Set("b", status.Done())
	m := maps.Collect(s.All())
	require.Len(t, m, 2)
	delete(m, "a")
	m["c"] = status.Error(errors.New("x"))
	m["b"] = status.Status{}

	again := maps.Collect(s.All())
	assert.Len(t, again, 2)
	assert.Equal(t, status.KindDone, again["a"].Kind)
	assert.Equal(t, status.KindDone, again["b"].Kind)
	assert.NotContains(t, again, "c")
	assert.Equal(t, status.KindDone, s.Get("b").Kind)
}

func TestSetString(t *testing.T) {
	tenMin := time.Now().Add(-10*time.Minute - 5*time.Second)
	fiveMin := time.Now().Add(-5*time.Minute - 5*time.Second)
	twoHours := time.Now().Add(-2*time.Hour - 5*time.Minute)
	at := func(k status.Kind, t time.Time) status.Status { return status.Status{Kind: k, UpdatedAt: t} }
	failed := func(text string, t time.Time) status.Status {
		return status.Status{Kind: status.KindError, Error: text, UpdatedAt: t}
	}

	tests := []struct {
		name string
		set  status.Set
		want string
	}{
		{"done", status.NewSet().Set("a", at(status.KindDone, fiveMin)), "Done: a (5m ago)"},
		{"errored", status.NewSet().Set("b", failed("disk full", fiveMin)), "Errored: b (disk full) (5m ago)"},
		{
			"all groups, latest time wins",
			status.NewSet().
				Set("a", at(status.KindDone, twoHours)).
				Set("b", failed("disk full", fiveMin)).
				Set("c", at(status.KindPending, tenMin)).
				Set("d", at(status.KindRefreshing, tenMin)).
				Set("e", failed("no route", twoHours)).
				Set("f", at(status.KindDone, tenMin)),
			"Errored: b (disk full) e (no route), Pending: c d, Done: a f (5m ago)",
		},
		{"pending and done", status.NewSet().Set("x", at(status.KindDone, tenMin)).Set("y", at(status.KindPending, twoHours)),
			"Pending: y, Done: x (10m ago)"},
		{"unset counts as pending", status.NewSet().Set("u", status.Status{}).Set("d", at(status.KindDone, twoHours)),
			"Pending: u, Done: d (2h ago)"},
		{"entries without time", status.NewSet().Set("u", status.Status{Kind: status.KindDone}), "Done: u"},
		{"zero set", status.Set{}, "Pending"},
		{"zero set with entry", status.Set{}.Set("a", at(status.KindDone, fiveMin)), "Done: a (5m ago)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.set.String())
		})
	}

	// An empty set reports its own age.
	assert.Regexp(t, `^Pending \((0s|\d+ms) ago\)$`, status.NewSet().String())
	assert.Regexp(t, `^Pending: a, Done: b \((0s|\d+ms) ago\)$`,
		status.NewSet().Set("b", status.Done()).Set("a", status.Pending()).String())
	assert.Regexp(t, `^Pending: a b \((0s|\d+ms) ago\)$`,
		status.NewSet().Set("b", status.Done()).Set("a", status.Done()).Pending().String())
}

func TestZeroSet(t *testing.T) {
	var s status.Set
	st := s.Get("any")
	assert.Equal(t, status.KindPending, st.Kind, "every name in the zero Set reads as pending")
	assert.True(t, st.IsPendingOrRefreshing())
	assert.NotNil(t, maps.Collect(s.All()))
	assert.Empty(t, maps.Collect(s.All()))

	s2 := s.Set("a", status.Done())
	assert.Equal(t, status.KindDone, s2.Get("a").Kind)
	assert.Equal(t, status.KindPending, s.Get("a").Kind)

	p := s.Pending()
	assert.NotZero(t, p.Get("x").ID(), "Pending gives the zero set an identity")
	assert.Equal(t, status.KindPending, p.Get("x").Kind)

	for _, c := range allCodecs {
		data, err := c.marshal(s)
		require.NoError(t, err, c.name)
		var out status.Set
		require.NoError(t, c.unmarshal(data, &out), "%s: %s", c.name, data)
		assert.Empty(t, maps.Collect(out.All()), c.name)
		assert.Equal(t, status.KindPending, out.Get("x").Kind, c.name)
		assert.NotZero(t, out.Get("x").ID(), "%s: a decoded set has an identity", c.name)
	}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Equal(t, "{}", string(data))
}

func exampleSet() status.Set {
	zone := time.FixedZone("Y", 9*3600)
	return status.NewSet().
		Set("routes", status.Done()).
		Set("files", status.Error(errors.New("disk full"))).
		Set("maps", status.Pending()).
		Set("api", status.Refreshing()).
		Set("old", status.Status{Kind: status.KindDone, UpdatedAt: time.Date(2001, 2, 3, 4, 5, 6, 7, zone)}).
		Set("weird name: with/sep \"quotes\"", status.Done()).
		Set("", status.Done())
}

func requireSameSet(t testing.TB, want, got status.Set) {
	t.Helper()
	wantAll, gotAll := maps.Collect(want.All()), maps.Collect(got.All())
	require.ElementsMatch(t, slices.Collect(maps.Keys(wantAll)), slices.Collect(maps.Keys(gotAll)))
	for name, w := range wantAll {
		requireSameStatus(t, w, gotAll[name])
	}
}

func TestSetRoundTrip(t *testing.T) {
	in := exampleSet()
	for _, c := range allCodecs {
		t.Run(c.name, func(t *testing.T) {
			data, err := c.marshal(in)
			require.NoError(t, err)
			var out status.Set
			require.NoError(t, c.unmarshal(data, &out), "decoding %s", data)
			requireSameSet(t, in, out)

			// Decoded Pending and Refreshing statuses are new writes with
			// their own identities; a decoded Done or Error has none (no
			// age: a restore).
			seen := map[uint64]bool{}
			for name, st := range out.All() {
				if !st.IsPendingOrRefreshing() {
					require.Zero(t, st.ID(), name)
					continue
				}
				require.NotZero(t, st.ID(), name)
				assert.NotEqual(t, in.Get(name).ID(), st.ID(), name)
				assert.False(t, seen[st.ID()], "%s: identity reused", name)
				seen[st.ID()] = true
			}
			// Unknown names still read as pending with a fresh identity.
			assert.Equal(t, status.KindPending, out.Get("unknown").Kind)
			assert.NotZero(t, out.Get("unknown").ID())
			assert.NotEqual(t, in.Get("unknown").ID(), out.Get("unknown").ID())

			// The decoded set behaves like any other.
			assert.Equal(t, withoutAge(in.String()), withoutAge(out.String()))
			out2 := out.Set("routes", status.Error(errors.New("x")))
			assert.Equal(t, status.KindDone, out.Get("routes").Kind)
			assert.Equal(t, status.KindError, out2.Get("routes").Kind)
		})
	}
}

func TestSetRoundTripInStruct(t *testing.T) {
	type object struct {
		ID       int        `json:"id" yaml:"id"`
		Statuses status.Set `json:"statuses" yaml:"statuses"`
	}
	in := object{ID: 7, Statuses: exampleSet()}
	for _, c := range allCodecs {
		t.Run(c.name, func(t *testing.T) {
			data, err := c.marshal(in)
			require.NoError(t, err)
			var out object
			require.NoError(t, c.unmarshal(data, &out), "decoding %s", data)
			assert.Equal(t, 7, out.ID)
			requireSameSet(t, in.Statuses, out.Statuses)
		})
	}
}

func TestSetJSONShape(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	s := status.NewSet().
		Set("b", status.Status{Kind: status.KindError, Error: "boom", UpdatedAt: at}).
		Set("a", status.Status{Kind: status.KindDone, UpdatedAt: at})
	data, err := json.Marshal(s)
	require.NoError(t, err)
	assert.JSONEq(t, `{
		"a": {"kind": "Done", "updated-at": "2024-01-02T03:04:05Z"},
		"b": {"kind": "Error", "updated-at": "2024-01-02T03:04:05Z", "error": "boom"}
	}`, string(data))

	data, err = yamlCodec.marshal(s)
	require.NoError(t, err)
	assert.Equal(t, "a:\n    kind: Done\n    updated-at: 2024-01-02T03:04:05Z\n"+
		"b:\n    kind: Error\n    updated-at: 2024-01-02T03:04:05Z\n    error: boom\n", string(data))
}

func TestSetDecodeReplacesContents(t *testing.T) {
	s := status.NewSet().Set("old", status.Done())
	require.NoError(t, json.Unmarshal([]byte(`{"new":{"kind":"Pending"}}`), &s))
	assert.ElementsMatch(t, []string{"new"}, slices.Collect(maps.Keys(maps.Collect(s.All()))))

	s = status.NewSet().Set("old", status.Done())
	require.NoError(t, yamlCodec.unmarshal([]byte("new: {kind: Pending}\n"), &s))
	assert.ElementsMatch(t, []string{"new"}, slices.Collect(maps.Keys(maps.Collect(s.All()))))
}

func TestSetMalformed(t *testing.T) {
	jsonInputs := []string{
		`[]`,
		`"routes"`,
		`42`,
		`{"a":5}`,
		`{"a":"Done"}`,
		`{"a":[]}`,
		`{"a":{"kind":"Bogus"}}`,
		`{"a":{"kind":"Done"},"b":{"kind":"Done","error":"x"}}`,
		`{"a":{"kind":"Done","updated-at":"never"}}`,
	}
	for _, in := range jsonInputs {
		t.Run("json/"+in, func(t *testing.T) {
			var s status.Set
			var err error
			require.NotPanics(t, func() { err = json.Unmarshal([]byte(in), &s) })
			require.Error(t, err)
			assert.ErrorIs(t, err, status.ErrMalformed)
		})
	}
	var s status.Set
	err := s.UnmarshalJSON([]byte(`{"a":`))
	require.Error(t, err)
	assert.ErrorIs(t, err, status.ErrMalformed)

	yamlInputs := []string{
		"- a\n- b\n",
		"routes\n",
		"a: 5\n",
		"a: Done\n",
		"a: [1]\n",
		"a: {kind: Bogus}\n",
		"a: {kind: Done}\nb: {kind: Done, error: x}\n",
		"a: {kind: Done, updated-at: never}\n",
		"a: {kind: Done}\nc: {kind: [x]}\n",
	}
	for _, c := range yamlCodecs {
		for _, in := range yamlInputs {
			t.Run(c.name+"/"+in, func(t *testing.T) {
				require.True(t, c.valid([]byte(in)))
				var s status.Set
				var err error
				require.NotPanics(t, func() { err = c.unmarshal([]byte(in), &s) })
				require.Error(t, err)
				assert.ErrorIs(t, err, status.ErrMalformed)
			})
		}
	}
}

// withoutAge drops the trailing " (... ago)" of a String form, whose value
// depends on when it is computed.
func withoutAge(s string) string {
	return regexp.MustCompile(` \([^()]* ago\)$`).ReplaceAllString(s, "")
}

func TestSetStringAfterDecodeShowsStatusAge(t *testing.T) {
	// A set decoded from an old dump reads with the age of its statuses,
	// not the time it was decoded.
	at := time.Now().Add(-3*time.Hour - 10*time.Minute).UTC().Format(time.RFC3339Nano)
	in := `{"a":{"kind":"Done","updated-at":"` + at + `"},"b":{"kind":"Error","error":"boom","updated-at":"` + at + `"}}`
	var s status.Set
	require.NoError(t, json.Unmarshal([]byte(in), &s))
	assert.Equal(t, "Errored: b (boom), Done: a (3h ago)", s.String())

	for _, c := range yamlCodecs {
		var s status.Set
		require.NoError(t, c.unmarshal([]byte("a: {kind: Done, updated-at: "+at+"}\n"), &s), c.name)
		assert.Equal(t, "Done: a (3h ago)", s.String(), c.name)
	}
}

func TestSetSetAllIsSuccessiveSets(t *testing.T) {
	base := status.NewSet().Set("b", status.Done()).Set("d", status.Done())
	before := maps.Collect(base.All())
	done, failed := status.Done(), status.Error(errors.New("disk full"))
	type pair struct {
		name string
		st   status.Status
	}
	for _, given := range [][]pair{
		{{"b", failed}},
		{{"d", failed}, {"b", done}},
		{{"a", failed}, {"c", done}, {"e", failed}},
		{{"c", failed}, {"c", done}},
		{{"b", failed}, {"b", done}, {"z", failed}},
	} {
		want := base
		for _, p := range given {
			want = want.Set(p.name, p.st)
		}
		var entries []status.Entry
		for _, p := range given {
			entries = append(entries, status.Entry{Name: p.name, Status: p.st})
		}
		got := base.SetAll(entries...)
		assert.Equal(t, maps.Collect(want.All()), maps.Collect(got.All()), "%v", given)
		names := []string{}
		for name := range got.All() {
			names = append(names, name)
		}
		assert.True(t, slices.IsSorted(names), "entries stay in name order: %v", names)
		assert.Equal(t, before, maps.Collect(base.All()), "the receiver is unchanged")
	}
	same := base.SetAll()
	assert.Equal(t, maps.Collect(base.All()), maps.Collect(same.All()))
	assert.Equal(t, base.Get("a").ID(), same.Get("a").ID(), "the set's identity stays")
}

func TestSetSetAllCopiesOnce(t *testing.T) {
	s := status.NewSet().Pending("a", "b", "c", "d")
	var entries []status.Entry
	for _, name := range []string{"a", "b", "c", "d"} {
		entries = append(entries, status.Entry{Name: name, Status: status.Done()})
	}
	allocs := testing.AllocsPerRun(100, func() { s.SetAll(entries...) })
	assert.Equal(t, 1.0, allocs, "one copy of the entries for four names")
}

func TestSetSetAllAddsNamesWithOneCopy(t *testing.T) {
	s := status.NewSet()
	var entries []status.Entry
	for _, name := range []string{"d", "b", "a", "c"} {
		entries = append(entries, status.Entry{Name: name, Status: status.Done()})
	}
	var got status.Set
	allocs := testing.AllocsPerRun(100, func() { got = s.SetAll(entries...) })
	assert.Equal(t, 1.0, allocs, "one copy of the entries for four new names")
	var gotNames []string
	for name, st := range got.All() {
		gotNames = append(gotNames, name)
		assert.Equal(t, status.KindDone, st.Kind)
	}
	assert.Equal(t, []string{"a", "b", "c", "d"}, gotNames)
}

func TestSetSetAllManyNames(t *testing.T) {
	s := status.NewSet().Set("n05", status.Done())
	want := s
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("n%02d", (i*7)%12)) // repeats
	}
	failed := status.Error(errors.New("x"))
	for _, name := range names {
		want = want.Set(name, failed)
	}
	var entries []status.Entry
	for _, name := range names {
		entries = append(entries, status.Entry{Name: name, Status: failed})
	}
	got := s.SetAll(entries...)
	assert.Equal(t, maps.Collect(want.All()), maps.Collect(got.All()))
}

func TestSetSameIsOneSetValue(t *testing.T) {
	s := status.NewSet().Set("a", status.Done())
	c := s
	assert.True(t, s.Same(c), "a copy")
	assert.False(t, s.Same(s.Set("a", status.Done())), "a changed set")
	assert.False(t, s.Same(s.SetAll(status.Entry{Name: "b", Status: status.Done()})), "a changed set")
	assert.False(t, s.Same(s.Pending()), "a changed set")
	assert.True(t, s.Same(s.Delete("x")), "Delete of a name not in it changes nothing")
	assert.True(t, s.Same(s.SetAll()), "SetAll of nothing changes nothing")
	assert.False(t, status.NewSet().Set("a", status.Done()).Same(s), "a set made apart")
	assert.False(t, status.NewSet().Same(status.NewSet()), "two empty sets made apart")
	assert.True(t, status.Set{}.Same(status.Set{}), "two zero sets")
}
