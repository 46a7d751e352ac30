package report

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/hive/cell"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-go/converge/tables"
)

// The count of "N error(s)" is the number of failing objects, plus one for
// each failure that is no object's; the open breaker's error is one of the
// objects' failures, not one more (a user saw "4 error(s)" with 3 objects
// failing).
func TestHealthCountsFailingObjects(t *testing.T) {
	errTarget, errPrune := errors.New("target down"), errors.New("prune failed")
	retryErrors := func(n int) func(int) []error {
		return func(limit int) []error {
			var errs []error
			for i := range min(n, limit) {
				errs = append(errs, fmt.Errorf("k%d: %w", i, errTarget))
			}
			return errs
		}
	}
	for _, tc := range []struct {
		state HealthState
		want  string
	}{
		{HealthState{Failing: 3}, "3 error(s): 3 object(s) failing"},
		{HealthState{Failing: 3, BreakerErr: errTarget}, "3 error(s): target failing, 3 object(s) failing"},
		{HealthState{Failing: 3, BreakerErr: errTarget, PruneErr: errPrune}, "4 error(s): target failing, 3 object(s) failing, prune failed"},
		{HealthState{BreakerErr: errTarget}, "1 error(s): target failing"},
		{HealthState{PruneErr: errPrune}, "1 error(s): prune failed"},
	} {
		health, simple := cell.NewSimpleHealth()
		h := NewHealth(health)
		assert.Equal(t, tables.StateDegraded, h.Update(tc.state, func() int { return 10 }, retryErrors(tc.state.Failing)))
		require.Equal(t, cell.StatusDegraded, simple.Level)
		assert.Equal(t, tc.want, simple.Status, "%+v", tc.state)
	}
}
