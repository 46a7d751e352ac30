//go:build unix

package main

import "syscall"

// openNoBlock opens a named pipe without waiting for its writer; a
// regular file is read as without it.
const openNoBlock = syscall.O_NONBLOCK
