package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// sampleNow and sample are the state shown in the README and in
// docs/observability.md: the example with a file it cannot write (a
// directory has its name), as the end-to-end test in example/ makes it.
var sampleNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

func sample() report {
	return report{
		Reconcilers: []*tables.Info{{
			ID: "files", Module: "files", State: tables.StateDegraded,
			Objects: 4, Succeeded: 9, Failed: 6, FailuresSinceSuccess: 6, Retrying: 1, Workers: 16,
			LastError:     "write blocked: exists and the example did not write it: remove it or use another name",
			LastErrorAt:   sampleNow.Add(-1800 * time.Millisecond),
			OldestPending: sampleNow.Add(-41 * time.Second),
			LastPrune:     sampleNow.Add(-6 * time.Second),
		}},
		Retries: []*tables.RetryInfo{{
			Reconciler: "files", Key: "blocked", Attempts: 6,
			FirstFailed: sampleNow.Add(-41 * time.Second), NextAttempt: sampleNow.Add(3200 * time.Millisecond),
			LastError: "write blocked: exists and the example did not write it: remove it or use another name",
		}},
		Degraded: true,
	}
}

// The sample output in the README and in docs/observability.md is what
// the command prints for the sample state.
func TestSampleOutputInDocs(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sample().writeText(&b, sampleNow))
	want := b.String()
	for _, doc := range []string{"README.md", "docs/observability.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", doc))
		require.NoError(t, err)
		m := regexp.MustCompile("(?s)<!-- inspect-output -->\n```text\n(.*?)```\n").FindSubmatch(data)
		require.NotNil(t, m, "%s has no ```text block after <!-- inspect-output -->", doc)
		require.Equal(t, want, string(m[1]), "%s: the sample output should be:\n%s", doc, want)
	}
}

func TestWriteText(t *testing.T) {
	now := sampleNow
	rep := sample()
	rep.Reconcilers = append(rep.Reconcilers,
		&tables.Info{ID: "routes/v4", Module: "routes", Name: "v4", State: tables.StatePaused, Objects: 1200, Workers: 4},
		&tables.Info{ID: "routes/v6", Module: "routes", Name: "v6", State: tables.StateDegraded, Objects: 7, Workers: 1, BusyWorkers: 1,
			LastPrune: now.Add(-90 * time.Minute), LastPruneError: "prune: netlink: permission denied"},
		&tables.Info{ID: "x\x1b[2Jy", Module: "x", State: tables.StateDegraded},
		&tables.Info{ID: "maps", Module: "maps", State: tables.StateDegraded, Retrying: 3,
			TargetFailingSince: now.Add(-time.Minute), TargetError: "target failing since 2026-11-26T12:00:00Z: update: no space left on device\x1b[2J"},
	)
	for i := range 12 {
		retry := &tables.RetryInfo{Reconciler: "routes/v6", Key: "10.0.0." + string(rune('a'+i)),
			Attempts: i + 1, Delete: i == 0, NextAttempt: now.Add(-time.Duration(i) * time.Second),
			LastError: strings.Repeat("é", 300) + "\n\t\x07"}
		if i == 1 {
			retry.NextAttempt = time.Time{} // an attempt runs
		}
		rep.Retries = append(rep.Retries, retry)
	}
	// The breaker of maps is open: a retry whose time has passed is held.
	rep.Retries = append(rep.Retries,
		&tables.RetryInfo{Reconciler: "maps", Key: "m1", Attempts: 1, NextAttempt: now.Add(-32 * time.Millisecond), LastError: "no space"},
		&tables.RetryInfo{Reconciler: "maps", Key: "m2", Attempts: 1, NextAttempt: now.Add(time.Second), LastError: "no space"})
	var b bytes.Buffer
	require.NoError(t, rep.writeText(&b, now))
	got := b.String()
	t.Logf("\n%s", got)
	lines := strings.Split(got, "\n")
	require.Regexp(t, `^routes/v4 +paused +1200 +0 +0 +4 +0 +- +-$`, lines[2])
	require.Regexp(t, `^routes/v6 +degraded +7 +0 +0 +1 +1 +- +1h30m ago, failed: prune: netlink: permission denied$`, lines[3])
	require.Regexp(t, `^x\?\[2Jy +degraded +0 +0 +0 +0 +0 +- +-$`, lines[4])
	// The reason a degraded reconciler without failures or a failed
	// prune is degraded is not in the table.
	require.Equal(t, "x?[2Jy is degraded with no failing object and no failed prune: its round limiter or start gate fails (its health says which)", lines[6])
	// A reconciler whose circuit breaker is open says so, and why.
	require.Equal(t, "maps: its circuit breaker is open, only probes start: target failing since 2026-11-26T12:00:00Z: update: no space left on device?[2J", lines[7])
	require.NotContains(t, got, "\x1b")
	require.NotContains(t, got, "\x07")
	// Ten failing objects of a reconciler at most, then a count.
	require.Len(t, regexp.MustCompile(`(?m)^routes/v6 +10\.0\.0\.`).FindAllString(got, -1), 10)
	require.Regexp(t, `(?m)^routes/v6 +10\.0\.0\.a \(delete\) +1 +due +é`, got)
	require.Regexp(t, `(?m)^routes/v6 +10\.0\.0\.b +2 +running +é`, got)
	require.Regexp(t, `(?m)^maps +m1 +1 +held by breaker +no space$`, got)
	require.Regexp(t, `(?m)^maps +m2 +1 +in 1s +no space$`, got)
	require.NotContains(t, got, "10.0.0.k")
	require.Regexp(t, `(?m)^routes/v6 +\.\.\. +and 2 more \(--json lists them all\)$`, got)
	require.Regexp(t, `(?m)^RECONCILER +FAILING OBJECT +ATTEMPTS +NEXT ATTEMPT +ERROR$`, got)
	require.Regexp(t, `(?m)^files +blocked +6 +in 3\.2s +write blocked: `, got)
	// Long errors are cut at 200 characters, control characters replaced.
	require.Contains(t, got, strings.Repeat("é", 200)+"…")
	require.NotContains(t, got, strings.Repeat("é", 201))

	b.Reset()
	require.NoError(t, report{Reconcilers: nil, filter: "nope"}.writeText(&b, now))
	require.Equal(t, "No reconciler nope.\n", b.String())
	b.Reset()
	require.NoError(t, report{}.writeText(&b, now))
	require.Equal(t, "No reconcilers.\n", b.String())
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		1234 * time.Microsecond:               "1ms",
		350 * time.Millisecond:                "350ms",
		4240 * time.Millisecond:               "4.2s",
		65*time.Second + 400*time.Millisecond: "1m5s",
		3*time.Hour + 20*time.Minute + 10*time.Second: "3h20m",
		49 * time.Hour: "49h0m",
	} {
		require.Equal(t, want, short(d), "%s", d)
	}
}
