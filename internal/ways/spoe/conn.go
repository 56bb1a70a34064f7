package spoe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"time"
)

// conn is one connection from HAProxy. One goroutine serves it: it reads
// whatever frames have arrived, decides the NOTIFYs among them, and writes
// all their ACKs back in one write. So a connection that HAProxy keeps
// busy with pipelined frames costs a wake-up per batch, not per request.
type conn struct {
	s        *Server
	nc       net.Conn
	done     <-chan struct{} // closed when shutdown begins
	in       []byte          // frames read and not yet handled, at most maxFrame+4 bytes
	out      []byte          // frames to write
	msgs     []message
	tag      []byte    // a tag made text (an address, a number)
	val      []byte    // a variable's value being made
	maxFrame int       // the frame size agreed in the HELLO, or ours before it
	hello    bool      // the HELLO handshake is done
	c        counts    // this batch's counts, added to the server's after it
	rdl, wdl time.Time // the read and write deadlines set last
}

// slack is how far an idle connection's read deadline, or a write
// deadline, may lag behind its exact value: moving a deadline costs a
// timer update, so they move at most once per slack while busy.
const slack = time.Second

// fresh reports whether a deadline dl set for a timeout d is close enough
// to now+d to stay: not after it, and behind it by less than slack (or a
// quarter of d, for short timeouts).
func fresh(dl, now time.Time, d time.Duration) bool {
	want := now.Add(d)
	return !dl.After(want) && dl.After(want.Add(-min(slack, d/4)))
}

// counts are what a batch adds to the server's counters.
type counts struct {
	frames, notifies, allowed, refused, dryRun, bad uint64
}

// outFlush is the size at which replies are written before the batch
// ends, so that a batch of many small NOTIFYs never holds much memory.
const outFlush = 64 << 10

// serve runs the connection until it ends. Every way out writes what is
// due and, where the protocol asks for one, an AGENT-DISCONNECT.
func (c *conn) serve() {
	c.in = make([]byte, 0, 4096)
	c.maxFrame = c.s.maxFrame
	start := time.Now()
	partialSince := time.Time{}
	for {
		// Wait for more bytes: the hello, the rest of a frame, or the
		// next frame of an idle connection, each within its own time.
		now := time.Now()
		var deadline time.Time
		switch {
		case !c.hello:
			deadline = start.Add(c.s.cfg.HelloTimeout)
		case len(c.in) > 0:
			deadline = partialSince.Add(c.s.cfg.FrameTimeout)
		case fresh(c.rdl, now, c.s.cfg.IdleTimeout):
			deadline = c.rdl // recent enough: moving a deadline costs
		default:
			deadline = now.Add(c.s.cfg.IdleTimeout)
		}
		if !deadline.Equal(c.rdl) {
			c.nc.SetReadDeadline(deadline)
			c.rdl = deadline
		}
		if c.shuttingDown() { // after the deadline: shutdown may have set its own before
			c.disconnect(statusNormal)
			return
		}
		if len(c.in) == cap(c.in) {
			c.grow()
		}
		n, err := c.nc.Read(c.in[len(c.in):cap(c.in)])
		if n > 0 {
			if len(c.in) == 0 {
				partialSince = time.Now()
			}
			c.in = c.in[:len(c.in)+n]
			rest, status, err := c.handle(c.in)
			c.s.add(&c.c)
			if err != nil {
				return
			}
			if status >= 0 {
				c.disconnect(status)
				return
			}
			if len(c.out) > 0 && c.flush() != nil {
				return
			}
			if len(rest) > 0 && len(rest) != len(c.in) {
				partialSince = time.Now()
			}
			c.in = c.in[:copy(c.in, rest)]
		}
		if err != nil {
			c.readError(err)
			return
		}
	}
}

// shuttingDown reports whether the server's shutdown began.
func (c *conn) shuttingDown() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// grow enlarges the read buffer for a frame longer than it holds; the
// frame's length was checked against maxFrame before, so the buffer never
// passes maxFrame+4 bytes.
func (c *conn) grow() {
	size := min(2*cap(c.in), c.maxFrame+4)
	if len(c.in) >= 4 {
		size = max(size, 4+int(binary.BigEndian.Uint32(c.in)))
	}
	in := make([]byte, len(c.in), size)
	copy(in, c.in)
	c.in = in
}

// readError ends the connection after a failed read: a timeout is
// answered with an AGENT-DISCONNECT, counted, and logged at debug level;
// a peer that closed, or a shutdown, is normal.
func (c *conn) readError(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if c.shuttingDown() {
			c.disconnect(statusNormal)
			return
		}
		c.s.stats.timeouts.Add(1)
		c.s.log.Debug("spoe: connection timed out", "remote", c.nc.RemoteAddr().String(), "hello", c.hello, "pending", len(c.in))
		c.disconnect(statusTimeout)
	}
}

// handle handles every complete frame at the start of b and returns what
// is left of b. A status of 0 or more ends the connection with an
// AGENT-DISCONNECT of that status; -1 keeps it.
func (c *conn) handle(b []byte) (rest []byte, status int, err error) {
	now := c.s.now()
	for len(b) >= 4 {
		size := int(binary.BigEndian.Uint32(b))
		switch {
		case size > c.maxFrame:
			c.s.stats.tooBig.Add(1)
			return nil, statusTooBig, nil
		case size < 5:
			return nil, c.bad(statusInvalid), nil
		}
		if len(b) < 4+size {
			break
		}
		c.c.frames++
		if status := c.frame(now, b[4:4+size]); status >= 0 {
			return nil, status, nil
		}
		b = b[4+size:]
		if len(c.out) >= outFlush {
			if err := c.flush(); err != nil {
				return nil, -1, err
			}
		}
	}
	return b, -1, nil
}

// bad counts a frame that breaks the protocol and returns status.
func (c *conn) bad(status int) int {
	c.s.stats.badFrames.Add(1)
	return status
}

// frame handles one frame. It returns a status to end the connection with,
// or -1.
func (c *conn) frame(now time.Time, f []byte) int {
	h, off, err := readHeader(f)
	if err != nil {
		return c.bad(statusInvalid)
	}
	if h.flags&flagFin == 0 {
		// Nothing here announces fragmentation, so HAProxy never
		// fragments; a fragment is a broken peer.
		return c.bad(statusNoFragments)
	}
	p := f[off:]
	switch h.typ {
	case frameHAProxyHello:
		if c.hello {
			return c.bad(statusInvalid)
		}
		return c.helloFrame(p)
	case frameHAProxyDisconn:
		return statusNormal
	case frameNotify:
		if !c.hello {
			return c.bad(statusInvalid)
		}
		c.c.notifies++
		return c.notify(now, h, p)
	case frameUnset:
		return c.bad(statusNoFragments)
	}
	return -1 // unknown frames may be skipped
}

// ourVersion is the SPOP version spoken here; ourCaps the capabilities
// announced when HAProxy announces them too.
const ourVersion = "2.0"

var ourCaps = []string{"pipelining", "async"}

// helloFrame answers a HAPROXY-HELLO with an AGENT-HELLO: version 2.0,
// the smaller of the two frame sizes, and those of pipelining and async
// that HAProxy offers (an ACK is always sent on the NOTIFY's own
// connection, which async allows). A health check's HELLO is answered and
// the connection closed.
func (c *conn) helloFrame(p []byte) int {
	var versions, caps []byte
	var frameSize uint64
	var haveSize, health bool
	err := readKV(p, func(name []byte, v value) {
		switch string(name) {
		case "supported-versions":
			if v.typ == typeString {
				versions = v.bytes
			}
		case "max-frame-size":
			if v.typ == typeUint32 || v.typ == typeInt32 || v.typ == typeUint64 || v.typ == typeInt64 {
				frameSize, haveSize = v.num, true
			}
		case "capabilities":
			if v.typ == typeString {
				caps = v.bytes
			}
		case "healthcheck":
			health = v.typ == typeBool && v.num == 1
		}
	})
	switch {
	case err != nil:
		return c.bad(statusInvalid)
	case versions == nil:
		return c.bad(statusNoVersion)
	case !haveSize:
		return c.bad(statusNoFrameSize)
	case caps == nil:
		return c.bad(statusNoCaps)
	case !supports(versions):
		return c.bad(statusBadVersion)
	case frameSize < minFrameSize:
		return c.bad(statusBadSize)
	}
	c.maxFrame = int(min(frameSize, uint64(c.s.maxFrame)))
	var agreed []string
	for _, want := range ourCaps {
		if hasItem(caps, want) {
			agreed = append(agreed, want)
		}
	}
	b, at := beginFrame(c.out, frameAgentHello, 0, 0)
	b = appendString(b, "version")
	b = appendTypedString(b, []byte(ourVersion))
	b = appendString(b, "max-frame-size")
	b = appendTypedUint32(b, uint32(c.maxFrame))
	b = appendString(b, "capabilities")
	b = appendTypedString(b, []byte(strings.Join(agreed, ",")))
	c.out = endFrame(b, at)
	c.hello = true
	if health {
		c.s.stats.healthChecks.Add(1)
		return statusClose
	}
	return -1
}

// statusClose ends a connection without an AGENT-DISCONNECT.
const statusClose = 1 << 16

// supports reports whether a supported-versions list ("2.0, 1.5") has
// major version 2.
func supports(list []byte) bool {
	for item := range bytes.SplitSeq(list, []byte(",")) {
		major, _, _ := bytes.Cut(bytes.TrimSpace(item), []byte("."))
		if string(major) == "2" {
			return true
		}
	}
	return false
}

// hasItem reports whether a comma-separated list holds item, spaces
// ignored.
func hasItem(list []byte, item string) bool {
	for it := range bytes.SplitSeq(list, []byte(",")) {
		if string(bytes.TrimSpace(it)) == item {
			return true
		}
	}
	return false
}

// flush writes the pending frames, within the write timeout.
func (c *conn) flush() error {
	if now := time.Now(); !fresh(c.wdl, now, c.s.cfg.WriteTimeout) {
		c.wdl = now.Add(c.s.cfg.WriteTimeout)
		c.nc.SetWriteDeadline(c.wdl)
	}
	_, err := c.nc.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		c.s.stats.writeErrors.Add(1)
	}
	return err
}

// disconnect writes the pending frames and an AGENT-DISCONNECT with
// status (none for statusClose), best effort, before the connection is
// closed. A protocol error is logged at debug level: the counters say how
// often.
func (c *conn) disconnect(status int) {
	if status != statusClose {
		if status != statusNormal && status != statusTimeout {
			c.s.log.Debug("spoe: closing a connection that broke the protocol", "remote", c.nc.RemoteAddr().String(),
				"status", status, "reason", statusMessages[status])
		}
		c.out = appendDisconnect(c.out, status)
	}
	if len(c.out) > 0 {
		c.flush()
	}
}
