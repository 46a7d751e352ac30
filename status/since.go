package status

import (
	"fmt"
	"time"
)

// since formats the time elapsed since t compactly: "0s", "250ms", "12.3s",
// "5m", "3h", "2d". It exists so that table output stays short.
func since(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < time.Millisecond:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// ago formats the age of t as a suffix such as " (3s ago)", or returns ""
// when t is zero (a status or set without a time) rather than the
// nonsensical " (never ago)".
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " (" + since(t) + " ago)"
}
