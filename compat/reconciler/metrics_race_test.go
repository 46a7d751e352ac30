package reconciler_test

import (
	"runtime"
	"testing"

	"github.com/cilium/hive/cell"

	"github.com/converge-go/converge/compat/reconciler"
)

// The StateDB reconciler's pruning.txtar reads the expvar metrics just after
// the first prune and expects no "prune_count.test: 0". ExpVarMetrics
// (converge's metrics.ExpVar) publishes a reconciler's prune_count entry at
// 0 when it records its first prune, and adds the prune only after creating
// the prune_total_errors and prune_current_errors entries, so a reader in
// between sees a count of 0 for a prune that has run; about one run of the
// StateDB reconciler's suite in a few hundred fails that way. Publishing
// each entry with its first value already set would leave nothing to see.
//
// This test reads prune_count while the first prune is recorded, over and
// over, and fails the first time it reads 0.
func TestExpVarPruneCountIsNeverSeenAtZero(t *testing.T) {
	mod := cell.FullModuleID{"test"}
	for i := range 20000 {
		m := reconciler.NewUnpublishedExpVarMetrics()
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.PruneError(mod, "", nil)
		}()
	poll:
		for {
			if v := m.PruneCountVar.Get("test"); v != nil && v.String() == "0" {
				<-done
				t.Fatalf("attempt %d: prune_count read as 0 while the first prune was recorded", i)
			}
			select {
			case <-done:
				break poll
			default:
				runtime.Gosched()
			}
		}
	}
}
