package report

import (
	"testing"

	"github.com/converge-go/converge/metrics"
)

// onlyCore implements metrics.Metrics and none of the optional interfaces.
type onlyCore struct{ metrics.Metrics }

func TestObserversFindTheOptionalInterfacesOnce(t *testing.T) {
	all := NewObservers(metrics.NewUnpublishedExpVar())
	if all.Queue == nil || all.Round == nil || all.Commit == nil || all.Prune == nil || all.Refresh == nil {
		t.Fatalf("ExpVar implements every optional interface, got %+v", all)
	}
	core := NewObservers(onlyCore{})
	if core.Queue != nil || core.Round != nil || core.Commit != nil || core.Prune != nil || core.Refresh != nil {
		t.Fatalf("a core-only Metrics has no optional interface, got %+v", core)
	}
	if core.Metrics == nil {
		t.Fatal("the core Metrics is kept")
	}
}
