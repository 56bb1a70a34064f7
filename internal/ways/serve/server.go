// Package serve is the one way dthrottled serves connections: every way in
// (the line protocol, the HTTP decision endpoint, the SPOE agent, and any
// new one) is a [Handler] that says what is spoken on one connection, and
// a [Server] owns everything around it: the accept loop over the listeners
// it is given, the pause after a temporary accept error (5 ms doubling to
// 1 s), the connection limit and the busy answer to a connection over it,
// the bound on those answers in flight, warnings at most once a second,
// the counters, and shutdown (close the listeners, let the connections
// finish what they have read, then cut them off).
//
// The package is not internal: the servers that package protocol, httpapi
// and spoe export are made of a Server, their Stats carry its [Stats], and
// a program that embeds a way in serves it through this package.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Handler says what is spoken on a connection: it is the whole of a
// protocol's part in serving one.
type Handler interface {
	// ServeConn serves c until the client is done, an error, or the end
	// of ctx, and then returns; the Server closes c after it returns.
	// ctx ends when Shutdown or Close begins: a handler then stops taking
	// new requests, answers those it has read and returns (InterruptReads
	// wakes a handler blocked reading). ServeConn is called from a
	// goroutine of its own for each connection, so it must be safe for
	// concurrent use.
	ServeConn(ctx context.Context, c net.Conn)
}

// HandlerFunc is a function used as a Handler.
type HandlerFunc func(ctx context.Context, c net.Conn)

// ServeConn calls f(ctx, c).
func (f HandlerFunc) ServeConn(ctx context.Context, c net.Conn) { f(ctx, c) }

// InterruptReads makes c's pending and later reads fail at once when ctx
// ends: a handler that blocks reading the next request calls it so that
// Shutdown wakes it. A handler that sets read deadlines itself must check
// ctx after setting one, since its deadline may replace this one. stop
// cancels the arrangement; call it when the connection is done.
func InterruptReads(ctx context.Context, c net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { c.SetReadDeadline(aLongTimeAgo) })
}

const (
	// closeGrace is how long Close lets connections finish before it
	// cuts them off.
	closeGrace = 100 * time.Millisecond
	// busyGrace bounds the busy answer to a connection over the limit:
	// writing it and letting the client read it.
	busyGrace = 100 * time.Millisecond
	// busyDrain is the most a refused client's input is read, so that
	// closing does not reset the connection before it read the answer.
	busyDrain = 16 << 10
	// maxRefusing bounds the busy answers in flight. Each holds a file
	// descriptor beyond MaxConns for up to busyGrace; past the bound a
	// connection over the limit is closed without an answer.
	maxRefusing = 64
)

// aLongTimeAgo is a deadline in the past: setting it interrupts a blocked
// read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// Config configures a Server. The zero Config is valid: no connection
// limit, a connection is closed without an answer, nothing is logged.
type Config struct {
	// Name prefixes the log messages and the errors of the Server, such as
	// "protocol" or "http endpoint".
	Name string
	// MaxConns caps the connections served at once, across every listener
	// given to Serve; 0 or less means no limit. A connection over it is
	// accepted, answered Busy and closed, rather than left waiting in the
	// listen backlog: a client hears at once that it is not served.
	MaxConns int
	// Busy is what a connection over MaxConns is told before it is closed,
	// such as an HTTP 503; nil closes it at once without a word.
	Busy []byte
	// Logger receives warnings: accept errors and, at most once a second,
	// the connection limit being hit. Nothing is logged per connection.
	// Nil discards.
	Logger *slog.Logger
}

// Stats are a Server's counters since New. Every way in reports its
// connections in this shape. It is a plain value; the zero Stats is a
// server that has served nothing.
type Stats struct {
	Accepted uint64 // connections taken into service
	Rejected uint64 // connections refused on arrival because MaxConns were being served
	Active   uint64 // connections being served now
}

// Server serves a Handler on any number of listeners. Create it with New,
// serve listeners with Serve, stop it with Shutdown or Close. The zero
// Server is not usable. It is safe for concurrent use.
type Server struct {
	handler  Handler
	name     string
	maxConns int // <= 0: no limit
	busy     []byte
	log      *slog.Logger
	ctx      context.Context // handed to every ServeConn; ends when shutdown begins
	cancel   context.CancelFunc

	accepted, rejected atomic.Uint64
	active, refusing   atomic.Int64
	limitLog           everySecond

	mu        sync.Mutex
	closed    bool
	listeners map[*listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // Serve loops, connections and busy answers; Add only while !closed
	idle      chan struct{}  // closed when wg is done after shutdown began
}

// listener wraps a net.Listener so that any listener, comparable or not,
// can be a map key.
type listener struct{ net.Listener }

// conn is a connection being served, a map key whatever its type.
type conn struct{ net.Conn }

// New returns a Server serving connections with h. It serves nothing until
// Serve. It panics if h is nil.
func New(h Handler, cfg Config) *Server {
	if h == nil {
		panic("serve: New with nil Handler")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		handler:   h,
		name:      cfg.Name,
		maxConns:  cfg.MaxConns,
		busy:      cfg.Busy,
		log:       log,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[*listener]struct{}),
		conns:     make(map[*conn]struct{}),
		idle:      make(chan struct{}),
	}
}

// Serve accepts connections on l and serves each in its own goroutine until
// Shutdown or Close, then returns nil. It may be called for several
// listeners at once, and closes l when it returns. A temporary accept error
// (such as running out of file descriptors) is logged and retried after a
// pause that doubles from 5 ms up to 1 s; any other accept error is
// returned. Called after Shutdown or Close, Serve closes l and returns nil.
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
				return nil // the listener was closed by stop: net.ErrClosed is normal
			}
			if !isTemporary(err) {
				return fmt.Errorf("%s: accept on %s: %w", s.name, l.Addr(), err)
			}
			delay = nextBackoff(delay)
			s.log.Warn(s.name+": accept failed, retrying",
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
// Serve returns nil, and ends the context every connection's handler was
// given, so that each answers what it has read and returns. Shutdown waits
// for that, and returns the error of closing the listeners, if any. If ctx
// ends first, Shutdown cuts off the remaining connections (their reads and
// writes fail at once), waits for their handlers to return and returns
// ctx.Err(). It may be called more than once, concurrently with Serve and
// Close.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.stop()
	if !s.wait(ctx) {
		return ctx.Err()
	}
	return err
}

// Close stops the server like Shutdown with a grace of 100 ms: past it,
// the connections still open are cut off. Close waits for every handler to
// return, and returns the error of closing the listeners, if any. It may be
// called more than once, concurrently with Serve and Shutdown.
func (s *Server) Close() error {
	err := s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	s.wait(ctx)
	return err
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		Accepted: s.accepted.Load(),
		Rejected: s.rejected.Load(),
		Active:   uint64(max(s.active.Load(), 0)),
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

// admit serves nc, refuses it at the connection limit, or closes it when
// shutting down.
func (s *Server) admit(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.maxConns > 0 && len(s.conns) >= s.maxConns {
		s.refuse(nc) // unlocks s.mu
		return
	}
	c := &conn{nc}
	s.conns[c] = struct{}{}
	s.active.Add(1)
	s.accepted.Add(1)
	s.wg.Add(1)
	s.mu.Unlock()
	go s.run(c)
}

// run serves c, then closes it and frees its place.
func (s *Server) run(c *conn) {
	defer s.wg.Done()
	s.handler.ServeConn(s.ctx, c.Conn)
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.active.Add(-1)
}

// stop begins shutdown once: it closes the listeners and ends the
// handlers' context. It returns the errors of closing the listeners on the
// first call, nil after.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	var errs []error
	for l := range s.listeners {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("%s: closing listener %s: %w", s.name, l.Addr(), err))
		}
	}
	// No wg.Add happens once closed is set, so Wait may start.
	go func() {
		s.wg.Wait()
		close(s.idle)
	}()
	return errors.Join(errs...)
}

// wait waits until every Serve loop, connection and busy answer has ended.
// If ctx ends first, it cuts the connections off, waits for them all the
// same, and reports false.
func (s *Server) wait(ctx context.Context) bool {
	select {
	case <-s.idle:
		return true
	case <-ctx.Done():
	}
	s.cutOff()
	<-s.idle
	return false
}

// cutOff makes every connection's reads and writes fail at once.
func (s *Server) cutOff() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.SetDeadline(aLongTimeAgo)
	}
}

// shuttingDown reports whether stop has been called.
func (s *Server) shuttingDown() bool {
	return s.ctx.Err() != nil
}

// pause waits for d, reporting false if shutdown began meanwhile.
func (s *Server) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}
