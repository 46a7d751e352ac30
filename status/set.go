package status

import (
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"
)

// Set holds the statuses of one object for several named reconcilers, for
// objects whose reconcilers are not known when the object is written. Each
// reconciler reads its own entry with [Set.Get] and writes it with [Set.Set].
//
// A Set is a value: its methods never modify the receiver's entries but
// return a new Set, so a Set inside an object stored in StateDB can be shared
// safely. The zero Set is empty and every name in it reads as Pending; prefer
// [NewSet], which also stamps the creation time and identity used for names
// without an entry.
//
// A Set encodes in JSON and YAML as a mapping from reconciler name to
// status. Keep it in a named field of the object: embedded anonymously, its
// encoding methods would encode the whole object as the set alone, dropping
// the object's other fields, as the StateDB reconciler's StatusSet does.
type Set struct {
	id        uint64
	createdAt time.Time
	entries   []entry // sorted by name
}

type entry struct {
	name   string
	status Status
}

// NewSet returns an empty set. Every reconciler reads its status in it as
// Pending until it writes one.
func NewSet() Set {
	return Set{id: nextID(), createdAt: time.Now()}
}

func (s Set) find(name string) (int, bool) {
	if len(s.entries) <= smallSet {
		// A set names a few reconcilers: comparing for equality, which
		// looks at the lengths first, finds the entry faster than ordering
		// does. The order is needed only to place a new name.
		for i := range s.entries {
			if s.entries[i].name == name {
				return i, true
			}
		}
	}
	return slices.BinarySearchFunc(s.entries, name, compareName)
}

// smallSet is the size up to which find looks for a name entry by entry.
const smallSet = 8

func compareName(e entry, name string) int { return strings.Compare(e.name, name) }

// Get returns the status of the named reconciler. A name without an entry
// reads as Pending, stamped with the set's creation time and identity, so a
// reconciler added later still reconciles every object.
func (s Set) Get(name string) Status {
	if i, ok := s.find(name); ok {
		return s.entries[i].status
	}
	return Status{Kind: KindPending, UpdatedAt: s.createdAt, id: s.id}
}

// Set returns a copy of s with the named reconciler's status replaced by st.
func (s Set) Set(name string, st Status) Set {
	i, ok := s.find(name)
	if ok {
		// No room for another entry: a set is copied on every write of a
		// status, by every reconciler of the object.
		entries := slices.Clone(s.entries)
		entries[i].status = st
		s.entries = entries
		return s
	}
	entries := make([]entry, len(s.entries)+1)
	copy(entries, s.entries[:i])
	entries[i] = entry{name, st}
	copy(entries[i+1:], s.entries[i:])
	s.entries = entries
	return s
}

// Entry is a named reconciler's status, for [Set.SetAll].
type Entry struct {
	Name   string
	Status Status
}

// SetAll returns a copy of s with the status of each entry's name replaced
// by the entry's, as successive calls of [Set.Set] would (a name given
// twice keeps the last), but copying the set once rather than once per
// name. Use it to write the statuses of several reconcilers at once. The
// caller's slice is neither kept nor modified; with none, SetAll returns s
// unchanged.
func (s Set) SetAll(entries ...Entry) Set {
	if len(entries) == 0 {
		return s
	}
	// Room for the names not in s yet, each counted once.
	var seen map[string]bool // for many names; a few are compared
	add := 0
	for i, e := range entries {
		if _, ok := s.find(e.Name); ok {
			continue
		}
		switch {
		case len(entries) > smallSet && seen[e.Name]:
		case len(entries) > smallSet:
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[e.Name] = true
			add++
		case !slices.ContainsFunc(entries[:i], func(f Entry) bool { return f.Name == e.Name }):
			add++
		}
	}
	set := Set{entries: make([]entry, len(s.entries), len(s.entries)+add)}
	copy(set.entries, s.entries)
	for _, e := range entries {
		if i, ok := set.find(e.Name); ok {
			set.entries[i].status = e.Status
		} else {
			set.entries = slices.Insert(set.entries, i, entry{e.Name, e.Status})
		}
	}
	s.entries = set.entries
	return s
}

// Same reports whether s and t are one set value: one a copy of the other,
// neither changed since (a method returning a changed set returns one
// that is not the same). It tells cheaply whether two objects, or two
// versions of one, hold the very same set: two sets made apart with equal
// entries are not the same, but two zero Sets, or two empty sets of one
// NewSet, are.
func (s Set) Same(t Set) bool {
	return s.id == t.id && s.createdAt.Equal(t.createdAt) && len(s.entries) == len(t.entries) &&
		(len(s.entries) == 0 || &s.entries[0] == &t.entries[0])
}

// Pending returns a copy of s in which every status is Pending, with one
// fresh identity and time. Call it when the object changes. The names
// already in s are kept, so that the set still shows which reconcilers are
// involved, and names are added to them (a name already present is not
// repeated). The caller's slice is neither kept nor modified.
func (s Set) Pending(names ...string) Set {
	s.id = nextID()
	s.createdAt = time.Now()
	pending := Status{Kind: KindPending, UpdatedAt: s.createdAt, id: s.id}
	entries := make([]entry, len(s.entries), len(s.entries)+len(names))
	for i, e := range s.entries {
		entries[i] = entry{e.name, pending}
	}
	for _, name := range names {
		i, found := slices.BinarySearchFunc(entries, name, compareName)
		if !found {
			entries = slices.Insert(entries, i, entry{name, pending})
		}
	}
	s.entries = entries
	return s
}

// Delete returns a copy of s without the named reconciler's entry. The
// name then reads as Pending again (see [Set.Get]), and a later
// [Set.Pending] does not add it back unless given the name. Deleting a name
// that is not in s returns s unchanged.
func (s Set) Delete(name string) Set {
	i, ok := s.find(name)
	if !ok {
		return s
	}
	entries := make([]entry, 0, len(s.entries)-1)
	entries = append(entries, s.entries[:i]...)
	s.entries = append(entries, s.entries[i+1:]...)
	return s
}

// All returns an iterator over the entries of s by reconciler name, in
// name order. Use maps.Collect(s.All()) for a map.
func (s Set) All() iter.Seq2[string, Status] {
	return func(yield func(string, Status) bool) {
		for _, e := range s.entries {
			if !yield(e.name, e.status) {
				return
			}
		}
	}
}

// IsPendingOrRefreshing reports whether the status of any name in s is
// Pending or Refreshing. An empty set has none, as in the StateDB
// reconciler's StatusSet, although a reconciler reads its missing entry as
// Pending (see [Set.Get]).
func (s Set) IsPendingOrRefreshing() bool {
	return slices.ContainsFunc(s.entries, func(e entry) bool { return e.status.IsPendingOrRefreshing() })
}

// IsDone reports whether the status of every name in s is Done. An empty
// set is done, as in the StateDB reconciler's StatusSet.
func (s Set) IsDone() bool {
	return !slices.ContainsFunc(s.entries, func(e entry) bool { return e.status.Kind != KindDone })
}

// String summarises the set for tables, for example
// "Errored: b (disk full), Pending: c, Done: a (3s ago)". The age is that of
// the most recent status in the set, or of the set itself when it is empty.
func (s Set) String() string {
	if len(s.entries) == 0 {
		return "Pending" + ago(s.createdAt)
	}
	var errored, pending, done []string
	// The set's own creation time is not a status change shown here: a set
	// decoded from an old dump must not read as just updated.
	var latest time.Time
	for _, e := range s.entries {
		if e.status.UpdatedAt.After(latest) {
			latest = e.status.UpdatedAt
		}
		switch e.status.Kind {
		case KindDone:
			done = append(done, e.name)
		case KindError:
			errored = append(errored, e.name+" ("+e.status.Error+")")
		default:
			pending = append(pending, e.name)
		}
	}
	var parts []string
	add := func(label string, names []string) {
		if len(names) > 0 {
			parts = append(parts, label+": "+strings.Join(names, " "))
		}
	}
	add("Errored", errored)
	add("Pending", pending)
	add("Done", done)
	return strings.Join(parts, ", ") + ago(latest)
}

// MarshalJSON encodes the set as an object from reconciler name to status.
func (s Set) MarshalJSON() ([]byte, error) {
	return json.Marshal(maps.Collect(s.All()))
}

// UnmarshalJSON decodes what [Set.MarshalJSON] wrote. Each decoded Pending
// or Refreshing status gets a fresh identity: it asks for work as a new
// write. A decoded Done or Error gets none, as outside a Set: it says what
// a reconciler did at some time nothing tells (a restore from a backup),
// and the reconciler applies the object again wherever it may be older
// than what the target got since. Malformed input, an error text or terminal flag on
// a status other than Error included, is an error wrapping [ErrMalformed].
func (s *Set) UnmarshalJSON(data []byte) error {
	var m map[string]Status
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%w: set: %w", ErrMalformed, err)
	}
	return s.fromMap(m)
}

// MarshalYAML encodes the set as a mapping from reconciler name to status.
func (s Set) MarshalYAML() (any, error) {
	return maps.Collect(s.All()), nil
}

// UnmarshalYAML decodes what [Set.MarshalYAML] wrote, using the
// decoder-callback form that both major Go YAML libraries support. It
// checks and stamps statuses as [Set.UnmarshalJSON] does.
func (s *Set) UnmarshalYAML(unmarshal func(any) error) error {
	var m map[string]Status
	if err := unmarshal(&m); err != nil {
		return fmt.Errorf("%w: set: %w", ErrMalformed, err)
	}
	return s.fromMap(m)
}

// fromMap replaces s with the decoded statuses in m, those asking for
// work a new write with its own identity, or leaves s alone if one of
// them is malformed.
func (s *Set) fromMap(m map[string]Status) error {
	entries := make([]entry, 0, len(m))
	for name, st := range m {
		entries = append(entries, entry{name, st})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for i := range entries {
		e := &entries[i]
		if err := e.status.check(); err != nil {
			return fmt.Errorf("%w: set: %q: %w", ErrMalformed, e.name, err)
		}
		if e.status.IsPendingOrRefreshing() {
			e.status.id = nextID()
		}
	}
	*s = NewSet()
	s.entries = entries
	return nil
}
