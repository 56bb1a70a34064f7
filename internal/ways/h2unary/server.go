// Package h2unary serves unary gRPC methods on HTTP/2 cleartext
// connections (prior knowledge, as gRPC clients with insecure
// credentials speak it), in place of google.golang.org/grpc's server for
// a way in whose methods answer at once.
//
// One goroutine serves each connection (conn.go): it reads the client's
// frames (golang.org/x/net/http2's Framer, one whole frame at a time
// from a buffered reader), gathers each stream's request message
// (streams.go), runs the method inline as soon as the message is
// complete, and appends the answer's frames to a buffered writer
// (answer.go), which it flushes only when no whole frame of input is
// left buffered: calls a client pipelines are answered in one write, as
// the line protocol answers.
//
// A [Server] is a table of methods, by path ("/pb.gubernator.V1/
// GetRateLimits"), to [Handler]s that take the request's message and
// append the answer's: the generated protobuf types stay the caller's,
// marshalled with google.golang.org/protobuf, so the wire is gRPC's by
// construction. The server keeps the client's flow-control windows for
// what it sends (an answer that does not fit waits for the client's
// WINDOW_UPDATE) and opens its own as it consumes the client's data.
//
// Everything a client can hold is bounded: the message (MaxMessageBytes,
// refused RESOURCE_EXHAUSTED before it is read), the streams of a
// connection (MaxStreams, over it REFUSED_STREAM), a request's header
// list (MaxHeaderBytes), the bytes of messages not yet complete on a
// connection (its flow-control window, two messages' worth), the calls
// in progress on every connection together (MaxRequests, over it
// RESOURCE_EXHAUSTED at once), and time: the handshake
// (HandshakeTimeout), a connection without streams (IdleTimeout), a
// request whose message does not arrive in full (RequestTimeout: it is
// answered DEADLINE_EXCEEDED and freed), and an answer that cannot be
// written within RequestTimeout of its request, or a write that waits
// that long (the connection is closed and counted stalled).
package h2unary

import (
	"cmp"
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// A Handler answers one method: given the request's message (the bytes
// after gRPC's 5-byte prefix, valid only during the call), it appends
// the answer's message to out and returns it, or returns an error whose
// gRPC status (google.golang.org/grpc/status.FromError) is the answer:
// a plain error is UNKNOWN. It runs on the connection's goroutine, so it
// must answer at once; it must be safe for concurrent use by the
// connections' goroutines.
type Handler func(req, out []byte) ([]byte, error)

// Defaults for the zero fields of Config.
const (
	DefaultMaxMessageBytes  = 4 << 20 // gRPC's own default
	DefaultMaxStreams       = 100
	DefaultMaxHeaderBytes   = 16 << 10
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
)

// Config configures a Server. Every zero field takes its default; Methods
// is the one field that must be set.
type Config struct {
	// Methods are the methods served, by path: "/" service "/" method.
	Methods map[string]Handler
	// MaxMessageBytes is the largest request message; a larger one is
	// answered RESOURCE_EXHAUSTED before it is read.
	MaxMessageBytes int
	// MaxStreams is the most streams open on one connection (announced
	// in SETTINGS_MAX_CONCURRENT_STREAMS); one more is reset
	// REFUSED_STREAM.
	MaxStreams int
	// MaxHeaderBytes bounds a request's header list (announced in
	// SETTINGS_MAX_HEADER_LIST_SIZE, counted as HTTP/2 counts it); a
	// larger one resets its stream FRAME_SIZE_ERROR, as grpc-go does.
	MaxHeaderBytes int
	// MaxRequests is the most calls in progress, from their headers
	// until their answer is written, on every connection together: one
	// more is answered RESOURCE_EXHAUSTED with Busy at once. 0 or less
	// means no limit.
	MaxRequests int
	// Busy is the message of that answer.
	Busy string
	// HandshakeTimeout closes a connection whose preface and first
	// SETTINGS have not arrived within it. RequestTimeout answers a
	// request whose message has not arrived in full within it of its
	// headers DEADLINE_EXCEEDED; closes the connection, counted stalled,
	// when an answer cannot be written within it of its request's
	// headers (the client keeps its window shut) or a write to the
	// connection waits that long (it reads nothing); and bounds the
	// stop. IdleTimeout closes a connection with no stream open for that
	// long, after a GOAWAY.
	HandshakeTimeout, RequestTimeout, IdleTimeout time.Duration
}

// Server serves the unary methods of its Config on the connections
// handed to ServeConn; it is a serve.Handler. Create it with New. It is
// safe for concurrent use; the zero Server is not usable.
type Server struct {
	cfg      Config
	services map[string]bool // the services of cfg.Methods, for UNIMPLEMENTED's wording

	inProgress atomic.Int64  // calls from their headers until their answer is written
	busy       atomic.Uint64 // calls answered RESOURCE_EXHAUSTED over MaxRequests
	stalled    atomic.Uint64 // connections closed: an answer or a write not done within RequestTimeout
}

// New returns a Server of cfg's methods. It panics if cfg has none.
func New(cfg Config) *Server {
	if len(cfg.Methods) == 0 {
		panic("h2unary: no methods")
	}
	cfg.MaxMessageBytes = cmp.Or(max(cfg.MaxMessageBytes, 0), DefaultMaxMessageBytes)
	cfg.MaxStreams = cmp.Or(max(cfg.MaxStreams, 0), DefaultMaxStreams)
	cfg.MaxHeaderBytes = cmp.Or(max(cfg.MaxHeaderBytes, 0), DefaultMaxHeaderBytes)
	cfg.HandshakeTimeout = cmp.Or(max(cfg.HandshakeTimeout, 0), DefaultHandshakeTimeout)
	cfg.RequestTimeout = cmp.Or(max(cfg.RequestTimeout, 0), DefaultRequestTimeout)
	cfg.IdleTimeout = cmp.Or(max(cfg.IdleTimeout, 0), DefaultIdleTimeout)
	s := &Server{cfg: cfg, services: map[string]bool{}}
	for path := range cfg.Methods {
		if svc, _, ok := splitPath(path); ok {
			s.services[svc] = true
		}
	}
	return s
}

// ServeConn serves nc, whose first bytes are to be the client's preface,
// until the client is done, the connection fails or is found stalled, or
// ctx ends: then it sends GOAWAY, answers the requests whose messages are
// complete (within RequestTimeout) and returns. The caller closes nc.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn) {
	c := newConn(s, nc, ctx.Done())
	stop := serve.InterruptReads(ctx, nc)
	defer stop()
	c.serve()
	c.close()
}

var _ serve.Handler = (*Server)(nil)

// InProgress is the number of calls in progress on every connection:
// from their headers until their answer is written.
func (s *Server) InProgress() int64 { return s.inProgress.Load() }

// Busy is the number of calls answered RESOURCE_EXHAUSTED because
// MaxRequests were in progress.
func (s *Server) Busy() uint64 { return s.busy.Load() }

// Stalled is the number of connections closed because an answer could
// not be written within RequestTimeout of its request, or a write waited
// that long.
func (s *Server) Stalled() uint64 { return s.stalled.Load() }

// splitPath splits "/service/method".
func splitPath(path string) (service, method string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return "", "", false
	}
	service, method, ok = strings.Cut(rest, "/")
	return service, method, ok && service != "" && method != "" && !strings.Contains(method, "/")
}

// unknownMethod is grpc-go's wording for a path no method serves.
func (s *Server) unknownMethod(path string) string {
	svc, m, ok := splitPath(path)
	switch {
	case !ok:
		return "malformed method name: " + strconv.Quote(path)
	case s.services[svc]:
		return "unknown method " + m + " for service " + svc
	default:
		return "unknown service " + svc
	}
}
