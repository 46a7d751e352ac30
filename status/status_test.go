package status_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/status"
)

func TestConstructors(t *testing.T) {
	tests := []struct {
		name    string
		build   func() status.Status
		kind    status.Kind
		errText string
	}{
		{"Pending", status.Pending, status.KindPending, ""},
		{"Refreshing", status.Refreshing, status.KindRefreshing, ""},
		{"Done", status.Done, status.KindDone, ""},
		{"Error", func() status.Status { return status.Error(errors.New("disk full")) }, status.KindError, "disk full"},
		{"ErrorWrapped", func() status.Status {
			return status.Error(fmt.Errorf("apply: %w", errors.New("disk full")))
		}, status.KindError, "apply: disk full"},
		{"ErrorNil", func() status.Status { return status.Error(nil) }, status.KindError, "<nil>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			st := tc.build()
			after := time.Now()

			assert.Equal(t, tc.kind, st.Kind)
			assert.Equal(t, tc.errText, st.Error)
			assert.False(t, st.UpdatedAt.Before(before), "UpdatedAt %v before %v", st.UpdatedAt, before)
			assert.False(t, st.UpdatedAt.After(after), "UpdatedAt %v after %v", st.UpdatedAt, after)
			assert.NotZero(t, st.ID())

			// Every call is a new write with its own identity.
			again := tc.build()
			assert.NotZero(t, again.ID())
			assert.NotEqual(t, st.ID(), again.ID())
			assert.Equal(t, st.Kind, again.Kind)
		})
	}
}

func TestIDsAreDistinctAcrossConstructors(t *testing.T) {
	seen := map[uint64]bool{}
	for range 100 {
		for _, st := range []status.Status{
			status.Pending(), status.Refreshing(), status.Done(),
			status.Error(errors.New("x")), status.Error(nil),
		} {
			require.NotZero(t, st.ID())
			require.False(t, seen[st.ID()], "identity %d handed out twice", st.ID())
			seen[st.ID()] = true
		}
	}
}

func TestIDsAreDistinctConcurrently(t *testing.T) {
	const goroutines, perGoroutine = 4, 500
	ids := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perGoroutine {
				ids[g] = append(ids[g], status.Pending().ID(), status.NewSet().Get("x").ID())
			}
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for _, list := range ids {
		for _, id := range list {
			require.NotZero(t, id)
			require.False(t, seen[id], "identity %d handed out twice", id)
			seen[id] = true
		}
	}
	assert.Len(t, seen, goroutines*perGoroutine*2)
}

func TestZeroStatus(t *testing.T) {
	var st status.Status
	assert.Equal(t, status.KindUnset, st.Kind)
	assert.Zero(t, st.ID())
	assert.True(t, st.UpdatedAt.IsZero())
	assert.Empty(t, st.Error)
	assert.False(t, st.IsPendingOrRefreshing())
	assert.Equal(t, "Unset", st.String())
}

func TestCopiesShareIdentity(t *testing.T) {
	st := status.Pending()
	cp := st
	assert.Equal(t, st.ID(), cp.ID(), "a copied status is the same write")
	// A status literal never carries an identity.
	lit := status.Status{Kind: st.Kind, UpdatedAt: st.UpdatedAt}
	assert.Zero(t, lit.ID())
}

func TestIsPendingOrRefreshing(t *testing.T) {
	tests := []struct {
		st   status.Status
		want bool
	}{
		{status.Status{}, false},
		{status.Pending(), true},
		{status.Refreshing(), true},
		{status.Done(), false},
		{status.Error(errors.New("x")), false},
		{status.Status{Kind: status.KindPending}, true},
		{status.Status{Kind: status.KindRefreshing}, true},
		{status.Status{Kind: status.Kind(9)}, false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.st.IsPendingOrRefreshing(), "%s", tc.st.Kind)
	}
}

func TestStatusString(t *testing.T) {
	fiveMinAgo := time.Now().Add(-5*time.Minute - 10*time.Second)
	threeHoursAgo := time.Now().Add(-3*time.Hour - 10*time.Minute)
	tests := []struct {
		name string
		st   status.Status
		want string
	}{
		{"zero", status.Status{}, "Unset"},
		{"unset with time", status.Status{UpdatedAt: fiveMinAgo}, "Unset"},
		{"pending", status.Status{Kind: status.KindPending, UpdatedAt: fiveMinAgo}, "Pending (5m ago)"},
		{"refreshing", status.Status{Kind: status.KindRefreshing, UpdatedAt: threeHoursAgo}, "Refreshing (3h ago)"},
		{"done", status.Status{Kind: status.KindDone, UpdatedAt: fiveMinAgo}, "Done (5m ago)"},
		{"error", status.Status{Kind: status.KindError, UpdatedAt: fiveMinAgo, Error: "disk full"}, "Error: disk full (5m ago)"},
		{"days", status.Status{Kind: status.KindDone, UpdatedAt: time.Now().Add(-73 * time.Hour)}, "Done (3d ago)"},
		{"unknown kind", status.Status{Kind: status.Kind(7), UpdatedAt: fiveMinAgo}, "Kind(7) (5m ago)"},
		// A status without a time says so rather than "never ago".
		{"done without time", status.Status{Kind: status.KindDone}, "Done"},
		{"error without time", status.Status{Kind: status.KindError, Error: "boom"}, "Error: boom"},
		{"terminal error", status.Status{Kind: status.KindError, UpdatedAt: fiveMinAgo, Error: "invalid", Terminal: true}, "Error (terminal): invalid (5m ago)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.st.String())
		})
	}
}

func TestStatusStringFresh(t *testing.T) {
	// A status just built reads as a few milliseconds old at most.
	assert.Regexp(t, `^Pending \((0s|\d+ms) ago\)$`, status.Pending().String())
	assert.Regexp(t, `^Error: <nil> \((0s|\d+ms) ago\)$`, status.Error(nil).String())
}

func TestTerminalError(t *testing.T) {
	before := time.Now()
	s := status.TerminalError(errors.New("invalid"))
	assert.Equal(t, status.KindError, s.Kind)
	assert.True(t, s.Terminal)
	assert.Equal(t, "invalid", s.Error)
	assert.Equal(t, "invalid", s.GetError())
	assert.False(t, s.UpdatedAt.Before(before))
	assert.NotZero(t, s.ID())
	assert.NotEqual(t, s.ID(), status.TerminalError(errors.New("invalid")).ID(), "each call a fresh identity")
}
