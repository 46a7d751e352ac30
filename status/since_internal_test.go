package status

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSince(t *testing.T) {
	tests := []struct {
		ago  time.Duration
		want string
	}{
		{12*time.Second + 300*time.Millisecond + 20*time.Millisecond, "12.3s"},
		{5*time.Minute + 30*time.Second, "5m"},
		{59*time.Minute + 30*time.Second, "59m"},
		{3*time.Hour + 30*time.Minute, "3h"},
		{47*time.Hour + 30*time.Minute, "47h"},
		{50 * time.Hour, "2d"},
		{30 * 24 * time.Hour, "30d"},
		{-time.Hour, "0s"}, // in the future: clock skew reads as now
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, since(time.Now().Add(-tc.ago)), "%s ago", tc.ago)
	}
	assert.Equal(t, "never", since(time.Time{}))
	assert.Regexp(t, `^\d+ms$`, since(time.Now().Add(-500*time.Millisecond)))
}
