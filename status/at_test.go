package status_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/converge-go/converge/status"
)

func TestConstructorsAt(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		st       status.Status
		kind     status.Kind
		err      string
		terminal bool
	}{
		{status.PendingAt(at), status.KindPending, "", false},
		{status.RefreshingAt(at), status.KindRefreshing, "", false},
		{status.DoneAt(at), status.KindDone, "", false},
		{status.ErrorAt(at, errors.New("disk full")), status.KindError, "disk full", false},
		{status.ErrorAt(at, nil), status.KindError, "<nil>", false},
		{status.TerminalErrorAt(at, errors.New("invalid")), status.KindError, "invalid", true},
		{status.TerminalErrorAt(at, nil), status.KindError, "<nil>", true},
	}
	seen := map[uint64]bool{}
	for _, c := range cases {
		assert.Equal(t, c.kind, c.st.Kind)
		assert.True(t, at.Equal(c.st.UpdatedAt))
		assert.Equal(t, c.err, c.st.Error)
		assert.Equal(t, c.terminal, c.st.Terminal)
		assert.NotZero(t, c.st.ID())
		assert.False(t, seen[c.st.ID()], "identities are fresh even at one time")
		seen[c.st.ID()] = true
	}
}
