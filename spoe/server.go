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
// decides through a [Decider] it is given, which *bucket.Table is.
package spoe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/bucket"
)

// Decider decides a query costing n tokens for tag at now. *bucket.Table
// is one. It must be safe for concurrent use and must not retain tag.
type Decider interface {
	AllowN(now time.Time, tag []byte, n int) bucket.Verdict
}

// Defaults for the zero fields of Config.
const (
	DefaultMaxConns     = 1024
	DefaultMaxFrameSize = 16380 // HAProxy's own default, tune.bufsize - 4
	DefaultHelloTimeout = 5 * time.Second
	DefaultFrameTimeout = 5 * time.Second
	DefaultIdleTimeout  = 10 * time.Minute
	DefaultWriteTimeout = 5 * time.Second
)

// minFrameSize is the smallest frame size SPOP allows.
const minFrameSize = 256

// closeGrace bounds the answer to a connection over MaxConns.
const closeGrace = 100 * time.Millisecond

// Config configures a Server. The zero Config is usable: every zero field
// takes its default.
type Config struct {
	// MaxConns is the most connections served at once; one more is
	// answered with an AGENT-DISCONNECT and closed. Default
	// DefaultMaxConns.
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

// Stats are a Server's counters since New.
type Stats struct {
	Accepted     uint64 // connections taken into service
	Rejected     uint64 // connections refused because MaxConns were open
	Active       uint64 // connections open now
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

// Server is the SPOE agent. Create it with New, serve listeners with
// Serve, stop it with Shutdown or Close. It is safe for concurrent use.
type Server struct {
	decide   Decider
	now      func() time.Time
	log      *slog.Logger
	cfg      Config
	maxFrame int
	lastLog  atomic.Int64

	stats struct {
		accepted, rejected, frames, notifies, allowed, refused, dryRun, bad atomic.Uint64
		badFrames, tooBig, timeouts, writeErrors, healthChecks              atomic.Uint64
		active, refusing                                                    atomic.Int64
	}

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup
	done      chan struct{} // closed when shutdown begins
}

// New returns a Server that decides through d. It serves nothing until
// Serve.
func New(d Decider, cfg Config) *Server {
	s := &Server{decide: d, now: cfg.Clock, log: cfg.Logger, cfg: cfg,
		listeners: make(map[net.Listener]struct{}), conns: make(map[*conn]struct{}), done: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.cfg.MaxConns = orInt(cfg.MaxConns, DefaultMaxConns)
	s.maxFrame = max(orInt(cfg.MaxFrameSize, DefaultMaxFrameSize), minFrameSize)
	s.cfg.HelloTimeout = or(cfg.HelloTimeout, DefaultHelloTimeout)
	s.cfg.FrameTimeout = or(cfg.FrameTimeout, DefaultFrameTimeout)
	s.cfg.IdleTimeout = or(cfg.IdleTimeout, DefaultIdleTimeout)
	s.cfg.WriteTimeout = or(cfg.WriteTimeout, DefaultWriteTimeout)
	return s
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orInt(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// Serve accepts connections on l until Shutdown or Close, and returns nil
// then; any other accept error is returned. Serve may be called for
// several listeners. l is closed when Serve returns.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.shuttingDown() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("spoe: accept failed, retrying", "addr", l.Addr().String(), "err", err, "delay", delay)
				select {
				case <-time.After(delay):
				case <-s.done:
					return nil
				}
				continue
			}
			return fmt.Errorf("spoe: accept on %s: %w", l.Addr(), err)
		}
		delay = 0
		s.admit(nc)
	}
}

// admit serves nc, or answers it with an AGENT-DISCONNECT when MaxConns
// connections are open, or closes it when shutting down.
func (s *Server) admit(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.cfg.MaxConns {
		s.mu.Unlock()
		s.reject(nc)
		return
	}
	c := &conn{s: s, nc: nc}
	s.conns[c] = struct{}{}
	s.stats.active.Add(1)
	s.stats.accepted.Add(1)
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		nc.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.stats.active.Add(-1)
	}()
}

// maxRefusing bounds the connections being answered at once for being
// over the limit; past it, one is closed without an answer.
const maxRefusing = 64

// reject answers a connection over MaxConns with an AGENT-DISCONNECT
// (resource allocation error), lets HAProxy read it, and closes it.
func (s *Server) reject(nc net.Conn) {
	s.stats.rejected.Add(1)
	if now := time.Now().UnixNano(); now-s.lastLog.Load() >= int64(time.Second) {
		s.lastLog.Store(now)
		s.log.Warn("spoe: connection over max_conns refused", "max_conns", s.cfg.MaxConns,
			"rejected", s.stats.rejected.Load(), "remote", nc.RemoteAddr().String())
	}
	if s.stats.refusing.Add(1) > maxRefusing {
		s.stats.refusing.Add(-1)
		nc.Close()
		return
	}
	go func() {
		defer s.stats.refusing.Add(-1)
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(closeGrace))
		if _, err := nc.Write(appendDisconnect(nil, statusResources)); err != nil {
			return
		}
		if cw, ok := nc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		var buf [512]byte
		for range 32 { // at most 16 KiB, until HAProxy closes
			if _, err := nc.Read(buf[:]); err != nil {
				return
			}
		}
	}()
}

// Shutdown stops accepting, closes the listeners, and interrupts every
// connection's wait for frames: each answers the frames it has read,
// sends an AGENT-DISCONNECT and closes. Shutdown waits for them until ctx
// ends, and then cuts off their writes. Safe to call twice.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	idle := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.SetDeadline(time.Unix(1, 0))
		}
		s.mu.Unlock()
		<-idle
		return ctx.Err()
	}
}

// Close is Shutdown with a grace of closeGrace.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// stop marks the server closed, closes its listeners and interrupts the
// connections' reads, once.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.done)
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

// shuttingDown reports whether Shutdown or Close began.
func (s *Server) shuttingDown() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
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
		Accepted: st.accepted.Load(), Rejected: st.rejected.Load(), Active: uint64(max(st.active.Load(), 0)),
		Frames: st.frames.Load(), Notifies: st.notifies.Load(), Allowed: st.allowed.Load(), Refused: st.refused.Load(),
		DryRun: st.dryRun.Load(), Bad: st.bad.Load(), BadFrames: st.badFrames.Load(), TooBig: st.tooBig.Load(),
		Timeouts: st.timeouts.Load(), WriteErrors: st.writeErrors.Load(), HealthChecks: st.healthChecks.Load(),
	}
}

// isTemporary reports whether an accept error may go away by itself.
func isTemporary(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
			syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM:
			return true
		}
	}
	return false
}
