// Package h2watch bounds what an HTTP/2 client that never lets the
// server answer can hold: a [Watchdog] watches each connection a gRPC
// server serves, reading its frames as they pass (frames.go), and closes
// a connection whose stream cannot be answered within a timeout, or
// whose writes block that long. The rate limit service watches the
// connections its gRPC server serves with one; Gubernator's API serves
// its own (package h2unary), which keeps the same bounds itself.
//
// The gRPC server queues a reply's message until the client's
// flow-control window lets it be sent, and holds the stream, counted
// against its streams per connection, until then: a client that never
// opens its window (an HTTP/2 SETTINGS of INITIAL_WINDOW_SIZE 0, or no
// WINDOW_UPDATE once it is spent) would hold every stream it opens, and
// their memory, for as long as the connection lives. Nothing in gRPC-Go
// bounds that time, so the watchdog keeps the client's windows as the
// server spends and the client opens them.
//
// The deadline: a stream not ended within the timeout of its request
// while the window it needs is spent (the stream's or the connection's)
// closes the connection. A stream still open with window to spare is one
// that lasts (a health watch): it is checked again every timeout, and
// closes the connection in the same way if it is ever found stuck. And a
// write to the connection that does not finish within the timeout fails,
// which closes it: a client that reads nothing at all fills the socket's
// buffers and blocks the writes, window or not.
package h2watch

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Watchdog is what the connections it watches share: the deadline, and
// the counts across them all. Create it with New. It is safe for
// concurrent use; the zero Watchdog is not usable.
type Watchdog struct {
	timeout time.Duration
	open    atomic.Int64  // streams open on every connection: requests in progress
	stalled atomic.Uint64 // connections closed for a stream that could not be answered
	lasting atomic.Uint64 // checks that found a stream past its deadline with window to spare (tests read it)
}

// New returns a Watchdog whose connections must answer each request, and
// finish each write, within timeout.
func New(timeout time.Duration) *Watchdog {
	if timeout <= 0 {
		panic("h2watch: timeout must be > 0")
	}
	return &Watchdog{timeout: timeout}
}

// Stalled is the number of connections closed because a stream could
// not be answered, or a write finished, within the timeout.
func (w *Watchdog) Stalled() uint64 { return w.stalled.Load() }

// Streams is the number of streams open on the connections watched: the
// requests in progress, from their headers until their answer is written.
func (w *Watchdog) Streams() int64 { return w.open.Load() }

// Watch returns nc watched, to be handed to the HTTP/2 server in its
// place (its first bytes read are the client's preface). done is closed
// when the server's stop begins: from then on the watchdog no longer
// sets write deadlines, so that a stop that cuts the connection off is
// not undone. Closing the connection returned ends its watch.
func (w *Watchdog) Watch(nc net.Conn, done <-chan struct{}) net.Conn {
	c := &watchedConn{Conn: nc, dog: w, done: done, goAway: math.MaxUint32, initial: defaultWindow, window: defaultWindow}
	c.in.skip = len(http2.ClientPreface)
	c.onIn, c.onOut = c.received, c.sent
	return c
}

// watchedConn is a connection, watched. It is
// safe for concurrent use: the gRPC server reads from one goroutine and
// writes from another while the watchdog's timer fires in a third.
type watchedConn struct {
	net.Conn
	dog  *Watchdog
	done <-chan struct{} // closed when the stop begins

	mu      sync.Mutex
	in, out frameScanner
	onIn    func(frame, []byte) // c.received and c.sent, bound once
	onOut   func(frame, []byte)
	now     time.Time // the time of the bytes being read
	streams []stream  // the streams open, in the order they were opened
	lastID  uint32    // the highest stream the client opened
	goAway  uint32    // the last stream the server serves, once it sent GOAWAY
	initial int64     // the window of a new stream (the client's SETTINGS_INITIAL_WINDOW_SIZE)
	window  int64     // the connection's window
	timer   *time.Timer
	armed   bool // timer will fire
	closed  bool
	failed  bool // closed as stalled, and counted
}

// stream is an open stream as the watchdog sees it.
type stream struct {
	id     uint32
	window int64     // what the client lets the server send on it
	due    time.Time // when it is checked: the timeout after it was opened, then after each check
}

// defaultWindow is an HTTP/2 window before the client's SETTINGS or
// WINDOW_UPDATE change it.
const defaultWindow = 65535

// Read reads from the connection and follows the client's frames.
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.now = time.Time{}
		c.in.scan(p[:n], c.onIn)
		c.mu.Unlock()
	}
	return n, err
}

// Write writes to the connection within the timeout, and follows the
// server's frames. Once the stop began, the deadline is left as it is,
// so that a stop that cuts the connection off is not undone.
func (c *watchedConn) Write(p []byte) (int, error) {
	if !stopping(c.done) {
		c.Conn.SetWriteDeadline(time.Now().Add(c.dog.timeout))
	}
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.mu.Lock()
		c.out.scan(p[:n], c.onOut)
		c.mu.Unlock()
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !stopping(c.done) {
		c.fail()
	}
	return n, err
}

// stopping reports whether done is closed.
func stopping(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// fail counts the connection as stalled, once, and closes it.
func (c *watchedConn) fail() {
	c.mu.Lock()
	counted := c.failed
	c.failed = true
	c.mu.Unlock()
	if !counted {
		c.dog.stalled.Add(1)
	}
	c.Conn.Close()
}

// Close stops the watchdog, ends the streams open, and closes the
// connection.
func (c *watchedConn) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.dog.open.Add(-int64(len(c.streams)))
	c.streams = nil
	c.mu.Unlock()
	return c.Conn.Close()
}

// received follows a frame, or a value of one, from the client. Called
// with c.mu held.
func (c *watchedConn) received(f frame, v []byte) {
	switch {
	case v == nil && f.typ == http2.FrameHeaders:
		// A stream opens with a HEADERS frame of a new odd number; other
		// HEADERS are a request's trailers, or errors the server answers.
		if f.stream%2 == 1 && f.stream > c.lastID && f.stream <= c.goAway {
			c.lastID = f.stream
			c.open(f.stream)
		}
	case v == nil && f.typ == http2.FrameRSTStream:
		c.end(f.stream)
	case v != nil && f.typ == http2.FrameSettings:
		if http2.SettingID(binary.BigEndian.Uint16(v)) == http2.SettingInitialWindowSize {
			size := int64(binary.BigEndian.Uint32(v[2:]))
			for i := range c.streams {
				c.streams[i].window += size - c.initial
			}
			c.initial = size
		}
	case v != nil && f.typ == http2.FrameWindowUpdate:
		inc := int64(binary.BigEndian.Uint32(v) & (1<<31 - 1))
		if f.stream == 0 {
			c.window += inc
		} else if s := c.find(f.stream); s != nil {
			s.window += inc
		}
	}
}

// sent follows a frame, or a value of one, the server wrote. Called with
// c.mu held.
func (c *watchedConn) sent(f frame, v []byte) {
	switch {
	case v == nil && f.typ == http2.FrameData:
		c.window -= int64(f.length)
		if s := c.find(f.stream); s != nil {
			s.window -= int64(f.length)
		}
		if f.flags.Has(http2.FlagDataEndStream) {
			c.end(f.stream)
		}
	case v == nil && f.typ == http2.FrameHeaders && f.flags.Has(http2.FlagHeadersEndStream),
		v == nil && f.typ == http2.FrameRSTStream:
		c.end(f.stream)
	case v != nil && f.typ == http2.FrameGoAway:
		// The streams after the last one the server serves are dropped
		// without a word, and any the client opens after them too.
		c.goAway = min(c.goAway, binary.BigEndian.Uint32(v)&(1<<31-1))
		open := c.streams[:0]
		for _, s := range c.streams {
			if s.id <= c.goAway {
				open = append(open, s)
			}
		}
		c.dog.open.Add(-int64(len(c.streams) - len(open)))
		c.streams = open
	}
}

// open adds a stream the client opened, due the timeout from now, and
// arms the timer if it is not. The streams open before it are due no
// later, so an armed timer fires in time for it. Called with c.mu held.
func (c *watchedConn) open(id uint32) {
	if c.closed {
		return
	}
	if c.now.IsZero() {
		c.now = time.Now()
	}
	c.streams = append(c.streams, stream{id: id, window: c.initial, due: c.now.Add(c.dog.timeout)})
	c.dog.open.Add(1)
	if c.armed {
		return
	}
	c.armed = true
	if c.timer == nil {
		c.timer = time.AfterFunc(c.dog.timeout, c.check)
	} else {
		c.timer.Reset(c.dog.timeout)
	}
}

// end removes a stream that ended. Called with c.mu held.
func (c *watchedConn) end(id uint32) {
	for i := range c.streams {
		if c.streams[i].id == id {
			c.streams = append(c.streams[:i], c.streams[i+1:]...)
			c.dog.open.Add(-1)
			if len(c.streams) == 0 && cap(c.streams) > keptStreams {
				c.streams = nil // a burst's room is not kept
			}
			return
		}
	}
}

// keptStreams is the room for streams an idle connection keeps.
const keptStreams = 8

// find returns the open stream id, or nil. Called with c.mu held.
func (c *watchedConn) find(id uint32) *stream {
	for i := range c.streams {
		if c.streams[i].id == id {
			return &c.streams[i]
		}
	}
	return nil
}

// check runs when the timer fires: it closes the connection if a stream
// that is due cannot be written to, and otherwise arms the timer for the
// next stream due, if any stream is open.
func (c *watchedConn) check() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	var next time.Time
	stuck := false
	for i := range c.streams {
		s := &c.streams[i]
		if s.due.After(now) {
			if next.IsZero() || s.due.Before(next) {
				next = s.due
			}
			continue
		}
		if min(s.window, c.window) <= 0 {
			stuck = true
			break
		}
		s.due = now.Add(c.dog.timeout) // one that lasts: again later
		c.dog.lasting.Add(1)
		if next.IsZero() || s.due.Before(next) {
			next = s.due
		}
	}
	c.armed = !stuck && !next.IsZero()
	if c.armed {
		c.timer.Reset(next.Sub(now))
	}
	c.mu.Unlock()
	if stuck {
		c.fail()
	}
}
