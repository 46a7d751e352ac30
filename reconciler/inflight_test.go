package reconciler_test

// An object changed while its operation is in flight, and then written back
// as the very version in flight (its status identity included).

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
)

// Whatever happened in between (a delete, a delete and a new value, a
// newer version; or, with the delete that follows the update held in
// turn, a new value and the version in flight written while it runs),
// once the version in flight is written back it is what the target ends
// up holding: after a delete the same status identity is new work, and a
// newer version must not be applied after it. "delete, newer version" was
// found by the second review (bug 5); "while its delete runs" is bug 5 in
// the order the outside randomized test met it.
func TestChangedBackToTheVersionInFlightEndsApplied(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		for _, between := range []string{"delete", "delete, newer version", "newer version", "newer version, unsettled", "while its delete runs"} {
			t.Run(fmt.Sprintf("workers=%d/%s", workers, between), func(t *testing.T) {
				tg := newTarget()
				held := tg.hold("a")
				f := startFixture(t, tg, nil, reconciler.WithConcurrency(workers))
				settle := func(n int) {
					if workers > 1 { // with one worker the loop waits in the update
						f.settle(n)
					}
				}
				f.upsert(&item{ID: "a", Value: "v1"})
				held.wait(t)
				inFlight, ok := f.get("a")
				require.True(t, ok)
				switch between {
				case "delete":
					f.remove("a")
					settle(1)
				case "delete, newer version":
					f.remove("a")
					settle(1)
					f.upsert(&item{ID: "a", Value: "v2"})
				case "while its delete runs":
					f.remove("a")
					settle(1) // the delete has been read while the update runs
					del := tg.hold("a")
					held.let()
					del.wait(t)
					held = del
					f.upsert(&item{ID: "a", Value: "v2"})
				default:
					f.upsert(&item{ID: "a", Value: "v2"})
					settle(1)
				}
				f.insertAs(inFlight) // back to the version being applied
				if between != "newer version, unsettled" {
					// Else the change back may still be unread when the
					// update in flight is committed.
					settle(2)
				}
				held.let()
				f.waitApplied(tg, "a", "v1")
			})
		}
	}
}
