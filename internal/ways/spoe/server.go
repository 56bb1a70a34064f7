// Package spoe is dthrottled's agent for HAProxy's Stream Processing
// Offload Engine: it speaks SPOP 2.0 (HAProxy's doc/SPOE.txt, section 3)
// to HAProxy's SPOE filter, and answers each message of a NOTIFY frame by
// spending a token of its tag, from the same table as the line protocol
// and the HTTP endpoint, with an ACK whose set-var actions carry the
// verdict (txn.<prefix>.allowed, and the RateLimit, RateLimit-Policy and
// Retry-After values). HAProxy multiplexes the requests of all its streams
// on a few pipelined connections, and the agent answers all the frames of
// a read in one write, so a busy HAProxy costs dthrottled a wake-up per
// batch of requests, not per request.
//
// The package owns the codec (frames, varints, typed data), the HELLO
// handshake, and the bad-input discipline: a frame over the agreed size,
// a malformed or fragmented frame, a HELLO not received within
// HelloTimeout, a frame begun and not finished within FrameTimeout, an
// idle connection past IdleTimeout or a reader slower than WriteTimeout
// each end their connection with an AGENT-DISCONNECT where one can be
// sent; a connection over MaxConns is answered with an AGENT-DISCONNECT
// and closed. A connection's memory is bounded by the frame size. It
// decides through a [decide.Decider] it is given, which *bucket.Table is.
// Accepting connections, their limit and shutdown are package serve's, of
// which a [Server] is made.
package spoe

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxFrameSize = 16380 // HAProxy's own default, tune.bufsize - 4
	DefaultHelloTimeout = 5 * time.Second
	DefaultFrameTimeout = 5 * time.Second
	DefaultIdleTimeout  = 10 * time.Minute
	DefaultWriteTimeout = 5 * time.Second
)

// minFrameSize is the smallest frame size SPOP allows.
const minFrameSize = 256

// Config configures a Server. The zero Config is usable: every zero field
// takes its default, and there is no connection limit.
type Config struct {
	// MaxConns is the most connections served at once; one more is
	// answered with an AGENT-DISCONNECT and closed. 0 or less means no
	// limit (dthrottled gives its spoe.max_conns).
	MaxConns int
	// MaxFrameSize is the largest frame accepted, 256 bytes or more;
	// HAProxy's HELLO may agree a smaller one. Default DefaultMaxFrameSize.
	MaxFrameSize int
	// HelloTimeout closes a connection whose HAPROXY-HELLO takes longer;
	// FrameTimeout one whose frame, begun, takes longer to arrive whole;
	// IdleTimeout one that sends nothing for that long; WriteTimeout one
	// whose answers cannot be written in time.
	HelloTimeout, FrameTimeout, IdleTimeout, WriteTimeout time.Duration
	// Clock gives the time every decision is taken at; nil is time.Now.
	Clock func() time.Time
	// Logger receives connection-limit warnings (at most one a second)
	// and, at debug level, connections closed for bad input; never a line
	// per request. Nil discards.
	Logger *slog.Logger
}

// Stats are a Server's counters since New: a plain value, whose zero
// value is a server that has served nothing.
type Stats struct {
	serve.Stats         // connections: accepted, rejected (refused over MaxConns), active
	Frames       uint64 // frames received whole
	Notifies     uint64 // NOTIFY frames answered
	Allowed      uint64 // messages served, dry runs included
	Refused      uint64 // messages refused
	DryRun       uint64 // of Allowed, those a dry-run policy would have refused
	Bad          uint64 // messages not decided: no tag, a bad cost, no room in the ACK
	BadFrames    uint64 // connections closed for a malformed, fragmented or misplaced frame
	TooBig       uint64 // connections closed for a frame over the agreed size
	Timeouts     uint64 // connections closed for a slow hello, a slow frame or idleness
	WriteErrors  uint64 // connections closed because their answers could not be written
	HealthChecks uint64 // HELLOs of HAProxy's health checks
}

// Server is the SPOE agent: a serve.Server (Serve, Shutdown, Close) whose
// handler speaks SPOP. Create it with New. It is safe for concurrent use;
// the zero Server is not usable.
type Server struct {
	*serve.Server
	decide   decide.Decider
	now      func() time.Time
	log      *slog.Logger
	cfg      Config
	maxFrame int

	stats struct {
		frames, notifies, allowed, refused, dryRun, bad        atomic.Uint64
		badFrames, tooBig, timeouts, writeErrors, healthChecks atomic.Uint64
	}
}

// New returns a Server that decides through d. It serves nothing until
// Serve.
func New(d decide.Decider, cfg Config) *Server {
	s := &Server{decide: d, now: cfg.Clock, log: cfg.Logger, cfg: cfg}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.cfg.MaxConns = cfg.MaxConns
	s.maxFrame = max(cmp.Or(cfg.MaxFrameSize, DefaultMaxFrameSize), minFrameSize)
	s.cfg.HelloTimeout = cmp.Or(cfg.HelloTimeout, DefaultHelloTimeout)
	s.cfg.FrameTimeout = cmp.Or(cfg.FrameTimeout, DefaultFrameTimeout)
	s.cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	s.cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout)
	// A connection over the limit hears an AGENT-DISCONNECT (resource
	// allocation error), so HAProxy says why in its log.
	s.Server = serve.New(serve.HandlerFunc(s.serveConn), serve.Config{Name: "spoe", MaxConns: s.cfg.MaxConns,
		Busy: appendDisconnect(nil, statusResources), Logger: s.log})
	return s
}

// serveConn speaks SPOP on nc until it ends; the end of ctx (shutdown)
// interrupts its wait for frames, and it answers the frames it has read,
// sends an AGENT-DISCONNECT and returns.
func (s *Server) serveConn(ctx context.Context, nc net.Conn) {
	stop := serve.InterruptReads(ctx, nc)
	defer stop()
	c := &conn{s: s, nc: nc, done: ctx.Done()}
	c.serve()
}

// add adds a connection's batch counts to the server's, and zeroes them.
func (s *Server) add(c *counts) {
	if c.frames != 0 {
		s.stats.frames.Add(c.frames)
	}
	if c.notifies != 0 {
		s.stats.notifies.Add(c.notifies)
	}
	if c.allowed != 0 {
		s.stats.allowed.Add(c.allowed)
	}
	if c.refused != 0 {
		s.stats.refused.Add(c.refused)
	}
	if c.dryRun != 0 {
		s.stats.dryRun.Add(c.dryRun)
	}
	if c.bad != 0 {
		s.stats.bad.Add(c.bad)
	}
	*c = counts{}
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	st := &s.stats
	return Stats{
		Stats:  s.Server.Stats(),
		Frames: st.frames.Load(), Notifies: st.notifies.Load(), Allowed: st.allowed.Load(), Refused: st.refused.Load(),
		DryRun: st.dryRun.Load(), Bad: st.bad.Load(), BadFrames: st.badFrames.Load(), TooBig: st.tooBig.Load(),
		Timeouts: st.timeouts.Load(), WriteErrors: st.writeErrors.Load(), HealthChecks: st.healthChecks.Load(),
	}
}
