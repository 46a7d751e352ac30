package reconcilertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/hive/script"
	"github.com/cilium/hive/script/scripttest"
)

// TestScripts runs testdata/*.txtar against a real hive, StateDB and
// reconciler whose operations are a FaultyOps around a recording Target.
// A script's first line may configure it, e.g. "#! -batch -workers=4"; see
// parseFixtureFlags.
func TestScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	scripttest.Test(t, ctx, func(t testing.TB, args []string) *script.Engine {
		return newFixture(t, args).engine()
	}, nil, "testdata/*.txtar")
}
