package reconcilertest

import (
	"fmt"
	"time"
)

// A TargetReader reads a target system as a set of key-value pairs, so that
// the reconciler/target script command can print it, wait until it holds
// what a script expects, and compare it with the table.
//
// Implement it on the target system of your reconciler, or on a small view
// of it (for routes, the prefix as key and the next hop as value), and set
// [Subject.TargetReader] to it when adding the reconciler to a [Registry].
// With [Subject.Key] and [Subject.Value] also set, "reconciler/target
// --table" can compute what the table wants of the target. Keys and values
// must be in the form the scripts use: a script names a pair as key=value
// and the command prints one pair per line, so a key cannot contain "=" and
// neither should contain white space. [Target] is a TargetReader.
//
// The commands call the methods from the script's goroutine while the
// reconciler runs, so an implementation must be safe for concurrent use
// with the target's operations. A change between Keys and Get is harmless:
// a key that Get no longer finds is left out. Neither method may block for
// long; an error fails the command that read the target, with the error
// in its message.
//
// The commands that wait on a TargetReader check it every 10ms, as they
// check health, since a TargetReader has no change notification ([Target]
// itself wakes them on every change instead).
type TargetReader interface {
	// Keys returns the keys the target holds, in any order.
	Keys() ([]string, error)

	// Get returns the value the target holds under key. found is false
	// if it holds no such key.
	Get(key string) (value string, found bool, err error)
}

// A TargetWriter changes a target system behind the reconciler's back, for
// the reconciler/target/set and reconciler/target/unset script commands: a
// script uses them to simulate drift, or leftovers that a prune must
// remove.
//
// Implement it beside [TargetReader] when a test needs such changes; the
// commands find it by a type assertion on [Subject.TargetReader], and on a
// target without it they fail, saying that the target is read-only.
// [Target] is a TargetWriter.
//
// Set stores value under key and Remove deletes key (removing a key the
// target does not hold does nothing). Neither reports an error: a target
// that cannot be changed reliably from a test should not implement
// TargetWriter. Like a TargetReader's, the methods must be safe for
// concurrent use with the target's operations.
type TargetWriter interface {
	Set(key, value string)
	Remove(key string)
}

var (
	_ TargetReader = (*Target[struct{}])(nil)
	_ TargetWriter = (*Target[struct{}])(nil)
)

// readTarget reads everything r holds.
func readTarget(r TargetReader) (map[string]string, error) {
	keys, err := r.Keys()
	if err != nil {
		return nil, fmt.Errorf("reading the target's keys: %w", err)
	}
	state := make(map[string]string, len(keys))
	for _, k := range keys {
		v, found, err := r.Get(k)
		if err != nil {
			return nil, fmt.Errorf("reading key %q of the target: %w", k, err)
		}
		if found {
			state[k] = v
		}
	}
	return state, nil
}

// pollAfter returns a channel that is closed after pollInterval: the watch
// channel of what has no change notification of its own.
func pollAfter() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(pollInterval, func() { close(ch) })
	return ch
}
