package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/hive/script/scripttest"
)

// TestOutsider46Scripts runs ../testdata/outsider46/*.txtar with the engine
// of TestScripts (the first line configures it, as there).
func TestOutsider46Scripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	scripttest.Test(t, ctx, newScriptEngine, nil, "../testdata/outsider46/*.txtar")
}
