//go:build !linux

package main

import "net"

// checkAgentPeer accepts every agent: this system does not tell who
// serves a socket.
func checkAgentPeer(net.Conn) error { return nil }
