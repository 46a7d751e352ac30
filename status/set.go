package status

import (
	"encoding/json"
	"fmt"
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
	return slices.BinarySearchFunc(s.entries, name, func(e entry, n string) int {
		return strings.Compare(e.name, n)
	})
}

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
	entries := make([]entry, len(s.entries), len(s.entries)+1)
	copy(entries, s.entries)
	if ok {
		entries[i].status = st
	} else {
		entries = slices.Insert(entries, i, entry{name, st})
	}
	s.entries = entries
	return s
}

// Pending returns a copy of s in which every named status is Pending with one
// fresh identity. Call it when the object changes. Names are kept so that the
// set still shows which reconcilers are involved.
func (s Set) Pending() Set {
	s.id = nextID()
	s.createdAt = time.Now()
	entries := make([]entry, len(s.entries))
	for i, e := range s.entries {
		entries[i] = entry{e.name, Status{Kind: KindPending, UpdatedAt: s.createdAt, id: s.id}}
	}
	s.entries = entries
	return s
}

// All returns the statuses by reconciler name. The map is a new copy.
func (s Set) All() map[string]Status {
	m := make(map[string]Status, len(s.entries))
	for _, e := range s.entries {
		m[e.name] = e.status
	}
	return m
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
	return json.Marshal(s.All())
}

// UnmarshalJSON decodes what [Set.MarshalJSON] wrote. Each decoded status
// gets a fresh identity. Malformed input is an error wrapping [ErrMalformed].
func (s *Set) UnmarshalJSON(data []byte) error {
	var m map[string]Status
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%w: set: %w", ErrMalformed, err)
	}
	s.fromMap(m)
	return nil
}

// MarshalYAML encodes the set as a mapping from reconciler name to status.
func (s Set) MarshalYAML() (any, error) {
	return s.All(), nil
}

// UnmarshalYAML decodes what [Set.MarshalYAML] wrote, using the
// decoder-callback form that both major Go YAML libraries support.
func (s *Set) UnmarshalYAML(unmarshal func(any) error) error {
	var m map[string]Status
	if err := unmarshal(&m); err != nil {
		return fmt.Errorf("%w: set: %w", ErrMalformed, err)
	}
	s.fromMap(m)
	return nil
}

func (s *Set) fromMap(m map[string]Status) {
	*s = NewSet()
	s.entries = make([]entry, 0, len(m))
	for name, st := range m {
		s.entries = append(s.entries, entry{name, st})
	}
	slices.SortFunc(s.entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
}
