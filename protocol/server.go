package protocol

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
)

// Decider answers one query: true for OK, false for NO. It must be safe for
// concurrent use, and must not retain tag (or any part of it) after Decide
// returns: the bytes belong to the connection's buffer. now is the time the
// request was read; all requests read together share it.
type Decider interface {
	Decide(now time.Time, tag []byte) bool
}

// MaxLine is the hard cap on a request line, in bytes, not counting its
// '\n'. A connection sending a longer line is closed.
const MaxLine = 64 << 10

// DefaultMaxConns is the connection limit used when Config.MaxConns is 0.
const DefaultMaxConns = 10000

const (
	// closeGrace is how long Close lets a connection finish writing
	// replies to a client that is slow to read them.
	closeGrace = 100 * time.Millisecond
	// minAcceptDelay and maxAcceptDelay bound the pause after a temporary
	// accept error; the pause doubles with each consecutive error.
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// aLongTimeAgo is a deadline in the past: setting it interrupts a blocked
// read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// Config configures a Server. The zero value is valid: DefaultMaxConns
// connections and no logging.
type Config struct {
	// MaxConns caps the connections served at once, across every listener
	// given to Serve. 0 means DefaultMaxConns; a negative value means no
	// limit. A connection over the limit is accepted and closed at once.
	MaxConns int
	// Logger receives warnings: over-long lines, the connection limit
	// being hit, accept errors. Nothing is logged per query. Nil discards.
	Logger *slog.Logger
}

// Stats is a snapshot of a Server's counters, all since NewServer.
type Stats struct {
	Accepted    uint64 // connections taken into service
	Rejected    uint64 // connections closed on arrival because MaxConns were being served
	Active      uint64 // connections being served now
	Queries     uint64 // requests answered, empty tags included
	LineTooLong uint64 // connections closed for a line longer than MaxLine
}

// counters are a Server's statistics, shared with its connections. They
// change per connection, not per query: each connection counts its own
// queries, and closedQueries holds those of the connections that ended.
type counters struct {
	accepted, rejected, closedQueries, lineTooLong atomic.Uint64
	active                                         atomic.Int64
}

// Server serves the line protocol on any number of listeners. It is safe for
// concurrent use. The zero value is not usable: call NewServer.
type Server struct {
	decider   Decider
	maxConns  int // <= 0: no limit
	maxLine   int // MaxLine; tests lower it
	log       *slog.Logger
	stats     counters
	rejectLog everySecond

	mu        sync.Mutex
	closed    bool
	listeners map[*listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // Serve loops and connection goroutines; Add only while !closed
	done      chan struct{}  // closed when shutdown begins
	idle      chan struct{}  // closed when wg is done after shutdown began
}

// listener wraps a net.Listener so that any listener, comparable or not, can
// be a map key.
type listener struct{ net.Listener }

// NewServer returns a Server answering through d. It panics if d is nil.
func NewServer(d Decider, cfg Config) *Server {
	if d == nil {
		panic("protocol: NewServer with nil Decider")
	}
	maxConns := cfg.MaxConns
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		decider:   d,
		maxConns:  maxConns,
		maxLine:   MaxLine,
		log:       log,
		listeners: make(map[*listener]struct{}),
		conns:     make(map[*conn]struct{}),
		done:      make(chan struct{}),
		idle:      make(chan struct{}),
	}
}

// Serve accepts connections on l and serves each in its own goroutine until
// Shutdown or Close is called, then returns nil. It may be called for several
// listeners at once. Serve closes l when it returns. Temporary accept errors
// (such as running out of file descriptors) are logged and retried after a
// pause that doubles from 5ms up to 1s; any other accept error is returned.
// Called after Shutdown or Close, Serve closes l and returns nil.
func (s *Server) Serve(l net.Listener) error {
	tl := &listener{l}
	if !s.addListener(tl) {
		l.Close()
		return nil
	}
	defer s.removeListener(tl)

	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.shuttingDown() {
				return nil
			}
			if !isTemporary(err) {
				return fmt.Errorf("protocol: accept on %s: %w", l.Addr(), err)
			}
			delay = nextBackoff(delay)
			s.log.Warn("protocol: accept failed, retrying",
				"addr", l.Addr().String(), "err", err, "delay", delay)
			if !s.pause(delay) {
				return nil
			}
			continue
		}
		delay = 0
		s.admit(nc)
	}
}

// Shutdown stops the server gracefully. It closes the listeners, so every
// Serve returns nil, and interrupts every connection's pending read; each
// connection then answers the complete lines it has already read, writes the
// replies and closes. Shutdown waits for that, and returns the error of
// closing the listeners, if any. If ctx ends first, Shutdown cuts off the
// remaining connections' writes and returns ctx.Err() without waiting
// further. It may be called more than once, concurrently with Serve and
// Close.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.stop()
	select {
	case <-s.idle:
		return err
	case <-ctx.Done():
		s.cutOff(aLongTimeAgo)
		return ctx.Err()
	}
}

// Close stops the server like Shutdown but without a grace period: a
// connection has at most 100ms to write replies already due before its
// write fails. Close waits for every connection goroutine to end. It returns
// the error of closing the listeners, if any, and may be called more than
// once, concurrently with Serve and Shutdown.
func (s *Server) Close() error {
	err := s.stop()
	s.cutOff(time.Now().Add(closeGrace))
	<-s.idle
	return err
}

// Stats returns a snapshot of the server's counters. It visits every live
// connection, so it costs in proportion to them: it is for scrapes, not for
// a hot path.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	queries := s.stats.closedQueries.Load()
	for c := range s.conns {
		queries += c.queries.Load()
	}
	s.mu.Unlock()
	return Stats{
		Accepted:    s.stats.accepted.Load(),
		Rejected:    s.stats.rejected.Load(),
		Active:      uint64(max(s.stats.active.Load(), 0)),
		Queries:     queries,
		LineTooLong: s.stats.lineTooLong.Load(),
	}
}

// addListener tracks l, reporting false if the server is shutting down.
func (s *Server) addListener(l *listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	return true
}

// removeListener stops tracking l and closes it, if stop has not already.
func (s *Server) removeListener(l *listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
	l.Close()
	s.wg.Done()
}

// admit serves nc, or closes it at once when shutting down or at the
// connection limit.
func (s *Server) admit(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.maxConns > 0 && len(s.conns) >= s.maxConns {
		s.mu.Unlock()
		s.stats.rejected.Add(1)
		if s.rejectLog.allow(time.Now()) {
			s.log.Warn("protocol: connection limit reached, closing new connections",
				"max_conns", s.maxConns, "rejected_total", s.stats.rejected.Load(),
				"local", nc.LocalAddr().String())
		}
		nc.Close()
		return
	}
	c := newConn(nc, s.decider, s.maxLine, &s.stats, s.log)
	s.conns[c] = struct{}{}
	s.stats.active.Add(1)
	s.stats.accepted.Add(1)
	s.wg.Add(1)
	s.mu.Unlock()
	go s.run(c)
}

// run serves c, then closes it and frees its slot.
func (s *Server) run(c *conn) {
	defer s.wg.Done()
	c.serve()
	c.nc.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.stats.closedQueries.Add(c.queries.Load())
	s.stats.active.Add(-1)
	s.mu.Unlock()
}

// stop begins shutdown once: it closes the listeners and interrupts every
// connection's read. It returns the errors of closing the listeners on the
// first call, nil after.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	var errs []error
	for l := range s.listeners {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("protocol: closing listener %s: %w", l.Addr(), err))
		}
	}
	for c := range s.conns {
		c.nc.SetReadDeadline(aLongTimeAgo)
	}
	// No wg.Add happens once closed is set, so Wait may start.
	go func() {
		s.wg.Wait()
		close(s.idle)
	}()
	return errors.Join(errs...)
}

// cutOff makes every connection's writes fail after deadline.
func (s *Server) cutOff(deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.nc.SetReadDeadline(aLongTimeAgo)
		c.nc.SetWriteDeadline(deadline)
	}
}

// shuttingDown reports whether stop has been called.
func (s *Server) shuttingDown() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// pause waits for d, reporting false if shutdown began meanwhile.
func (s *Server) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// nextBackoff returns the pause after a temporary accept error, given the
// previous pause (0 if the last accept succeeded).
func nextBackoff(prev time.Duration) time.Duration {
	if prev <= 0 {
		return minAcceptDelay
	}
	return min(2*prev, maxAcceptDelay)
}

// isTemporary reports whether an accept error may go away by itself, so
// that accepting should be retried after a pause.
func isTemporary(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
			syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR,
			syscall.EAGAIN, syscall.EPROTO, syscall.EPERM, syscall.ETIMEDOUT:
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// everySecond lets an event through at most once a second. The zero value
// lets the first event through. It is safe for concurrent use.
type everySecond struct {
	last atomic.Int64 // unix nanoseconds of the last event let through
}

// allow reports whether an event at now may pass.
func (e *everySecond) allow(now time.Time) bool {
	t := now.UnixNano()
	last := e.last.Load()
	// A clock stepped back lets the event through rather than muting it.
	if last != 0 && t >= last && t-last < int64(time.Second) {
		return false
	}
	return e.last.CompareAndSwap(last, t)
}
