package status_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

// Outsider review of Set.SetAll (h57): value semantics and equality with
// successive Set calls, from the documentation only.

// outsider57Entry is one (name, status) pair of a set as All yields it.
type outsider57Entry struct {
	Name   string
	Status status.Status
}

// outsider57Snapshot records everything observable of s: its entries in
// All's order, its encoding, its summary, its predicates and what Get
// returns for a name it lacks.
type outsider57Snapshot struct {
	Entries  []outsider57Entry
	JSON     string
	Done     bool
	Pending  bool
	Missing  status.Status
	Len      int
	GetNames map[string]status.Status
}

func outsider57Snap(t testing.TB, s status.Set, names []string) outsider57Snapshot {
	t.Helper()
	var snap outsider57Snapshot
	for n, st := range s.All() {
		snap.Entries = append(snap.Entries, outsider57Entry{n, st})
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	snap.JSON = string(b)
	snap.Done, snap.Pending = s.IsDone(), s.IsPendingOrRefreshing()
	snap.Missing = s.Get("outsider57-never-a-name")
	snap.Len = len(snap.Entries)
	snap.GetNames = map[string]status.Status{}
	for _, n := range names {
		snap.GetNames[n] = s.Get(n)
	}
	return snap
}

// outsider57Names is the pool names are drawn from: enough to cross any
// small-set threshold (the docs mention sets of up to 8 found by equality).
func outsider57Names() []string {
	names := make([]string, 24)
	for i := range names {
		names[i] = fmt.Sprintf("n%02d", i)
	}
	// Names that sort in odd ways, and the empty name.
	return append(names, "", "A", "Z", "a", "é", "n1", "n100")
}

func outsider57Status(r *rand.Rand) status.Status {
	switch r.IntN(5) {
	case 0:
		return status.Pending()
	case 1:
		return status.Done()
	case 2:
		return status.Error(fmt.Errorf("e%d", r.IntN(100)))
	case 3:
		return status.Refreshing()
	default:
		return status.TerminalError(errors.New("terminal"))
	}
}

// outsider57Base builds a set from r: a NewSet or a zero Set, some names
// set, some deleted, some marked Pending.
func outsider57Base(r *rand.Rand, names []string) status.Set {
	var s status.Set
	if r.IntN(4) != 0 {
		s = status.NewSet()
	}
	n := r.IntN(len(names) + 1)
	for range n {
		s = s.Set(names[r.IntN(len(names))], outsider57Status(r))
	}
	for range r.IntN(3) {
		s = s.Delete(names[r.IntN(len(names))])
	}
	if r.IntN(5) == 0 {
		s = s.Pending(names[r.IntN(len(names))])
	}
	return s
}

func outsider57Entries(r *rand.Rand, names []string) []status.Entry {
	entries := make([]status.Entry, r.IntN(len(names)+3))
	for i := range entries {
		entries[i] = status.Entry{Name: names[r.IntN(len(names))], Status: outsider57Status(r)}
	}
	return entries
}

// outsider57Check checks one SetAll call against the documentation.
func outsider57Check(t *testing.T, base status.Set, entries []status.Entry, names []string) {
	t.Helper()
	before := outsider57Snap(t, base, names)
	given := slices.Clone(entries)

	got := base.SetAll(entries...)

	want := base
	for _, e := range entries {
		want = want.Set(e.Name, e.Status)
	}
	assert.Equal(t, outsider57Snap(t, want, names), outsider57Snap(t, got, names), "SetAll equals successive Set calls")
	assert.Equal(t, before, outsider57Snap(t, base, names), "the receiver is not modified")
	assert.Equal(t, given, entries, "the caller's slice is not modified")

	// The slice is not kept: changing it afterwards changes nothing.
	gotSnap := outsider57Snap(t, got, names)
	for i := range entries {
		entries[i] = status.Entry{Name: "outsider57-scribble", Status: status.Done()}
	}
	assert.Equal(t, gotSnap, outsider57Snap(t, got, names), "the result does not keep the caller's slice")
	copy(entries, given)

	// The result is a value: writes to it, in two directions, stay apart,
	// and leave the receiver alone.
	x := got.Set("outsider57-x", status.Done())
	y := got.Set("outsider57-x", status.Error(errors.New("y")))
	xa := got.SetAll(status.Entry{Name: "outsider57-xa", Status: status.Done()})
	ya := got.SetAll(status.Entry{Name: "outsider57-ya", Status: status.Done()})
	assert.Equal(t, status.KindDone, x.Get("outsider57-x").Kind, "x keeps its own write")
	assert.Equal(t, status.KindError, y.Get("outsider57-x").Kind)
	assert.Equal(t, status.KindPending, xa.Get("outsider57-ya").Kind, "a sibling's name does not leak into xa")
	assert.Equal(t, status.KindPending, ya.Get("outsider57-xa").Kind, "a sibling's name does not leak into ya")
	assert.Equal(t, gotSnap, outsider57Snap(t, got, names), "writes to the result's copies leave it alone")
	if len(entries) > 0 {
		// Writing over the names SetAll wrote, in copies, leaves it alone.
		first := entries[0].Name
		_ = got.Set(first, status.Refreshing())
		_ = got.SetAll(status.Entry{Name: first, Status: status.Pending()}, status.Entry{Name: "outsider57-z", Status: status.Done()})
		_ = got.Delete(first)
		assert.Equal(t, gotSnap, outsider57Snap(t, got, names), "a copy's writes over SetAll's names leave the result alone")
	}
	assert.Equal(t, before, outsider57Snap(t, base, names), "the receiver is still as it was")
}

// Property: over random sets and entries, SetAll is what successive Set
// calls make, and neither the receiver nor the caller's slice changes.
func TestOutsider57SetAllIsSuccessiveSetsProperty(t *testing.T) {
	names := outsider57Names()
	for seed := range uint64(200) { // FuzzOutsider57SetAll goes further
		r := rand.New(rand.NewPCG(seed, 57))
		base := outsider57Base(r, names)
		entries := outsider57Entries(r, names)
		t.Run("", func(t *testing.T) {
			outsider57Check(t, base, entries, names)
		})
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// Growing a set past any small-set representation with SetAll, one call at a
// time and all at once, gives the same set as Set does.
func TestOutsider57SetAllAcrossSizes(t *testing.T) {
	names := outsider57Names()
	for size := range 20 {
		for add := range 12 {
			base := status.NewSet()
			for i := range size {
				base = base.Set(names[i], status.Done())
			}
			entries := make([]status.Entry, add)
			for i := range entries {
				entries[i] = status.Entry{Name: names[(size+i)%len(names)], Status: status.Error(fmt.Errorf("%d", i))}
			}
			t.Run(fmt.Sprintf("size=%d,add=%d", size, add), func(t *testing.T) {
				outsider57Check(t, base, entries, names)
			})
		}
	}
}

// With no entries (nil or empty), SetAll returns s unchanged.
func TestOutsider57SetAllWithNoneIsTheSame(t *testing.T) {
	names := outsider57Names()
	for _, base := range []status.Set{{}, status.NewSet(), status.NewSet().Set("a", status.Done()).Set("b", status.Pending())} {
		want := outsider57Snap(t, base, names)
		assert.Equal(t, want, outsider57Snap(t, base.SetAll(), names))
		assert.Equal(t, want, outsider57Snap(t, base.SetAll([]status.Entry{}...), names))
		assert.Equal(t, want, outsider57Snap(t, base.SetAll(nil...), names))
	}
}

// A name given twice keeps the last, also when the name is new to the set
// and when the set is large.
func TestOutsider57SetAllNameTwiceKeepsTheLast(t *testing.T) {
	for _, n := range []int{0, 3, 8, 9, 16} {
		s := status.NewSet()
		for i := range n {
			s = s.Set(fmt.Sprintf("k%02d", i), status.Done())
		}
		last := status.Error(errors.New("last"))
		got := s.SetAll(
			status.Entry{Name: "dup", Status: status.Done()},
			status.Entry{Name: "k00", Status: status.Pending()},
			status.Entry{Name: "dup", Status: status.Refreshing()},
			status.Entry{Name: "k00", Status: last},
			status.Entry{Name: "dup", Status: last},
		)
		assert.Equal(t, last, got.Get("dup"), "n=%d", n)
		assert.Equal(t, last, got.Get("k00"), "n=%d", n)
		count := 0
		for name := range got.All() {
			if name == "dup" {
				count++
			}
		}
		assert.Equal(t, 1, count, "n=%d: the name is in the set once", n)
		var keys []string
		for name := range got.All() {
			keys = append(keys, name)
		}
		assert.True(t, slices.IsSorted(keys), "All is in name order: %v", keys)
	}
}

// A set decoded from JSON (whose statuses have other identities) and then
// written with SetAll equals successive Set calls too.
func TestOutsider57SetAllOnDecodedSet(t *testing.T) {
	src := status.NewSet().Set("b", status.Done()).Set("a", status.Error(errors.New("x"))).Set("c", status.Pending())
	data, err := json.Marshal(src)
	require.NoError(t, err)
	var s status.Set
	require.NoError(t, json.Unmarshal(data, &s))
	entries := []status.Entry{{Name: "c", Status: status.Done()}, {Name: "d", Status: status.Done()}, {Name: "a", Status: status.Done()}}
	outsider57Check(t, s, entries, []string{"a", "b", "c", "d", "e"})
}

// FuzzOutsider57SetAll drives SetAll with sets and entries decoded from
// bytes: each byte pair is (operation, name).
func FuzzOutsider57SetAll(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 9, 1, 9, 1})
	f.Add([]byte{0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 9, 9, 9, 10, 9, 1})
	f.Add([]byte{1, 1, 2, 2, 9, 2, 9, 2, 9, 2})
	f.Add([]byte{})
	names := outsider57Names()
	f.Fuzz(func(t *testing.T, data []byte) {
		s := status.NewSet()
		if len(data) > 0 && data[0]%7 == 6 {
			s = status.Set{}
		}
		var entries []status.Entry
		for i := 0; i+1 < len(data); i += 2 {
			name := names[int(data[i+1])%len(names)]
			st := outsider57Status(rand.New(rand.NewPCG(uint64(data[i]), uint64(data[i+1]))))
			switch data[i] % 10 {
			case 0, 1, 2, 3:
				s = s.Set(name, st)
			case 4:
				s = s.Delete(name)
			case 5:
				s = s.Pending(name)
			default:
				entries = append(entries, status.Entry{Name: name, Status: st})
			}
		}
		outsider57Check(t, s, entries, names)
	})
}
