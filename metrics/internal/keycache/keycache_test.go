package keycache

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
)

func TestKey(t *testing.T) {
	mod := cell.FullModuleID{"a", "b"}
	assert.Equal(t, "a.b", Key(mod, "", ""))
	assert.Equal(t, "a.b/n", Key(mod, "n", ""))
	assert.Equal(t, "a.b/n/update", Key(mod, "n", "update"))
	assert.Equal(t, "a.b/update", Key(mod, "", "update"))
}

func TestGetBuildsOncePerEntry(t *testing.T) {
	var c Cache[*string]
	builds := map[string]int{}
	build := func(key string) *string { builds[key]++; return &key }
	// Past Limit, entries go to the overflow map and are still built once.
	for round := range 3 {
		for i := range Limit + 10 {
			v := c.Get(cell.FullModuleID{"m"}, fmt.Sprint("r", i), "op", build)
			assert.Equal(t, fmt.Sprintf("m/r%d/op", i), *v, "round %d", round)
		}
	}
	assert.Len(t, builds, Limit+10)
	for k, n := range builds {
		assert.Equal(t, 1, n, k)
	}
}

func TestGetDoesNotRetainModuleID(t *testing.T) {
	var c Cache[string]
	mod := cell.FullModuleID{"a", "b"}
	id := func(key string) string { return key }
	assert.Equal(t, "a.b/r", c.Get(mod, "r", "", id))
	mod[1] = "c"
	assert.Equal(t, "a.c/r", c.Get(mod, "r", "", id))
	assert.Equal(t, "a.b/r", c.Get(cell.FullModuleID{"a", "b"}, "r", "", id))
}

func TestGetConcurrent(t *testing.T) {
	var c Cache[*int]
	var wg sync.WaitGroup
	got := make([][]*int, 4)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2 * Limit {
				got[g] = append(got[g], c.Get(cell.FullModuleID{"m"}, fmt.Sprint(i), "", func(string) *int { return new(int) }))
			}
		}()
	}
	wg.Wait()
	for g := range got[1:] {
		for i := range got[0] {
			assert.Same(t, got[0][i], got[g+1][i], "every goroutine gets the same value for entry %d", i)
		}
	}
}
