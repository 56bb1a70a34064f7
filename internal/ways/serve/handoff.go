package serve

import (
	"net"
	"sync"
)

// This file owns the way in for a protocol whose library runs its own
// accept loop (net/http, gRPC): a Handoff is the listener that library
// serves, fed the connections a Server accepts, so that the Server's
// limit, busy answer and shutdown still hold for them.

// Handoff is a net.Listener whose Accept returns the connections handed
// to it by Serve. It is safe for concurrent use.
type Handoff struct {
	conns chan net.Conn
	done  chan struct{} // closed by Close
	once  sync.Once
}

// NewHandoff returns an open Handoff.
func NewHandoff() *Handoff {
	return &Handoff{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Serve hands nc to the next Accept and returns once whoever accepted it
// closes it, so that a Handler's ServeConn that calls it holds the
// connection's place under the Server's limit meanwhile; or at once, with
// nc left to the caller, when the Handoff is closed first.
func (l *Handoff) Serve(nc net.Conn) {
	c := &handedConn{Conn: nc, closed: make(chan struct{})}
	select {
	case l.conns <- c:
		<-c.closed
	case <-l.done:
	}
}

// Accept returns the next connection handed over, or net.ErrClosed once
// the Handoff is closed.
func (l *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Serve return. Safe to call more than once.
func (l *Handoff) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the address of no socket: the connections come from the
// listeners of a Server.
func (l *Handoff) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "handoff" }

// handedConn tells Serve when the connection is closed. Like the accepted
// connection it stands for, it offers net.Conn's methods only.
type handedConn struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
}

func (c *handedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}
