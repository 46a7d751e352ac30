package reconcilertest_test

import (
	"context"
	"errors"
	"iter"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

// mapTarget is a target system of a user's own, not a reconcilertest.Target:
// a map from an item's ID to its value. It is a TargetReader but not a
// TargetWriter, so reconciler/target reads it and reconciler/target/set
// refuses to change it.
type mapTarget struct {
	mu sync.Mutex
	m  map[string]string
}

var (
	_ reconciler.Operations[*item] = (*mapTarget)(nil)
	_ reconcilertest.TargetReader  = (*mapTarget)(nil)
)

func newMapTarget() *mapTarget { return &mapTarget{m: map[string]string{}} }

func (t *mapTarget) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[it.ID] = it.Value
	return nil
}

func (t *mapTarget) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, it *item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, it.ID)
	return nil
}

func (t *mapTarget) Prune(_ context.Context, _ statedb.ReadTxn, objs iter.Seq2[*item, statedb.Revision]) error {
	want := map[string]bool{}
	for it := range objs {
		want[it.ID] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.DeleteFunc(t.m, func(k, _ string) bool { return !want[k] })
	return nil
}

func (t *mapTarget) Keys() ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Keys(t.m)), nil
}

func (t *mapTarget) Get(key string) (string, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[key]
	return v, ok, nil
}

// writableMapTarget is a mapTarget that is also a TargetWriter.
type writableMapTarget struct{ *mapTarget }

var _ reconcilertest.TargetWriter = writableMapTarget{}

func (t writableMapTarget) Set(key, value string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[key] = value
}

func (t writableMapTarget) Remove(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}

// brokenTarget is a TargetReader whose reads fail.
type brokenTarget struct{}

var errUnreachable = errors.New("target unreachable")

func (brokenTarget) Keys() ([]string, error)          { return nil, errUnreachable }
func (brokenTarget) Get(string) (string, bool, error) { return "", false, errUnreachable }

// TestTargetReaderErrors: the reconciler/target commands on a TargetReader
// fail with a clear error when the target cannot be read, when --table is
// asked for without Subject.Value, and when the target is read-only; and a
// Subject cannot have both a Target and a TargetReader.
func TestTargetReaderErrors(t *testing.T) {
	f := newFixture(t, []string{"-map-target=read-only"})
	sub := newBareSubject(t, f)

	broken := sub
	broken.Name, broken.TargetReader = "broken", brokenTarget{}
	noValue := sub
	noValue.Name, noValue.TargetReader, noValue.Key = "novalue", f.mapTarget, itemKey
	reg := reconcilertest.NewRegistry()
	require.NoError(t, reconcilertest.Add(reg, broken))
	require.NoError(t, reconcilertest.Add(reg, noValue))
	r := newScriptRunner(t, &script.Engine{Cmds: reconcilertest.ScriptCommands(reg)})

	for _, tc := range []struct{ line, err string }{
		{"reconciler/target --name=broken", "reading the target's keys: target unreachable"},
		{"reconciler/target --name=broken a=1", "target unreachable"},
		{"reconciler/target --name=novalue --table", "needs Subject.Key and Subject.Value"},
		{"reconciler/target/set --name=novalue a=1", `the target of reconciler "novalue" (*reconcilertest_test.mapTarget) is read-only: reconciler/target/set needs a TargetReader that is also a reconcilertest.TargetWriter`},
		{"reconciler/target/unset --name=novalue a", "is read-only: reconciler/target/unset needs"},
	} {
		err := r.run(tc.line)
		if assert.Error(t, err, tc.line) {
			assert.Contains(t, err.Error(), tc.err, tc.line)
		}
	}
	require.NoError(t, r.run("reconciler/target --name=novalue --empty"), "the map target is readable")

	both := sub
	both.Target, both.TargetReader = f.target, f.mapTarget
	assert.ErrorContains(t, reconcilertest.Add(reg, both), "set Subject.Target or Subject.TargetReader, not both")
}

// TestTargetKeysAndGet: Target reads as a TargetReader what it holds.
func TestTargetKeysAndGet(t *testing.T) {
	tgt := reconcilertest.NewTarget(itemKey, itemValue)
	keys, err := tgt.Keys()
	require.NoError(t, err)
	assert.Empty(t, keys)
	require.NoError(t, tgt.Update(context.Background(), nil, 1, &item{ID: "b", Value: "2"}))
	tgt.Set("a", "1")
	keys, err = tgt.Keys()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, keys)
	v, found, err := tgt.Get("b")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, "2", v)
	tgt.Remove("b")
	_, found, err = tgt.Get("b")
	require.NoError(t, err)
	assert.False(t, found)
}
