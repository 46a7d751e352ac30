//go:build !unix

package main

// openNoBlock adds nothing where there are no named pipes to wait for.
const openNoBlock = 0
