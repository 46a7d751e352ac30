package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// A failing object with earlier distinct errors is marked in the text
// view; one with a single error shows as before. --json has every record.
func TestErrorHistoryShown(t *testing.T) {
	rep := sample()
	hist := []tables.ErrorRecord{
		{Error: "write blocked: no space", At: sampleNow.Add(-40 * time.Second), Attempt: 2},
		{Error: "write blocked: \x1b[2Jpermission denied", At: sampleNow.Add(-20 * time.Second), Attempt: 4},
		{Error: rep.Retries[0].LastError, At: sampleNow.Add(-time.Second), Attempt: 6},
	}
	rep.Retries = append(rep.Retries, &tables.RetryInfo{
		Reconciler: "files", Key: "other", Attempts: 1, NextAttempt: sampleNow.Add(time.Second), LastError: "one error",
		Errors: []tables.ErrorRecord{{Error: "one error", At: sampleNow, Attempt: 1}},
	})
	rep.Retries[0].Errors = hist

	var b bytes.Buffer
	require.NoError(t, rep.writeText(&b, sampleNow))
	lines := strings.Split(b.String(), "\n")
	var blocked, other string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "blocked  "):
			blocked = l
		case strings.Contains(l, "other  "):
			other = l
		}
	}
	assert.True(t, strings.HasSuffix(blocked, "remove it or use another name (+2 earlier)"), "marked: %q", blocked)
	assert.True(t, strings.HasSuffix(other, "one error"), "a single error is not marked: %q", other)

	b.Reset()
	require.NoError(t, rep.writeJSON(&b, true))
	var got report
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Len(t, got.Retries, 2)
	require.Len(t, got.Retries[0].Errors, 3)
	for i, e := range got.Retries[0].Errors {
		assert.Equal(t, hist[i].Error, e.Error, "the text as it is, escaped in the JSON")
		assert.True(t, hist[i].At.Equal(e.At))
		assert.Equal(t, hist[i].Attempt, e.Attempt)
	}
	assert.NotContains(t, b.String(), "\x1b", "control characters escaped")
	assert.Contains(t, b.String(), `"errors":[{"error":"write blocked: no space","at":"2026-01-02T15:03:25Z","attempt":2}`)
}

func TestEarlierErrors(t *testing.T) {
	assert.Equal(t, "", earlierErrors(&tables.RetryInfo{}), "a row without a history (an older agent)")
	assert.Equal(t, "", earlierErrors(&tables.RetryInfo{Errors: make([]tables.ErrorRecord, 1)}))
	assert.Equal(t, " (+3 earlier)", earlierErrors(&tables.RetryInfo{Errors: make([]tables.ErrorRecord, 4)}))
}
