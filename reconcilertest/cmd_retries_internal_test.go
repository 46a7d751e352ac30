package reconcilertest

import (
	"testing"
	"time"

	"github.com/converge-go/converge/tables"
)

// NEXT never shows a negative duration: once the time of the next attempt
// has passed it says "held by breaker" while the breaker is open, else
// "due".
func TestFormatRetryNext(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		next time.Time
		held bool
		want string
	}{
		{now.Add(2 * time.Second), false, "next=in 2s "},
		{now.Add(2 * time.Second), true, "next=in 2s "},
		{time.Time{}, true, "next=running "},
		{now.Add(-32 * time.Millisecond), true, "next=held by breaker "},
		{now.Add(-32 * time.Millisecond), false, "next=due "},
		{now, false, "next=due "},
	} {
		line := formatRetry(&tables.RetryInfo{Key: "k", Attempts: 2, FirstFailed: now.Add(-time.Second), NextAttempt: tc.next, LastError: "e"}, now, tc.held)
		want := "k: update attempts=2 first-failed=1s " + tc.want + "error=e"
		if line != want {
			t.Errorf("next %v, held %v: %q, want %q", tc.next, tc.held, line, want)
		}
	}
}
