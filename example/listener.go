package main

import (
	"net"
	"sync"
)

// maxConns bounds the connections the API serves at once. Another user of
// the machine can open connections to a loopback address too, and each
// costs a goroutine and buffers until its header timeout: beyond the
// bound, a connection waits in the kernel's queue until one closes.
const maxConns = 128

// connLimit replaces maxConns, in tests.
type connLimit int

// limitListener is a net.Listener that accepts at most cap(slots)
// connections open at once: Accept waits for one to close. Its methods
// are safe for concurrent use.
type limitListener struct {
	net.Listener
	slots  chan struct{} // one element per open connection
	once   sync.Once
	closed chan struct{} // closed by Close
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits until fewer than the limit of connections are open, then
// accepts one. Close ends the wait.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	conn, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: conn, release: func() { <-l.slots }}, nil
}

// Close closes the listener, and ends the wait of an Accept.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitConn gives its slot back once closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
