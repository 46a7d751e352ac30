//go:build race

package reconciler_test

// raceEnabled reports whether the tests are built with -race; code built
// for them in a temporary module is built the same way, to reuse the
// build cache.
const raceEnabled = true
