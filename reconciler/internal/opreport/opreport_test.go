package opreport

import (
	"context"
	"testing"
	"time"
)

func TestReportsMadeAfterCloseAreIgnored(t *testing.T) {
	var cs Contexts
	c := cs.Next(context.Background())
	From(c).Repaired(2)
	From(c).RecheckAfter(time.Second)
	From(c).RecheckAfter(time.Minute) // the last ask counts
	if drift, recheck := c.Reports.Close(); drift != 2 || recheck != time.Minute {
		t.Fatalf("Close() = %d, %s; want 2, 1m", drift, recheck)
	}
	From(c).Repaired(5)
	From(c).RecheckAfter(time.Hour)
	if drift, recheck := c.Reports.Close(); drift != 2 || recheck != time.Minute {
		t.Fatalf("after close: %d, %s; want 2, 1m", drift, recheck)
	}
}

func TestEachCallHasItsOwnReports(t *testing.T) {
	var cs Contexts
	type testKey struct{}
	parent := context.WithValue(context.Background(), testKey{}, "v")
	a, b := cs.Next(parent), cs.Next(parent)
	From(a).Repaired(1)
	if From(b).TakeRepaired() != 0 || From(a).TakeRepaired() != 1 {
		t.Fatal("a report reached another call")
	}
	if b.Value(testKey{}) != "v" {
		t.Fatal("the parent's values are lost")
	}
}

func TestNoReportsOutsideACall(t *testing.T) {
	if From(context.Background()) != nil {
		t.Fatal("a plain context carries reports")
	}
	var r Reports
	ctx := With(context.Background(), &r)
	From(ctx).Repaired(0) // nothing to count
	From(ctx).Repaired(3)
	if got := r.TakeRepaired(); got != 3 {
		t.Fatalf("TakeRepaired() = %d, want 3", got)
	}
	if got := r.TakeRepaired(); got != 0 {
		t.Fatalf("TakeRepaired() again = %d, want 0", got)
	}
}

func TestNextAllocatesOncePerAllocCalls(t *testing.T) {
	var cs Contexts
	cs.Next(context.Background())
	allocs := testing.AllocsPerRun(PerAlloc-2, func() { cs.Next(context.Background()) })
	if allocs != 0 {
		t.Fatalf("Next allocates %v times per call within a block", allocs)
	}
}
