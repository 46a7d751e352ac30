package reconcilertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/hive/script"
	"github.com/cilium/hive/script/scripttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestRestart runs the restart example and checks from Go what it shows:
// one new hive was built, and the target, which outlived both, ends with
// exactly what the repopulated table wants.
func TestRestart(t *testing.T) {
	var f *fixture
	scripttest.Test(t, context.Background(), func(t testing.TB, args []string) *script.Engine {
		f = newFixture(t, args)
		return f.engine()
	}, nil, "testdata/restart.txtar", scripttest.NoParallel)
	require.NotNil(t, f)
	assert.Equal(t, 1, f.restarter.Restarts())
	assert.Equal(t, map[string]string{"a": "1"}, f.target.State())
}
