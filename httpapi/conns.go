package httpapi

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// busy is the whole answer to a connection over MaxConns.
var busy = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 22\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\r\n")

// connHandler hands each connection a serve.Server accepts to one
// net/http server, through a listener of its own, and holds the
// connection's goroutine until net/http closes it, so that the connection
// keeps its place under MaxConns meanwhile. When the connections' context
// ends (shutdown began), it shuts the net/http server down: idle
// keep-alive connections are closed at once, the others after the answer
// being written. It is safe for concurrent use.
type connHandler struct {
	srv   *http.Server
	ln    *handoff
	start sync.Once // serves ln, once the first connection comes
}

func newConnHandler(srv *http.Server) *connHandler {
	return &connHandler{srv: srv, ln: newHandoff()}
}

// ServeConn has net/http serve nc, and returns once nc is closed.
func (h *connHandler) ServeConn(ctx context.Context, nc net.Conn) {
	h.start.Do(func() {
		go h.srv.Serve(h.ln)
		// Serve returns http.ErrServerClosed once Shutdown closes ln.
		context.AfterFunc(ctx, func() { h.srv.Shutdown(context.Background()) })
	})
	c := &handedConn{Conn: nc, closed: make(chan struct{})}
	if !h.ln.hand(c) {
		return // shut down
	}
	<-c.closed
}

// handoff is a net.Listener whose Accept returns the connections handed
// to it. It is safe for concurrent use.
type handoff struct {
	conns chan net.Conn
	done  chan struct{} // closed by Close
	once  sync.Once
}

func newHandoff() *handoff {
	return &handoff{conns: make(chan net.Conn), done: make(chan struct{})}
}

// hand passes c to Accept, reporting false if the listener is closed.
func (l *handoff) hand(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoff) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the address of no socket: the connections come from the
// listeners of a serve.Server.
func (l *handoff) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "handoff" }

// handedConn tells the connection's goroutine when net/http closes it.
// Like the accepted connection it stands for, it offers net.Conn's
// methods only.
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
