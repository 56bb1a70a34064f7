package httpapi

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/dthrottle/dthrottle/internal/ways/serve"
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
	ln    *serve.Handoff
	start sync.Once // serves ln, once the first connection comes
}

func newConnHandler(srv *http.Server) *connHandler {
	return &connHandler{srv: srv, ln: serve.NewHandoff()}
}

// ServeConn has net/http serve nc, and returns once nc is closed.
func (h *connHandler) ServeConn(ctx context.Context, nc net.Conn) {
	h.start.Do(func() {
		go h.srv.Serve(h.ln)
		// Serve returns http.ErrServerClosed once Shutdown closes ln.
		context.AfterFunc(ctx, func() { h.srv.Shutdown(context.Background()) })
	})
	h.ln.Serve(nc)
}
