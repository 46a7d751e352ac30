package reconciler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// A refresh limiter that allows one object and then nothing for an hour
// lets exactly one stale object be refreshed; the sweep then waits on the
// limiter until the hive stops.
func TestRefreshIsPacedByItsLimiter(t *testing.T) {
	var mu sync.Mutex
	updates := map[string]int{}
	refreshed := make(chan string, 10)
	tg := newTarget()
	tg.update = func(_ context.Context, it *item) error {
		mu.Lock()
		defer mu.Unlock()
		updates[it.ID]++
		if it.Status.Kind == status.KindRefreshing {
			refreshed <- it.ID
		}
		return nil
	}
	f := startFixture(t, tg, nil,
		reconciler.WithRefreshing(time.Millisecond, rate.NewLimiter(rate.Every(time.Hour), 1)))
	f.upsert(&item{ID: "a"}, &item{ID: "b"}, &item{ID: "c"})

	first := recv(t, refreshed, "a refresh")
	f.waitKind(first, status.KindDone)
	f.waitReconciled()

	mu.Lock()
	total := 0
	for _, n := range updates {
		total += n
	}
	mu.Unlock()
	assert.Equal(t, 4, total, "three first updates and one refresh: %v", updates)
	for _, id := range []string{"a", "b", "c"} {
		obj, ok := f.get(id)
		require.True(t, ok)
		assert.Equal(t, status.KindDone, obj.Status.Kind, "%s is not marked while the limiter holds", id)
	}
	assert.Empty(t, refreshed)
	f.stop() // the sweep is blocked on the limiter; stopping must end it
}
