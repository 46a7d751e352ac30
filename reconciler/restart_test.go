package reconciler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cilium/hive/hivetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Stopping a hive and starting the same hive again (as the "hive stop" and
// "hive start" script commands do) restarts the reconciler's job. Work it
// had collected but not committed when stopped, including an update cut
// short in flight, and changes made while it was stopped, including
// deletes, all converge after the start.
func TestStopAndStartTheSameHive(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			g := newGatedTarget("held")
			f := startFixture(t, g.ops(), nil, reconciler.WithConcurrency(workers))
			f.upsert(&item{ID: "a", Value: "1"}, &item{ID: "b", Value: "1"})
			f.waitReconciled()
			f.upsert(&item{ID: "held", Value: "1"})
			waitEntered(t, g, "1") // its update is in flight when the hive stops

			log := hivetest.Logger(t)
			require.NoError(t, f.hive.Stop(log, context.Background()))
			f.remove("a")
			f.upsert(&item{ID: "c", Value: "1"}, &item{ID: "b", Value: "2"})
			close(g.release)
			require.NoError(t, f.hive.Start(log, context.Background()))

			f.waitReconciled()
			last := f.upsert()
			_, _, err := f.rec.WaitUntilReconciled(context.Background(), last)
			require.NoError(t, err)
			for id, want := range map[string]string{"b": "2", "c": "1", "held": "1"} {
				got, ok := g.get(id)
				assert.True(t, ok && got == want, "target %s=%q (present: %v), want %q", id, got, ok, want)
				obj, _ := f.get(id)
				assert.Equal(t, status.KindDone, obj.Status.Kind, id)
			}
			_, ok := g.get("a")
			assert.False(t, ok, "a was deleted while the hive was stopped")
		})
	}
}
