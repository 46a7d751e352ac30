// Package keycache maps a reconciler (module ID, name and an optional
// label such as an operation) to values built once, without allocating or
// locking on lookups in the steady state.
package keycache

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cilium/hive/cell"
)

// Limit is how many entries are found without locking. Past it, lookups
// build a string key and take a lock.
const Limit = 64

// Cache maps (module ID, name, label) to a value of type T. The zero Cache
// is ready to use and safe for concurrent use.
type Cache[T any] struct {
	// entries is an immutable slice, replaced by a grown copy under mu.
	entries atomic.Pointer[[]*entry[T]]

	mu       sync.Mutex
	overflow map[string]T // keyed by Key(moduleID, name, label)
}

type entry[T any] struct {
	moduleID    cell.FullModuleID
	name, label string
	value       T
}

func (e *entry[T]) is(moduleID cell.FullModuleID, name, label string) bool {
	return e.name == name && e.label == label && slices.Equal(e.moduleID, moduleID)
}

// Key returns "<module ID>", "<module ID>/<name>", and either followed by
// "/<label>" unless label is empty.
func Key(moduleID cell.FullModuleID, name, label string) string {
	key := moduleID.String()
	if name != "" {
		key += "/" + name
	}
	if label != "" {
		key += "/" + label
	}
	return key
}

// Get returns the value for (moduleID, name, label), calling build with its
// Key to make it the first time. build runs under the cache's lock, so it
// runs once per entry. The cache keeps a copy of moduleID, never the
// caller's slice.
func (c *Cache[T]) Get(moduleID cell.FullModuleID, name, label string, build func(key string) T) T {
	if p := c.entries.Load(); p != nil {
		for _, e := range *p {
			if e.is(moduleID, name, label) {
				return e.value
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var entries []*entry[T]
	if p := c.entries.Load(); p != nil {
		entries = *p
		for _, e := range entries {
			if e.is(moduleID, name, label) {
				return e.value
			}
		}
	}
	key := Key(moduleID, name, label)
	if len(entries) >= Limit {
		if v, ok := c.overflow[key]; ok {
			return v
		}
		v := build(key)
		if c.overflow == nil {
			c.overflow = map[string]T{}
		}
		c.overflow[key] = v
		return v
	}
	e := &entry[T]{moduleID: slices.Clone(moduleID), name: name, label: label, value: build(key)}
	grown := append(slices.Clip(entries), e)
	c.entries.Store(&grown)
	return e.value
}
