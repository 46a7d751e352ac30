package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/tables"
)

// benchFiles is the number of files BenchmarkHundredThousandFiles writes,
// unless EXAMPLE_BENCH_FILES sets another.
const benchFiles = 100_000

// BenchmarkHundredThousandFiles writes 100,000 files through the API (16
// clients at once) into a new directory, waits until every one is Done,
// then restarts the example with its initial set only and waits for the
// first prune, which removes them all. It reports files written per
// second, from the first PUT to the last Done, and the seconds from the
// restart to the end of the prune. Everything happens in the benchmark's
// temporary directory. Run it once:
//
//	go test -run '^$' -bench HundredThousandFiles -benchtime 1x ./example/
func BenchmarkHundredThousandFiles(b *testing.B) {
	n := benchFiles
	if s := os.Getenv("EXAMPLE_BENCH_FILES"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err)
	}
	for b.Loop() {
		written, restart, pruned := writeAndPrune(b, n)
		b.ReportMetric(float64(n)/written.Seconds(), "files-written/s")
		b.ReportMetric(restart.Seconds(), "s-restart")
		b.ReportMetric(pruned.Seconds(), "s-to-pruned")
		b.ReportMetric(float64(n)/pruned.Seconds(), "files-pruned/s")
	}
}

// writeAndPrune writes n files through the API, restarts the example and
// waits until its first prune removed them. It returns the time to write
// them, the time the restart took (the journal read), and the time from
// the restart to the end of the prune.
func writeAndPrune(b *testing.B, n int) (written, restart, pruned time.Duration) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := testConfig()
	cfg.PruneInterval = time.Hour
	a := startAppLogging(b, quiet, cfg, nil)
	a.waitReconciled()

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				name := fmt.Sprintf("file-%06d", i)
				req, err := http.NewRequest(http.MethodPut, a.base+"/files/"+name, strings.NewReader(name+"\n"))
				if err == nil {
					req.Header.Set("Authorization", "Bearer "+a.token)
					var resp *http.Response
					if resp, err = a.client.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusCreated {
							err = fmt.Errorf("PUT %s: %s", name, resp.Status)
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	require.NoError(b, reconciler.WaitForReconciliation(ctx, a.db, a.files, statusIndex))
	written = time.Since(start)
	entries, err := os.ReadDir(a.dir)
	require.NoError(b, err)
	require.Len(b, entries, n+len(initialNames)+1) // and the state directory
	a.stop()

	cfg.Dir = a.dir
	start = time.Now()
	r := startAppLogging(b, quiet, cfg, nil)
	restart = time.Since(start)
	info := r.waitInfoFor(30*time.Minute, "the first prune", func(i *tables.Info) bool { return !i.LastPrune.IsZero() })
	pruned = time.Since(start)
	require.Empty(b, info.LastPruneError)
	require.Equal(b, uint64(n), info.DriftRepaired)
	require.Equal(b, initialNames, r.dirNames())
	require.ElementsMatch(b, initialNames, journalNames(b, r.dir))
	return written, restart, pruned
}
