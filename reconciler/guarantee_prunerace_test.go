package reconciler_test

// Claim 4 of the guarantee review, the second case of "Objects put back":
// a prune that ran without the object while its delete was unread. The
// delete is kept unread by a backlog of fresh changes read one per round
// (WithRoundLimits(1, nil)); the prune, asked for right after the delete,
// runs between two of those rounds.

import (
	"fmt"
	"testing"

	"github.com/converge-go/converge/reconciler"
)

func TestGuaranteePruneWhileDeleteUnread(t *testing.T) {
	for _, v := range o30Variants {
		for _, mode := range []string{"noStop", "stopAfterPutBack", "stopBeforePutBack", "secondPruneThenStop"} {
			t.Run(fmt.Sprintf("%v,%s", v, mode), func(t *testing.T) {
				tgt := newO30Target()
				e := newO30Env(t, tgt, v.config(reconciler.WithRoundLimits(1, nil)))
				e.start()
				hit := 0
				for i := range 3 {
					id := fmt.Sprintf("k%d", i)
					e.put(&o30Obj{ID: id, Value: "1"})
					e.settle()
					was, _ := e.get(id)
					before := tgt.pruneCount()
					e.put(o30Objs(fmt.Sprintf("filler%d", i), 2000, "1")...)
					e.del(id)
					e.rec.Prune()
					o30WaitPrunes(t, tgt, before+1)
					_, inTarget := tgt.get(id)
					if !inTarget && tgt.deleteCount(id) == 0 {
						hit++ // the prune removed it before Delete ran
					}
					switch mode {
					case "noStop":
						e.putAsIs(was)
					case "stopAfterPutBack":
						e.putAsIs(was)
						e.stop()
						e.start()
					case "stopBeforePutBack":
						e.stop()
						e.putAsIs(was)
						e.start()
					case "secondPruneThenStop":
						e.putAsIs(was)
						e.rec.Prune()
						o30WaitPrunes(t, tgt, before+2)
						e.stop()
						e.start()
					}
					e.settle()
					e.requireConverged(fmt.Sprintf("iteration %d (prune ran before Delete: %v)", i, !inTarget && tgt.deleteCount(id) == 0))
				}
				t.Logf("%d of 3 iterations had the prune remove the object before its Delete", hit)
			})
		}
	}
}
