package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exportedSpan is what a test reads of a span stdouttrace wrote.
type exportedSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Resource []struct {
		Key   string
		Value struct{ Value any }
	}
}

func (s exportedSpan) attr(key string) any {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.Value
		}
	}
	return nil
}

// With --trace-stdout the example writes the reconciler's spans to
// standard output, one JSON object a line, the last ones as it stops;
// without, nothing.
func TestTraceStdout(t *testing.T) {
	for _, traced := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[traced], func(t *testing.T) {
			t.Chdir(t.TempDir())
			args := []string{"--dir", "target", "--addr", "127.0.0.1:0", "--prune", "0"}
			if traced {
				args = append(args, "--trace-stdout")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, &stdout, &stderr) }()
			// The initial set is written as the reconciler starts; a span
			// waits for a second at most.
			require.Eventually(t, func() bool {
				return strings.Contains(stderr.String(), "converge example: reconciling into") &&
					(!traced || strings.Contains(stdout.String(), `"converge.update"`))
			}, waitFor, 5*time.Millisecond, "stderr:\n%s\nstdout:\n%s", &stderr, &stdout)
			cancel()
			select {
			case code := <-done:
				require.Equal(t, exitOK, code, stderr.String())
			case <-time.After(waitFor):
				t.Fatal("run did not return after its context ended")
			}
			if !traced {
				require.Empty(t, stdout.String())
				return
			}

			var spans []exportedSpan
			lines := bufio.NewScanner(strings.NewReader(stdout.String()))
			lines.Buffer(nil, 1<<20)
			for lines.Scan() {
				var s exportedSpan
				require.NoError(t, json.Unmarshal(lines.Bytes(), &s), "a line of JSON: %s", lines.Text())
				spans = append(spans, s)
			}
			require.NoError(t, lines.Err())
			names := map[string]int{}
			for _, s := range spans {
				names[s.Name]++
				assert.Equal(t, "files", s.attr("converge.module"), "%s: the reconciler's module", s.Name)
				service := ""
				for _, kv := range s.Resource {
					if kv.Key == "service.name" {
						service, _ = kv.Value.Value.(string)
					}
				}
				assert.Equal(t, "converge-example", service)
			}
			t.Logf("spans: %v", names)
			assert.Positive(t, names["converge.update"])
			assert.Positive(t, names["converge.round"])
			assert.Positive(t, names["converge.refresh"], "the first sweep, at the start")
			for _, s := range spans {
				if s.Name == "converge.update" {
					assert.NotEmpty(t, s.attr("converge.key"))
					assert.Equal(t, "success", s.attr("converge.outcome"))
				}
			}
		})
	}
}
