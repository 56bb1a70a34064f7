package h2unary

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// This file owns a connection's life: the handshake, the loop that reads
// one whole frame at a time and flushes the answers when no whole frame
// of input is left, the deadlines behind the loop's reads (handshake,
// idle, the streams' request timeouts), and the stop.

// maxReadFrame is the largest frame the client may send: HTTP/2's
// default SETTINGS_MAX_FRAME_SIZE, which the server does not raise.
const maxReadFrame = 16 << 10

// frameHeaderLen is the length of an HTTP/2 frame header.
const frameHeaderLen = 9

// writeBufferBytes is the size of a connection's write buffer: a write
// may carry this much of many answers.
const writeBufferBytes = 16 << 10

// conn is one connection being served. Only its goroutine touches it.
type conn struct {
	s    *Server
	nc   net.Conn
	done <-chan struct{} // closed when the stop begins
	br   *bufio.Reader   // holds a whole frame, so that a read never stops inside one
	bw   *bufio.Writer
	fr   *http2.Framer // reads only, from br; frames are written by answer.go
	dec  *hpack.Decoder
	hdr  headerBlock // the request header block being read

	streams map[uint32]*stream
	free    []*stream // streams kept for reuse
	lastID  uint32    // the highest stream the client opened

	// What the client lets the server send (answer.go).
	sendWindow  int64 // the connection's window
	peerInitial int64 // a stream's window to begin with: the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   int   // the client's SETTINGS_MAX_FRAME_SIZE
	blocked     []*stream

	// What the server lets the client send (streams.go).
	recvWindow int64 // what the client may still send on the connection
	credit     int64 // bytes consumed and not yet given back by WINDOW_UPDATE

	out  []byte // the answer being made
	hbuf []byte // a header block being made

	deadline  time.Time // the read deadline set
	idleSince time.Time // when the last stream ended, or the connection began
	settled   bool      // the client's first SETTINGS arrived
	stopping  bool      // GOAWAY sent: no new streams
	stopBy    time.Time // when a stopping connection closes whatever is left
	peerGone  bool      // the client sent GOAWAY
	failed    bool      // closed stalled, and counted
}

// Windows the server announces. A stream's is one whole message with
// room for padding, so that a request needs no WINDOW_UPDATE; the
// connection's is two, so that a client's messages not yet complete hold
// at most that much of the server's memory.
func (s *Server) streamWindow() int64 {
	return min(int64(s.cfg.MaxMessageBytes)+5+maxReadFrame, 1<<31-1)
}

func (s *Server) connWindow() int64 {
	return min(2*int64(s.cfg.MaxMessageBytes)+64<<10, 1<<31-1)
}

func newConn(s *Server, nc net.Conn, done <-chan struct{}) *conn {
	c := &conn{s: s, nc: nc, done: done, streams: map[uint32]*stream{},
		sendWindow: initialWindow, peerInitial: initialWindow, peerFrame: maxReadFrame,
		recvWindow: s.connWindow()}
	c.br = bufio.NewReaderSize(nc, frameHeaderLen+maxReadFrame)
	c.bw = bufio.NewWriterSize(deadlineWriter{c}, writeBufferBytes)
	c.fr = http2.NewFramer(io.Discard, c.br)
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.dec = hpack.NewDecoder(initialTableSize, c.hdr.field)
	c.dec.SetMaxStringLength(s.cfg.MaxHeaderBytes)
	c.hdr.max = s.cfg.MaxHeaderBytes
	return c
}

// initialWindow and initialTableSize are HTTP/2's defaults.
const (
	initialWindow    = 65535
	initialTableSize = 4096
)

// serve runs the connection until it ends.
func (c *conn) serve() {
	start := time.Now()
	c.idleSince = start
	c.writeSettings()
	if c.bw.Flush() != nil {
		return
	}
	c.setDeadline(start.Add(c.s.cfg.HandshakeTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		return
	}
	for !c.failed {
		if !c.wholeFrameBuffered() {
			c.giveCredit()
			if c.bw.Flush() != nil {
				return
			}
			if (c.stopping || c.peerGone) && len(c.streams) == 0 {
				return
			}
			if !c.await() {
				return
			}
			continue
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.frameError(err)
			continue
		}
		if !c.settled {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				c.goAway(http2.ErrCodeProtocol, "the first frame is not SETTINGS")
				return
			}
			c.settled = true
		}
		c.frame(f)
	}
}

// wholeFrameBuffered reports whether the next frame is read in full,
// without blocking.
func (c *conn) wholeFrameBuffered() bool {
	n := c.br.Buffered()
	if n < frameHeaderLen {
		return false
	}
	h, _ := c.br.Peek(frameHeaderLen)
	length := frameLength(h)
	return length > maxReadFrame || n >= frameHeaderLen+length // one too large is refused unread
}

// await blocks until a whole frame is buffered, handling what falls due
// meanwhile: the stop, the handshake's, a stream's or the idle deadline.
// It reports false when the connection is to be closed.
func (c *conn) await() bool {
	for {
		c.setDeadline(c.nextDeadline())
		if !c.stopping && isClosed(c.done) {
			c.stop()
			if c.bw.Flush() != nil || len(c.streams) == 0 {
				return false
			}
			continue
		}
		h, err := c.br.Peek(frameHeaderLen)
		if err == nil {
			length := frameLength(h)
			if length > maxReadFrame {
				return true // the Framer refuses it, without reading it
			}
			_, err = c.br.Peek(frameHeaderLen + length)
		}
		if err == nil {
			return true
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		now := time.Now()
		if now.Before(c.deadline) { // interrupted: the stop began, or the server cuts connections off
			if c.stopping {
				return false
			}
			c.deadline = time.Time{} // the interruption replaced it
			continue
		}
		if !c.expire(now) {
			return false
		}
		c.giveCredit()
		if c.bw.Flush() != nil || (c.stopping || c.peerGone) && len(c.streams) == 0 {
			return false
		}
	}
}

// isClosed reports whether done is closed.
func isClosed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// setDeadline sets the read deadline to t, unless it is set already.
func (c *conn) setDeadline(t time.Time) {
	if !t.Equal(c.deadline) {
		c.deadline = t
		c.nc.SetReadDeadline(t)
	}
}

// nextDeadline is when the connection must next be looked at, if nothing
// arrives: the end of the handshake, the first stream due, the end of
// the idle time, or the end of the stop.
func (c *conn) nextDeadline() time.Time {
	var t time.Time
	switch {
	case !c.settled:
		t = c.idleSince.Add(c.s.cfg.HandshakeTimeout)
	case len(c.streams) > 0:
		for _, st := range c.streams {
			if t.IsZero() || st.deadline.Before(t) {
				t = st.deadline
			}
		}
	default:
		t = c.idleSince.Add(c.s.cfg.IdleTimeout)
	}
	if c.stopping && c.stopBy.Before(t) {
		t = c.stopBy
	}
	return t
}

// expire handles what is due at now, and reports false when the
// connection is to be closed: the handshake not done, an answer not
// written (stalled), the idle time or the stop over. A request whose
// message is not complete is answered DEADLINE_EXCEEDED and freed.
func (c *conn) expire(now time.Time) bool {
	if !c.settled || c.stopping && !now.Before(c.stopBy) {
		return false
	}
	if len(c.streams) == 0 {
		if now.Before(c.idleSince.Add(c.s.cfg.IdleTimeout)) {
			return true
		}
		c.goAway(http2.ErrCodeNo, "idle")
		return false
	}
	for _, st := range c.streams {
		if now.Before(st.deadline) {
			continue
		}
		if st.pending != nil {
			c.stall()
			return false
		}
		c.fail(st, codes.DeadlineExceeded, "grpc: the request's message did not arrive within "+c.s.cfg.RequestTimeout.String())
	}
	return true
}

// stop begins the graceful stop: GOAWAY, so that the client opens no
// more streams; the streams open are served within RequestTimeout.
func (c *conn) stop() {
	c.stopping = true
	c.stopBy = time.Now().Add(c.s.cfg.RequestTimeout)
	c.writeGoAway(http2.ErrCodeNo, nil)
}

// goAway ends the connection for code, telling the client why.
func (c *conn) goAway(code http2.ErrCode, why string) {
	c.writeGoAway(code, []byte(why))
	c.bw.Flush()
	c.failed = true // the loop ends
}

// stall closes the connection, counted as stalled once.
func (c *conn) stall() {
	if !c.failed && !isClosed(c.done) {
		c.s.stalled.Add(1)
	}
	c.failed = true
	c.nc.Close()
}

// close frees what the connection holds: its streams' places among the
// calls in progress.
func (c *conn) close() {
	for _, st := range c.streams {
		c.forget(st)
	}
}

// frameError handles an error the Framer found in the client's frames.
func (c *conn) frameError(err error) {
	var ce http2.ConnectionError
	var se http2.StreamError
	switch {
	case errors.As(err, &ce):
		why := ""
		if d := c.fr.ErrorDetail(); d != nil {
			why = d.Error()
		}
		c.goAway(http2.ErrCode(ce), why)
	case errors.As(err, &se):
		c.writeRST(se.StreamID, se.Code)
		if st := c.streams[se.StreamID]; st != nil {
			c.forget(st)
		}
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize, "frame too large")
	default:
		c.goAway(http2.ErrCodeProtocol, err.Error())
	}
}

// deadlineWriter writes to the connection within RequestTimeout (after
// the stop began, within its end): a client that reads nothing fills
// the socket's buffers, and the write that would wait longer fails and
// closes the connection, counted as stalled.
type deadlineWriter struct{ c *conn }

func (w deadlineWriter) Write(p []byte) (int, error) {
	c := w.c
	dl := time.Now().Add(c.s.cfg.RequestTimeout)
	if c.stopping && c.stopBy.Before(dl) {
		dl = c.stopBy
	}
	c.nc.SetWriteDeadline(dl)
	n, err := c.nc.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.stall()
	}
	return n, err
}

// frameLength is the payload length of the frame header h.
func frameLength(h []byte) int { return int(binary.BigEndian.Uint32(h[:4]) >> 8) }
