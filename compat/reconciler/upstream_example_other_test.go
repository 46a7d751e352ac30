//go:build !linux

package reconciler_test

import "testing"

// runExample does not run the example outside Linux: it serves HTTP on
// 127.0.0.1:8080, which it does not let anyone change, and only a private
// network namespace keeps others from reaching it.
func runExample(t *testing.T, bin string) {
	t.Skip("skipped: the example serves HTTP on 127.0.0.1:8080 and is run only in a private Linux network namespace; it was built and vetted")
}
