//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package main

import "os"

// lockFile does not lock: flock is not available here, and a second
// example on the same directory is not detected.
func lockFile(*os.File) error { return nil }
