package convergeotel_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/reconcilertest"
)

var (
	module   = attribute.String("converge.module", "test")
	name     = attribute.String("converge.reconciler", "r")
	success  = attribute.String("converge.outcome", "success")
	attempt1 = attribute.Int("converge.attempt", 1)
	attempt2 = attribute.Int("converge.attempt", 2)
	keyA     = attribute.String("converge.key", "a")
)

func revision(rev uint64) attribute.KeyValue { return attribute.Int64("converge.revision", int64(rev)) }

// An update and a delete, inline and on workers: one span each, a root,
// with the object's key, revision and attempt, succeeded; the span a user's
// operation starts with its context is their child; rounds count what they
// collected and committed.
func TestOperationSpans(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			f := start(t, false, reconciler.WithConcurrency(workers))
			inserted := f.insert(t, "a")
			f.reconciled(t)
			deleted := f.delete(t, "a")
			f.reconciled(t)

			upd := f.spans.waitSpan(t, "converge.update", module, name, keyA, revision(inserted), attempt1, success)
			del := f.spans.waitSpan(t, "converge.delete", module, name, keyA, revision(deleted), attempt1, success)
			spans := f.spans.waitFor(t, "rounds that committed both", func(spans []sdktrace.ReadOnlySpan) bool {
				return sum(spans, "converge.round", "converge.round.committed") == 2
			})
			for _, s := range []sdktrace.ReadOnlySpan{upd, del} {
				assert.Equal(t, trace.SpanKindInternal, s.SpanKind())
				assert.False(t, s.Parent().IsValid(), "%s is the root of its trace", s.Name())
				assert.Equal(t, codes.Unset, s.Status().Code)
				assert.Empty(t, s.Events())
				assert.NotContains(t, attrs(s), attribute.Key("error.type"))
				assert.Equal(t, "github.com/converge-go/converge/tracing/otel", s.InstrumentationScope().Name)
			}
			assertChildOf(t, first(spans, "user.update"), upd)
			assertChildOf(t, first(spans, "user.delete"), del)

			assert.EqualValues(t, 2, sum(spans, "converge.round", "converge.round.collected"))
			assert.EqualValues(t, 0, sum(spans, "converge.round", "converge.round.failed"))
			round := first(spans, "converge.round")
			assert.Equal(t, trace.SpanKindInternal, round.SpanKind())
			assert.False(t, round.Parent().IsValid(), "a round is the root of its trace")
			assert.Equal(t, module.Value, attrs(round)[module.Key])
			assert.Equal(t, name.Value, attrs(round)[name.Key])
		})
	}
}

// A failed operation's span has the outcome, the status Error with the
// error's message, error.type and an exception event; the retry's span
// says attempt 2. A terminal error is not retried.
func TestFailedOperationSpans(t *testing.T) {
	for _, tc := range []struct {
		mode    reconcilertest.Mode
		outcome string
		message string // in the status description
		opts    []reconciler.Option
	}{
		{mode: reconcilertest.ModeError, outcome: "error", message: "injected fault"},
		{mode: reconcilertest.ModePanic, outcome: "panic", message: "panic"},
		{mode: reconcilertest.ModeDelay, outcome: "timeout", message: "deadline exceeded",
			opts: []reconciler.Option{reconciler.WithOperationTimeout(20 * time.Millisecond)}},
		{mode: reconcilertest.ModeTerminal, outcome: "terminal", message: "injected fault"},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			f := start(t, false, tc.opts...)
			require.NoError(t, f.faults.Inject(reconcilertest.Fault{Mode: tc.mode, Key: "a", Next: 1}))
			inserted := f.insert(t, "a")

			failed := f.spans.waitSpan(t, "converge.update", keyA, revision(inserted), attempt1,
				attribute.String("converge.outcome", tc.outcome))
			assert.Equal(t, codes.Error, failed.Status().Code)
			assert.Contains(t, failed.Status().Description, tc.message)
			assert.Equal(t, tc.outcome, attrs(failed)["error.type"].AsString())
			require.Len(t, failed.Events(), 1)
			ev := failed.Events()[0]
			assert.Equal(t, "exception", ev.Name)
			var msg string
			for _, kv := range ev.Attributes {
				if kv.Key == "exception.message" {
					msg = kv.Value.AsString()
				}
			}
			assert.Equal(t, failed.Status().Description, msg, "the event records the error")

			spans := f.spans.waitFor(t, "the round that committed the failure", func(spans []sdktrace.ReadOnlySpan) bool {
				return first(spans, "converge.round", attribute.Int("converge.round.failed", 1)) != nil
			})
			assertChildOf(t, first(spans, "user.update"), failed)
			if tc.mode == reconcilertest.ModeTerminal {
				return
			}
			// The retry is of the object as the failure's status left it.
			retry := f.spans.waitSpan(t, "converge.update", keyA, attempt2, success)
			assert.Equal(t, codes.Unset, retry.Status().Code)
			assert.Greater(t, attrs(retry)["converge.revision"].AsInt64(), int64(inserted))
			assert.NotEqual(t, failed.SpanContext().TraceID(), retry.SpanContext().TraceID(), "each attempt is a trace of its own")
		})
	}
}

// A batch call's span has the number of entries and of those that failed;
// it succeeded as a call. One that panicked failed as a whole.
func TestBatchSpans(t *testing.T) {
	f := start(t, true)
	require.NoError(t, f.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Key: "b", Next: 1}))
	f.insert(t, "a", "b", "c")
	f.reconciled(t)

	batch := f.spans.waitSpan(t, "converge.update_batch", module, name,
		attribute.Int("converge.batch.size", 3), attribute.Int("converge.batch.failed", 1), success)
	assert.Equal(t, codes.Unset, batch.Status().Code, "the call succeeded; an entry failed")
	assert.False(t, batch.Parent().IsValid())
	for _, k := range []attribute.Key{"converge.key", "converge.revision", "converge.attempt", "error.type"} {
		assert.NotContains(t, attrs(batch), k)
	}
	f.spans.waitSpan(t, "converge.update_batch", attribute.Int("converge.batch.size", 1), attribute.Int("converge.batch.failed", 0), success)
	spans, _ := f.spans.ended()
	assertChildOf(t, first(spans, "user.update_batch"), batch)

	f.delete(t, "a", "c")
	del := f.spans.waitSpan(t, "converge.delete_batch", attribute.Int("converge.batch.size", 2), attribute.Int("converge.batch.failed", 0), success)
	spans, _ = f.spans.ended()
	assertChildOf(t, first(spans, "user.delete_batch"), del)

	require.NoError(t, f.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModePanic, Key: "d", Next: 1}))
	f.insert(t, "d")
	panicked := f.spans.waitSpan(t, "converge.update_batch", attribute.Int("converge.batch.size", 1),
		attribute.Int("converge.batch.failed", 1), attribute.String("converge.outcome", "panic"))
	assert.Equal(t, codes.Error, panicked.Status().Code)
	assert.Contains(t, panicked.Status().Description, "panic")
	assert.Equal(t, "panic", attrs(panicked)["error.type"].AsString())
	assert.Len(t, panicked.Events(), 1)
}

// A prune's span is a child of the round that ran it and counts the drift
// repaired; the user's span is its child. A failed prune's span says so.
func TestPruneSpans(t *testing.T) {
	f := start(t, false)
	f.insert(t, "a")
	f.reconciled(t)
	f.target.Set("stray", "x")
	f.rec.Prune()

	prune := f.spans.waitSpan(t, "converge.prune", module, name, success, attribute.Int("converge.prune.repaired", 1))
	assert.Equal(t, codes.Unset, prune.Status().Code)
	spans := f.spans.waitFor(t, "the round of the prune", func(spans []sdktrace.ReadOnlySpan) bool {
		for s := range matching(spans, "converge.round") {
			if s.SpanContext().SpanID() == prune.Parent().SpanID() {
				return true
			}
		}
		return false
	})
	var round sdktrace.ReadOnlySpan
	for s := range matching(spans, "converge.round") {
		if s.SpanContext().SpanID() == prune.Parent().SpanID() {
			round = s
		}
	}
	assertChildOf(t, prune, round)
	assertChildOf(t, first(spans, "user.prune"), prune)

	require.NoError(t, f.faults.Inject(reconcilertest.Fault{Mode: reconcilertest.ModeError, Op: reconcilertest.OpPrune, Next: 1}))
	f.rec.Prune()
	failed := f.spans.waitSpan(t, "converge.prune", attribute.String("converge.outcome", "error"))
	assert.Equal(t, codes.Error, failed.Status().Code)
	assert.Contains(t, failed.Status().Description, "injected fault")
	assert.Equal(t, "error", attrs(failed)["error.type"].AsString())
	// Tried again after the backoff.
	f.spans.waitFor(t, "a prune after the failed one", func(spans []sdktrace.ReadOnlySpan) bool {
		return len(slices.Collect(matching(spans, "converge.prune", success))) == 2
	})
}

// A refresh sweep's span counts the objects it marked Refreshing; the
// update that follows is an operation like any other.
func TestRefreshSpans(t *testing.T) {
	f := start(t, false, reconciler.WithRefreshing(10*time.Millisecond, nil))
	f.insert(t, "a")
	sweep := f.spans.waitSpan(t, "converge.refresh", module, name, attribute.Int("converge.refresh.marked", 1))
	assert.False(t, sweep.Parent().IsValid(), "a sweep is the root of its trace")
	assert.Equal(t, codes.Unset, sweep.Status().Code)
	assert.NotContains(t, attrs(sweep), attribute.Key("converge.outcome"))
	f.spans.waitFor(t, "the update of the object refreshed", func(spans []sdktrace.ReadOnlySpan) bool {
		return len(slices.Collect(matching(spans, "converge.update", keyA, success))) >= 2
	})
}
