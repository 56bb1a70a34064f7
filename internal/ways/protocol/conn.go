package protocol

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

const (
	// readBufSize is the resting size of a connection's read buffer. It
	// grows (to at most MaxLine+1) only while one line does not fit.
	readBufSize = 4 << 10
	// outBufSize is the initial capacity of a connection's reply buffer; it
	// grows with use up to about outFlush and stays there.
	outBufSize = 512
	// outFlush is the amount of pending replies that is written even while
	// more complete lines are buffered. It bounds the reply buffer.
	outFlush = 16 << 10
)

// conn serves one client connection. It is used by one goroutine only.
type conn struct {
	nc      net.Conn
	decider decide.Allower
	batch   *batcher       // nil unless decider is a decide.BatchAllower
	charge  decide.Charger // set: lines are charges, not queries (charge.go)
	maxLine int
	now     func() time.Time
	log     *slog.Logger
	stats   *counters

	small []byte // the resting read buffer
	buf   []byte // the read buffer now: small, or larger while a long line arrives
	r, w  int    // buf[r:w] has been read and not yet answered; it holds no '\n'
	out   []byte // replies not yet written

	// queries counts the requests this connection answered. Only its own
	// goroutine writes it, so a query touches no line another core writes;
	// Server.Stats sums it over the live connections.
	queries atomic.Uint64
	_       [56]byte // keeps the next allocation's writes off queries' line
}

// newConn returns a conn serving nc with lines of at most maxLine bytes,
// deciding at the time now gives.
func newConn(nc net.Conn, d decide.Allower, maxLine int, now func() time.Time, stats *counters, log *slog.Logger) *conn {
	small := make([]byte, min(readBufSize, maxLine+1))
	var b *batcher
	if bd, ok := d.(decide.BatchAllower); ok {
		b = newBatcher(bd)
	}
	return &conn{
		batch:   b,
		nc:      nc,
		decider: d,
		maxLine: maxLine,
		now:     now,
		log:     log,
		stats:   stats,
		small:   small,
		buf:     small,
		out:     make([]byte, 0, outBufSize),
	}
}

// serve reads requests and writes replies until end of input, an error, an
// over-long line, or an interrupted read (shutdown). It does not close nc.
func (c *conn) serve() {
	for {
		if c.w == len(c.buf) {
			c.makeRoom()
		}
		n, err := c.nc.Read(c.buf[c.w:])
		if n > 0 {
			c.w += n
			if !c.answer(c.now()) {
				return
			}
			// Everything buffered now is one partial line.
			if c.w-c.r > c.maxLine {
				c.lineTooLong()
				return
			}
		}
		if err != nil {
			c.readFailed(err)
			return
		}
	}
}

// readFailed ends the connection after a read returned err.
func (c *conn) readFailed(err error) {
	switch {
	case errors.Is(err, io.EOF):
		c.answerLast()
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed):
		// Shutdown interrupted the read: the lines read are answered.
	default:
		c.log.Debug("protocol: read failed", "remote", remote(c.nc), "err", err)
	}
}

// answer answers every complete line buffered, writing the replies once
// there are no complete lines left, or earlier whenever outFlush bytes are
// pending. It reports false if a write failed.
func (c *conn) answer(now time.Time) bool {
	for {
		var consumed, lines, bad int
		switch {
		case c.batch != nil:
			c.out, consumed, lines = c.batch.answer(c.out, c.buf[c.r:c.w], now, outFlush)
		case c.charge != nil:
			c.out, consumed, lines, bad = answerCharges(c.out, c.buf[c.r:c.w], now, c.charge, outFlush)
		default:
			c.out, consumed, lines = answerLines(c.out, c.buf[c.r:c.w], now, c.decider, outFlush)
		}
		c.r += consumed
		if lines > 0 {
			c.queries.Store(c.queries.Load() + uint64(lines))
		}
		if bad > 0 {
			c.stats.bad.Add(uint64(bad)) // after the lines: ChargeServer.Stats reads it first
		}
		if len(c.out) < outFlush {
			break
		}
		if !c.flush() {
			return false
		}
	}
	if c.r == c.w {
		// Drained: start again at the front of the resting buffer.
		c.r, c.w = 0, 0
		c.buf = c.small
	}
	return c.flush()
}

// answerLast answers the line left without '\n' at end of input, if any,
// and writes the pending replies. End of input terminates that line.
func (c *conn) answerLast() {
	if c.w > c.r {
		line := trimCR(c.buf[c.r:c.w])
		ok := true
		if c.charge != nil {
			c.out, ok = charge(c.out, c.charge, c.now(), line)
		} else {
			c.out = appendReply(c.out, answer(c.decider, c.now(), line))
		}
		c.r = c.w
		c.queries.Store(c.queries.Load() + 1)
		if !ok {
			c.stats.bad.Add(1) // after the line: ChargeServer.Stats reads it first
		}
	}
	c.flush()
}

// flush writes the pending replies. It reports false if the write failed.
func (c *conn) flush() bool {
	if len(c.out) == 0 {
		return true
	}
	_, err := c.nc.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
			c.log.Debug("protocol: write failed", "remote", remote(c.nc), "err", err)
		}
		return false
	}
	return true
}

// makeRoom makes space at the end of a full read buffer, by moving the
// partial line to the front when that frees at least half the buffer, or
// else by growing the buffer (to at most maxLine+1 bytes).
func (c *conn) makeRoom() {
	pending := c.w - c.r
	if c.r > 0 && (pending <= len(c.buf)/2 || len(c.buf) > c.maxLine) {
		copy(c.buf, c.buf[c.r:c.w])
		c.r, c.w = 0, pending
		return
	}
	// pending <= maxLine holds (serve checks it after every read), so a
	// buffer of maxLine+1 bytes always has room after compaction above.
	nb := make([]byte, min(2*len(c.buf), c.maxLine+1))
	copy(nb, c.buf[c.r:c.w])
	c.buf = nb
	c.r, c.w = 0, pending
}

// lineTooLong records a line longer than maxLine; the caller closes nc.
// The replies to the lines before it have already been written.
func (c *conn) lineTooLong() {
	c.stats.lineTooLong.Add(1)
	c.log.Warn("protocol: request line too long, closing connection",
		"remote", remote(c.nc), "local", c.nc.LocalAddr().String(),
		"bytes", c.w-c.r, "max_bytes", c.maxLine)
}

// remote names the peer of nc for logs.
func remote(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	return "unix"
}
