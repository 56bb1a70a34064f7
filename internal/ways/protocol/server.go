package protocol

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/limits"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// MaxLine is the hard cap on a request line, in bytes, not counting its
// '\n'. A connection sending a longer line is closed.
const MaxLine = limits.MaxLine

// Config configures a Server. The zero value is valid: no connection
// limit, the system clock and no logging.
type Config struct {
	// MaxConns caps the connections served at once, across every listener
	// given to Serve; 0 or less means no limit (dthrottled gives its
	// listen.max_conns). A connection over the limit is accepted and
	// closed at once.
	MaxConns int
	// Clock gives the time every decision is taken at, read once per read
	// from a connection; nil is time.Now.
	Clock func() time.Time
	// Logger receives warnings: over-long lines, the connection limit
	// being hit, accept errors. Nothing is logged per query. Nil discards.
	Logger *slog.Logger
}

// Stats is a snapshot of a Server's counters, all since NewServer: a plain
// value, whose zero value is a server that has served nothing.
type Stats struct {
	serve.Stats        // connections: accepted, rejected over MaxConns, active
	Queries     uint64 // requests answered, empty tags included
	LineTooLong uint64 // connections closed for a line longer than MaxLine
}

// counters are the line protocol's statistics, shared with its
// connections. They change per connection, not per query: each connection
// counts its own queries, and closedQueries holds those of the connections
// that ended.
type counters struct {
	closedQueries, lineTooLong atomic.Uint64
	bad                        atomic.Uint64 // charge lines answered BAD (charge.go)
}

// Server serves the line protocol on any number of listeners: a
// serve.Server (Serve, Shutdown, Close) whose handler speaks the line
// protocol. It is safe for concurrent use. The zero value is not usable:
// call NewServer.
type Server struct {
	*serve.Server
	h *handler
}

// NewServer returns a Server answering through d. It panics if d is nil.
func NewServer(d decide.Allower, cfg Config) *Server {
	if d == nil {
		panic("protocol: NewServer with nil decide.Allower")
	}
	h, maxConns := newHandler(cfg)
	h.decider = d
	// A connection over the limit hears nothing: any answer could be
	// taken for the reply to its first query.
	srv := serve.New(h, serve.Config{Name: "protocol", MaxConns: maxConns, Logger: h.log})
	return &Server{Server: srv, h: h}
}

// newHandler returns a handler with cfg's clock and logger, neither
// deciding nor charging yet, and cfg's connection limit.
func newHandler(cfg Config) (_ *handler, maxConns int) {
	maxConns = cfg.MaxConns
	h := &handler{
		maxLine: MaxLine,
		now:     cfg.Clock,
		log:     cfg.Logger,
		conns:   make(map[*conn]struct{}),
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, maxConns
}

// OfferTable lets the server's Unix connections attach to the shared
// table that offer returns (attach.go). Call it before Serve.
func (s *Server) OfferTable(offer Offer) { s.h.offer = offer }

// Stats returns a snapshot of the server's counters. It visits every live
// connection, so it costs in proportion to them: it is for scrapes, not for
// a hot path.
func (s *Server) Stats() Stats {
	return Stats{Stats: s.Server.Stats(), Queries: s.h.queries(), LineTooLong: s.h.stats.lineTooLong.Load()}
}

// handler speaks the line protocol on each connection a serve.Server
// hands it: queries through decider, or charges through charger when it
// is set. It is safe for concurrent use.
type handler struct {
	decider decide.Allower
	charger decide.Charger // set: the charge form (charge.go)
	offer   Offer          // set: Unix connections may attach to the shared table (attach.go)
	maxLine int            // MaxLine; tests lower it
	now     func() time.Time
	log     *slog.Logger
	stats   counters

	mu    sync.Mutex
	conns map[*conn]struct{} // live connections, whose queries Stats sums
}

// ServeConn serves the line protocol on nc until end of input, an error,
// an over-long line, or the end of ctx, which interrupts the read: the
// lines already read are answered.
func (h *handler) ServeConn(ctx context.Context, nc net.Conn) {
	c := newConn(nc, h.decider, h.maxLine, h.now, &h.stats, h.log)
	c.charge = h.charger
	h.mu.Lock()
	h.conns[c] = struct{}{}
	h.mu.Unlock()
	stop := serve.InterruptReads(ctx, nc)
	if uc, ok := nc.(*net.UnixConn); !ok || h.offer == nil || c.firstRead(uc, h.offer) {
		c.serve()
	}
	stop()
	h.mu.Lock()
	delete(h.conns, c)
	h.stats.closedQueries.Add(c.queries.Load())
	h.mu.Unlock()
}

// queries is the number of queries answered, by the connections that
// ended and those still open.
func (h *handler) queries() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.stats.closedQueries.Load()
	for c := range h.conns {
		n += c.queries.Load()
	}
	return n
}
