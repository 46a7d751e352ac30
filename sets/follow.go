package sets

import (
	"context"
	"fmt"
	"strings"

	"github.com/converge-go/converge/status"
)

// ObjectStatus is one name's status of one object: what a wait reports
// for an object that failed or that it still waits for.
type ObjectStatus struct {
	// Key is the object's primary key: as it is if it is printable text,
	// else in hex.
	Key string
	// Name is the reconciler's name in the object's status.Set.
	Name string
	// Status is the name's status, as last read (a missing entry reads as
	// Pending, see status.Set.Get).
	Status status.Status
}

// String renders s for messages, without the status's time: "x (b: Error:
// disk full)".
func (s ObjectStatus) String() string {
	st := s.Status.Kind.String()
	if s.Status.Kind == status.KindError {
		st += ": " + s.Status.Error
		if s.Status.Terminal {
			st = "Error (terminal): " + s.Status.Error
		}
	}
	return fmt.Sprintf("%s (%s: %s)", s.Key, s.Name, st)
}

// listed is the number of objects an error lists; it counts the rest.
const listed = 10

// list renders the first ten of ss, in the order given, and counts the
// rest.
func list(ss []ObjectStatus) string {
	if len(ss) <= listed {
		return listMore(ss, 0, "")
	}
	return listMore(ss[:listed], len(ss)-listed, "")
}

// listMore renders shown and counts more things not shown, of what kind.
func listMore(shown []ObjectStatus, more int, what string) string {
	var b strings.Builder
	for i, s := range shown {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.String())
	}
	if more > 0 {
		fmt.Fprintf(&b, " and %d more%s", more, what)
	}
	return b.String()
}

// waiting lists the names that hold up the first objects of keys, up to
// ten names, and counts the objects not shown. unsettled returns the
// statuses holding up the object with key, nil if it cannot tell.
func waiting(keys []string, unsettled func(key string) []ObjectStatus) string {
	var shown []ObjectStatus
	n := 0
	for _, key := range keys {
		if len(shown) >= listed {
			break
		}
		shown = append(shown, unsettled(key)...)
		n++
	}
	return listMore(shown, len(keys)-n, " object(s)")
}

// follower follows the changes of a table for the keys a wait is about.
// settle is given the last version of such a key (deleted: the version
// before its delete) and says whether the wait is over for it; it may
// record the outcome. The zero follower is not usable.
type follower[Obj any] struct {
	t *Table[Obj]
	// remaining maps the keys still waited for to their last version
	// seen. With seed, it starts empty and the first batch of changes
	// (every object of the table: the snapshot) fills it with the objects
	// settle says are not settled.
	remaining map[string]Obj
	seed      bool
	settle    func(key string, obj Obj, deleted bool) (bool, error)
}

// run reads the table's changes from a change iterator of its own until no
// key remains, or ctx ends (returning ctx's error). The iterator's first
// batch is the whole table: a key of remaining absent from it was deleted
// before. It wakes on the iterator's watch channel and never polls. The
// iterator is registered in a write transaction of its own (the table's
// lock, taken for no write) and closed on return.
func (f *follower[Obj]) run(ctx context.Context) (err error) {
	defer recovered(&err, "sets: get")
	t := f.t
	wtxn, err := t.lock(ctx)
	if err != nil {
		return err
	}
	changes, err := t.table.Changes(wtxn)
	wtxn.Commit()
	if err != nil {
		return fmt.Errorf("sets: table %q: %w", t.table.Name(), err)
	}
	defer changes.Close()
	first := true
	for {
		seq, watch := changes.Next(t.db.ReadTxn())
		var seen map[string]bool // the first batch's keys, to find those deleted before
		if first && !f.seed {
			seen = make(map[string]bool, len(f.remaining))
		}
		for ch := range seq {
			key, ok := t.key(ch.Object)
			if !ok {
				continue
			}
			if first && f.seed {
				if settled, err := f.settle(key, ch.Object, false); err != nil {
					return err
				} else if !settled {
					f.remaining[key] = ch.Object
				}
				continue
			}
			if _, ok := f.remaining[key]; !ok {
				continue
			}
			if seen != nil {
				seen[key] = true
			}
			f.remaining[key] = ch.Object
			settled, err := f.settle(key, ch.Object, ch.Deleted)
			if err != nil {
				return err
			}
			if settled {
				delete(f.remaining, key)
			}
		}
		if seen != nil {
			for key, obj := range f.remaining {
				if !seen[key] {
					if _, err := f.settle(key, obj, true); err != nil {
						return err
					}
					delete(f.remaining, key)
				}
			}
		}
		first = false
		if len(f.remaining) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-watch:
		}
	}
}
