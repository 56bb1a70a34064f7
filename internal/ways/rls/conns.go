package rls

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/dthrottle/dthrottle/internal/ways/h2watch"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// connHandler hands each connection a serve.Server accepts to one gRPC
// server, through a listener of its own, and holds the connection's
// goroutine until the gRPC server closes it, so that the connection
// keeps its place under MaxConns meanwhile. When the connections' context
// ends (the stop began), it turns the health service to NOT_SERVING and
// stops the gRPC server gracefully: every connection is sent GOAWAY, the
// requests in progress are answered, then the connections are closed. It
// is safe for concurrent use.
type connHandler struct {
	srv   *grpc.Server
	ln    *serve.Handoff
	stop  func() // called once the stop begins, before the gRPC server stops
	dog   *h2watch.Watchdog
	start sync.Once
}

func newConnHandler(srv *grpc.Server, stop func(), dog *h2watch.Watchdog) *connHandler {
	return &connHandler{srv: srv, ln: serve.NewHandoff(), stop: stop, dog: dog}
}

// ServeConn has the gRPC server serve nc, watched (package h2watch), and
// returns once nc is closed.
func (h *connHandler) ServeConn(ctx context.Context, nc net.Conn) {
	h.start.Do(func() {
		go h.srv.Serve(h.ln) // returns once GracefulStop closes ln
		context.AfterFunc(ctx, func() {
			h.stop()
			h.srv.GracefulStop()
		})
	})
	h.ln.Serve(h.dog.Watch(nc, ctx.Done()))
}

// watchMethod is the health service's one long-lived call.
const watchMethod = "/grpc.health.v1.Health/Watch"

// tap runs as each request's stream opens, before its message is read.
// Over MaxRequests requests in progress on all connections together, it
// refuses the request, which is answered RESOURCE_EXHAUSTED at once and
// holds nothing. Otherwise it gives the stream a deadline of
// RequestTimeout, unless the client's own is sooner, so that a request
// whose message never arrives in full is answered DEADLINE_EXCEEDED and
// its memory freed. A health watch, which lasts, has none. (The gRPC
// server reads a request's message under the context this returns; the
// deadline's timer ends with the stream, whose own context is its
// parent.)
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	// The count has this request in it, and may have the next few the
	// connection sent, already read.
	if s.maxRequests > 0 && s.dog.Streams() > s.maxRequests {
		s.busy.Add(1)
		return nil, s.errBusy
	}
	if info.FullMethodName == watchMethod {
		return ctx, nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		return ctx, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	_ = cancel // the stream's context, ctx's parent, is cancelled when the stream ends
	return ctx, nil
}
