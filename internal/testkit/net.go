package testkit

import (
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// This file owns the in-memory network: connections that buffer what is
// written, as sockets do (net.Pipe's writes wait for a reader, which
// deadlocks two ends that both write first, as HTTP/2's do), bounded
// only when a test asks, and a listener that accepts them.
//
// Every wait is on a channel, and a mutex is never held across one, so
// that a goroutine blocked on a connection of a synctest bubble is
// durably blocked and the bubble's time moves on.

// Pipe returns the two ends of an in-memory connection. What one end
// writes the other reads, in order; a write returns once its bytes are
// buffered, and waits only while a bound set by SetReadBuffer or
// SetWriteBuffer is reached. Deadlines, Close and CloseWrite behave as a
// TCP connection's do. Create it in the goroutine (or the synctest
// bubble) that uses it.
func Pipe() (*Conn, *Conn) {
	n := pipes.Add(1)
	a := &Conn{local: pipeAddr("pipe:" + strconv.FormatUint(n, 10) + "a"), remote: pipeAddr("pipe:" + strconv.FormatUint(n, 10) + "b")}
	b := &Conn{local: a.remote, remote: a.local}
	ab, ba := newFlow(), newFlow()
	a.in, a.out, b.in, b.out = ba, ab, ab, ba
	return a, b
}

// pipes numbers the pipes, for their addresses.
var pipes atomic.Uint64

// Conn is one end of a Pipe: a net.Conn, with a socket's buffer sizes and
// half-close. It is safe for concurrent use.
type Conn struct {
	in, out       *flow // what this end reads; what it writes
	local, remote net.Addr
}

var _ net.Conn = (*Conn)(nil)

// Read reads what the other end wrote, waiting until there is some, the
// other end closes (io.EOF), this end is closed or the read deadline
// passes (os.ErrDeadlineExceeded, as a socket's read fails even with
// data buffered).
func (c *Conn) Read(p []byte) (int, error) {
	f := c.in
	for {
		f.mu.Lock()
		switch {
		case f.rclosed:
			f.mu.Unlock()
			return 0, c.opError("read", net.ErrClosed)
		case f.rdl.expired():
			f.mu.Unlock()
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		case len(f.buf) > 0:
			n := copy(p, f.buf)
			f.buf = f.buf[n:]
			if len(f.buf) == 0 {
				f.buf = nil
			}
			f.changed()
			f.mu.Unlock()
			return n, nil
		case f.wclosed || len(p) == 0:
			f.mu.Unlock()
			if len(p) == 0 {
				return 0, nil
			}
			return 0, io.EOF
		}
		change, timeout := f.change, f.rdl.timeout()
		f.mu.Unlock()
		select {
		case <-change:
		case <-timeout:
		}
	}
}

// Write writes p to the other end, waiting while its buffer is full,
// until this end is closed (net.ErrClosed), the other end is
// (syscall.EPIPE) or the write deadline passes (os.ErrDeadlineExceeded);
// it returns how much of p was buffered.
func (c *Conn) Write(p []byte) (int, error) {
	f := c.out
	n := 0
	for {
		f.mu.Lock()
		switch {
		case f.wclosed:
			f.mu.Unlock()
			return n, c.opError("write", net.ErrClosed)
		case f.rclosed:
			f.mu.Unlock()
			return n, c.opError("write", syscall.EPIPE)
		case f.wdl.expired():
			f.mu.Unlock()
			return n, c.opError("write", os.ErrDeadlineExceeded)
		case n == len(p):
			f.mu.Unlock()
			return n, nil
		}
		if room := f.room(); room > 0 {
			m := min(room, len(p)-n)
			f.buf = append(f.buf, p[n:n+m]...)
			n += m
			f.changed()
			f.mu.Unlock()
			continue
		}
		change, timeout := f.change, f.wdl.timeout()
		f.mu.Unlock()
		select {
		case <-change:
		case <-timeout:
		}
	}
}

// Close closes this end: its reads and writes fail with net.ErrClosed,
// what it had not read is dropped, and the other end reads io.EOF after
// what this end wrote, and fails to write (syscall.EPIPE).
func (c *Conn) Close() error {
	c.in.close(true)
	c.out.close(false)
	return nil
}

// CloseWrite shuts this end's writing down: the other end reads io.EOF
// after what was written, and this end can still read.
func (c *Conn) CloseWrite() error {
	c.out.close(false)
	return nil
}

// SetReadBuffer sets this end's receive buffer: with the other end's
// send buffer (SetWriteBuffer), it bounds what the other end may have
// written that this end has not read. Until either is set, that is
// unbounded.
func (c *Conn) SetReadBuffer(bytes int) error {
	c.in.setBound(&c.in.rbuf, bytes)
	return nil
}

// SetWriteBuffer sets this end's send buffer: with the other end's
// receive buffer (SetReadBuffer), it bounds what this end may have
// written that the other has not read.
func (c *Conn) SetWriteBuffer(bytes int) error {
	c.out.setBound(&c.out.wbuf, bytes)
	return nil
}

// Buffered is how many bytes written to this end wait to be read.
func (c *Conn) Buffered() int {
	c.in.mu.Lock()
	defer c.in.mu.Unlock()
	return len(c.in.buf)
}

// LocalAddr is this end's address, "pipe:<n>a" or "pipe:<n>b".
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr is the other end's address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read and the write deadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	c.SetWriteDeadline(t)
	return nil
}

// SetReadDeadline sets when a read fails with os.ErrDeadlineExceeded; a
// deadline passed fails a pending read at once; the zero time sets none.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.in.setDeadline(&c.in.rdl, t)
	return nil
}

// SetWriteDeadline sets when a write fails with os.ErrDeadlineExceeded.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.out.setDeadline(&c.out.wdl, t)
	return nil
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "pipe", Source: c.local, Addr: c.remote, Err: err}
}

// flow is one direction of a Pipe: what the writing end wrote and the
// reading end has not read, with each end's state and deadline.
type flow struct {
	mu      sync.Mutex
	change  chan struct{} // closed, and replaced, at every change below
	buf     []byte
	rbuf    int      // the reader's receive buffer, 0: unset
	wbuf    int      // the writer's send buffer, 0: unset
	rclosed bool     // the reading end is closed
	wclosed bool     // the writing end is closed or shut down
	rdl     deadline // the reading end's read deadline
	wdl     deadline // the writing end's write deadline
}

func newFlow() *flow { return &flow{change: make(chan struct{})} }

// changed wakes whoever waits on f. Called with f.mu held.
func (f *flow) changed() {
	close(f.change)
	f.change = make(chan struct{})
}

// room is how much more may be buffered. Called with f.mu held.
func (f *flow) room() int {
	if f.rbuf == 0 && f.wbuf == 0 {
		return int(^uint(0) >> 1)
	}
	return f.rbuf + f.wbuf - len(f.buf)
}

func (f *flow) setBound(b *int, bytes int) {
	f.mu.Lock()
	*b = max(bytes, 1)
	f.changed()
	f.mu.Unlock()
}

// close closes the reading end (reader) or the writing end.
func (f *flow) close(reader bool) {
	f.mu.Lock()
	if reader {
		f.rclosed, f.buf = true, nil
	} else {
		f.wclosed = true
	}
	f.changed()
	f.mu.Unlock()
}

func (f *flow) setDeadline(d *deadline, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.at = t
	if d.passed != nil && d.closed {
		d.passed, d.closed = nil, false
	}
	if !t.IsZero() {
		if wait := time.Until(t); wait <= 0 {
			d.expire()
		} else {
			gen := d.gen
			d.timer = time.AfterFunc(wait, func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				if d.gen == gen {
					d.expire()
				}
			})
		}
	}
	f.changed()
}

// deadline is one deadline of a flow, guarded by its mutex.
type deadline struct {
	at     time.Time
	gen    uint64        // counts the deadlines set, so that a stale timer does nothing
	timer  *time.Timer   // fires at at
	passed chan struct{} // closed once at has passed; nil until waited on or passed
	closed bool          // passed is closed
}

// expired reports whether the deadline has passed.
func (d *deadline) expired() bool { return d.closed }

// timeout is closed once the deadline passes.
func (d *deadline) timeout() <-chan struct{} {
	if d.passed == nil {
		d.passed = make(chan struct{})
	}
	return d.passed
}

func (d *deadline) expire() {
	if d.passed == nil {
		d.passed = make(chan struct{})
	}
	if !d.closed {
		close(d.passed)
		d.closed = true
	}
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// Listener is a net.Listener of Pipes: Dial makes one and queues its
// other end for Accept. Create it with NewListener, in the goroutine or
// synctest bubble that uses it. It is safe for concurrent use.
type Listener struct {
	conns chan net.Conn
	done  chan struct{} // closed by Close
	once  sync.Once
	addr  pipeAddr
}

var _ net.Listener = (*Listener)(nil)

// backlog is how many connections a Listener holds before Accept takes
// them; Dial waits past it.
const backlog = 128

// NewListener returns an open Listener.
func NewListener() *Listener {
	n := pipes.Add(1)
	return &Listener{conns: make(chan net.Conn, backlog), done: make(chan struct{}),
		addr: pipeAddr("listener:" + strconv.FormatUint(n, 10))}
}

// Dial returns the client's end of a new Pipe whose other end the next
// Accept returns; an error, net.ErrClosed, once the listener is closed.
func (l *Listener) Dial() (*Conn, error) {
	client, server := Pipe()
	if err := l.Offer(server); err != nil {
		return nil, err
	}
	return client, nil
}

// Offer queues c for Accept, as if a client had dialled: a test hands
// over a connection it wrapped. It fails with net.ErrClosed once the
// listener is closed.
func (l *Listener) Offer(c net.Conn) error {
	select {
	case <-l.done:
		return &net.OpError{Op: "dial", Net: "pipe", Addr: l.addr, Err: net.ErrClosed}
	default:
	}
	select {
	case l.conns <- c:
		return nil
	case <-l.done:
		return &net.OpError{Op: "dial", Net: "pipe", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Accept returns the next connection dialled or offered, waiting for
// one; net.ErrClosed once the listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
	default:
		select {
		case c := <-l.conns:
			return c, nil
		case <-l.done:
		}
	}
	return nil, &net.OpError{Op: "accept", Net: "pipe", Addr: l.addr, Err: net.ErrClosed}
}

// Close makes Accept and Dial fail, and closes the connections dialled
// that were not accepted. It may be called more than once.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr is the listener's address, "listener:<n>".
func (l *Listener) Addr() net.Addr { return l.addr }
