package main

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// A client that resolves "localhost" may send its request, and the token
// in it, to ::1 or to 127.0.0.1, whichever its resolver and the hosts
// file list first. Whoever listens on the other loopback address at the
// API's port gets the token: any local user can bind [::1]:8080 while the
// example holds 127.0.0.1:8080. So the example holds both: listenAPI binds
// the address of --addr and its loopback twin at the same port, and
// refuses to start if either is taken.

// loopbackTwin returns the address at which another program could listen
// on the same port to receive the requests of clients of host: the other
// loopback address for a loopback host or localhost, and ::1 for
// 0.0.0.0, which holds the IPv4 addresses only. It returns "" for other
// hosts: the empty host and "::" listen on both families already.
func loopbackTwin(host string) (primary, twin string) {
	switch host {
	case "localhost", "127.0.0.1":
		return "127.0.0.1", "::1"
	case "::1":
		return "::1", "127.0.0.1"
	case "0.0.0.0":
		return "0.0.0.0", "::1"
	}
	return host, ""
}

// maxPortTries bounds the ports tried for --addr HOST:0 until one is free
// on both addresses.
const maxPortTries = 20

// listenAPI listens on addr and on its loopback twin (see loopbackTwin),
// at the same port: with port 0, the first port free on both. It fails if
// the twin's port is taken, naming it. Where the machine has no such
// address (no IPv6), nobody can listen there, and addr alone is held.
func listenAPI(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	primary, twin := loopbackTwin(host)
	if twin == "" {
		return net.Listen("tcp", addr)
	}
	for range maxPortTries {
		ln, err := net.Listen("tcp", net.JoinHostPort(primary, port))
		if err != nil {
			return nil, err
		}
		_, got, _ := net.SplitHostPort(ln.Addr().String())
		other, err := net.Listen("tcp", net.JoinHostPort(twin, got))
		switch {
		case err == nil:
			return newPairListener(ln, other), nil
		case errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT):
			return ln, nil // no such address here: nobody can listen there
		}
		ln.Close()
		if port != "0" || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s is in use by another program: clients that resolve localhost to %s would send it their requests and the token; "+
				"stop that program, or choose another port: %w", net.JoinHostPort(twin, got), twin, err)
		}
	}
	return nil, fmt.Errorf("found no port free on both %s and %s in %d tries", primary, twin, maxPortTries)
}

// pairListener accepts the connections of two listeners as one: Addr is
// the first one's. Its methods are safe for concurrent use.
type pairListener struct {
	lns     [2]net.Listener
	results chan accepted
	closed  chan struct{} // closed by Close

	mu      sync.Mutex // guards started and closing, so that no wg.Add follows Close's wg.Wait
	started bool
	closing bool
	wg      sync.WaitGroup
}

type accepted struct {
	conn net.Conn
	err  error
}

func newPairListener(a, b net.Listener) *pairListener {
	return &pairListener{lns: [2]net.Listener{a, b}, results: make(chan accepted), closed: make(chan struct{})}
}

// Accept returns the next connection of either listener. The first call
// starts accepting on both.
func (p *pairListener) Accept() (net.Conn, error) {
	p.mu.Lock()
	if !p.started && !p.closing {
		p.started = true
		for _, ln := range p.lns {
			p.wg.Add(1)
			go p.accept(ln)
		}
	}
	p.mu.Unlock()
	select {
	case r := <-p.results:
		return r.conn, r.err
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

// accept hands ln's connections, and its errors, to Accept until Close.
func (p *pairListener) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		select {
		case p.results <- accepted{conn, err}:
		case <-p.closed:
			if conn != nil {
				conn.Close()
			}
			return
		}
	}
}

// Close closes both listeners, and waits until nothing accepts on them.
func (p *pairListener) Close() error {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		close(p.closed)
	}
	p.mu.Unlock()
	err := errors.Join(p.lns[0].Close(), p.lns[1].Close())
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil // closed before
	}
	return err
}

func (p *pairListener) Addr() net.Addr { return p.lns[0].Addr() }
