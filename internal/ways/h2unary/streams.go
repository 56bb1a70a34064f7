package h2unary

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file owns what the client sends: the frames read, dispatched; a
// request's header block (HEADERS and CONTINUATION, decoded as they
// come); its message, gathered from DATA frames behind gRPC's 5-byte
// prefix; the server's flow-control windows opened as the data is
// consumed; and the method, run when the message is complete.

// stream is a call in progress: its request being read, or its answer
// waiting for the client's window.
type stream struct {
	id       uint32
	handler  Handler
	encoding string    // the request's grpc-encoding
	deadline time.Time // RequestTimeout after its headers

	prefix  [5]byte // gRPC's message prefix: compressed flag, length
	nprefix int
	size    int    // the message's length, -1 until the prefix is read
	msg     []byte // the message so far
	held    int64  // bytes of msg not yet given back to the connection's window

	recvWindow int64 // what the client may still send on it
	sendWindow int64 // what the server may still send on it
	ended      bool  // the client ended its side (END_STREAM)
	complete   bool  // the message is complete: the method has run
	waiting    bool  // its answer waits for the client's window, pending
	pending    []byte
}

// keptStreams is the number of ended streams a connection keeps for
// reuse, and keptMessage the largest message buffer kept with one.
const (
	keptStreams = 16
	keptMessage = 4 << 10
)

// frame handles one frame from the client.
func (c *conn) frame(f http2.Frame) {
	switch f := f.(type) {
	case *http2.DataFrame:
		c.data(f)
	case *http2.HeadersFrame:
		c.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), f.StreamEnded(), true)
	case *http2.ContinuationFrame:
		c.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), false, false)
	case *http2.SettingsFrame:
		c.settings(f)
	case *http2.WindowUpdateFrame:
		c.windowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.writePing(f.Data)
		}
	case *http2.RSTStreamFrame:
		if f.StreamID > c.lastID {
			c.goAway(http2.ErrCodeProtocol, "RST_STREAM on a stream not opened")
		} else if st := c.streams[f.StreamID]; st != nil {
			c.forget(st)
		}
	case *http2.GoAwayFrame:
		c.peerGone = true
	case *http2.PushPromiseFrame:
		c.goAway(http2.ErrCodeProtocol, "PUSH_PROMISE from a client")
	}
	// PRIORITY, and frames of types HTTP/2 does not know, mean nothing here.
}

// headerBlock is a request's header block as it is decoded. The zero
// headerBlock is ready for reset.
type headerBlock struct {
	max                                 int // MaxHeaderBytes
	id                                  uint32
	endStream                           bool
	bytes                               int  // the block's encoded bytes so far
	size                                int  // the header list's size, as HTTP/2 counts it
	truncated                           bool // size went over max: the fields are no longer kept
	method, path, contentType, encoding string
}

func (h *headerBlock) reset(id uint32, endStream bool) {
	*h = headerBlock{max: h.max, id: id, endStream: endStream}
}

// field is the hpack decoder's emit function: it keeps the fields the
// server reads, up to max bytes of header list.
func (h *headerBlock) field(f hpack.HeaderField) {
	h.size += int(f.Size())
	if h.size > h.max {
		h.truncated = true
		return
	}
	switch f.Name {
	case ":method":
		h.method = f.Value
	case ":path":
		h.path = f.Value
	case "content-type":
		h.contentType = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	}
}

// headers decodes a fragment of a header block (first: a HEADERS
// frame's), and handles the block once it ends. The Framer has checked
// that CONTINUATION frames follow their HEADERS and nothing else comes
// between.
func (c *conn) headers(id uint32, frag []byte, endHeaders, endStream, first bool) {
	h := &c.hdr
	if first {
		if id%2 == 0 {
			c.goAway(http2.ErrCodeProtocol, "a stream of even number from a client")
			return
		}
		h.reset(id, endStream)
		c.dec.SetEmitEnabled(true)
	}
	h.bytes += len(frag)
	if h.bytes > 4*c.s.cfg.MaxHeaderBytes+maxReadFrame {
		c.goAway(http2.ErrCodeEnhanceYourCalm, "header block too large")
		return
	}
	if _, err := c.dec.Write(frag); err != nil {
		c.goAway(http2.ErrCodeCompression, "header block: "+err.Error())
		return
	}
	if h.truncated {
		c.dec.SetEmitEnabled(false)
	}
	if !endHeaders {
		return
	}
	if err := c.dec.Close(); err != nil {
		c.goAway(http2.ErrCodeCompression, "header block: "+err.Error())
		return
	}
	c.request(h)
}

// request opens the stream of a header block that ended, or refuses or
// answers it at once; on a stream open, the block is its trailers.
func (c *conn) request(h *headerBlock) {
	id := h.id
	if st := c.streams[id]; st != nil {
		if !h.endStream {
			c.goAway(http2.ErrCodeProtocol, "trailers that do not end the stream")
			return
		}
		st.ended = true
		if !st.complete {
			c.fail(st, codes.Internal, errIncomplete)
		}
		return
	}
	if id <= c.lastID {
		return // trailers of a stream already answered
	}
	c.lastID = id
	switch {
	case c.stopping || c.peerGone:
		c.writeRST(id, http2.ErrCodeRefusedStream)
	case h.truncated:
		c.writeRST(id, http2.ErrCodeFrameSize) // as grpc-go does
	case len(c.streams) >= c.s.cfg.MaxStreams:
		c.writeRST(id, http2.ErrCodeRefusedStream)
	case h.method != "POST":
		c.answerStatus(id, !h.endStream, 405, codes.Internal, "invalid gRPC request method "+fmt.Sprintf("%q", h.method))
	case !isGRPC(h.contentType):
		c.answerStatus(id, !h.endStream, 415, codes.Internal, "invalid gRPC request content-type "+fmt.Sprintf("%q", h.contentType))
	default:
		handler := c.s.cfg.Methods[h.path]
		if handler == nil {
			c.answerStatus(id, !h.endStream, 200, codes.Unimplemented, c.s.unknownMethod(h.path))
			return
		}
		if max := int64(c.s.cfg.MaxRequests); max > 0 && c.s.inProgress.Add(1) > max {
			c.s.inProgress.Add(-1)
			c.s.busy.Add(1)
			c.answerStatus(id, !h.endStream, 200, codes.ResourceExhausted, c.s.cfg.Busy)
			return
		} else if max <= 0 {
			c.s.inProgress.Add(1)
		}
		st := c.newStream(id, handler)
		st.encoding = h.encoding
		if h.endStream {
			st.ended = true
			c.fail(st, codes.Internal, errIncomplete)
		}
	}
}

// errIncomplete answers a request that ended before its message did.
const errIncomplete = "grpc: the request ended before its message was complete"

// isGRPC reports whether a request's content-type is gRPC's.
func isGRPC(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// newStream opens stream id, counted among the calls in progress.
func (c *conn) newStream(id uint32, handler Handler) *stream {
	var st *stream
	if n := len(c.free); n > 0 {
		st, c.free = c.free[n-1], c.free[:n-1]
		*st = stream{msg: st.msg[:0], pending: st.pending[:0]}
	} else {
		st = &stream{}
	}
	st.id, st.handler, st.size = id, handler, -1
	st.deadline = time.Now().Add(c.s.cfg.RequestTimeout)
	st.recvWindow, st.sendWindow = c.s.streamWindow(), c.peerInitial
	c.streams[id] = st
	return st
}

// data takes a DATA frame's bytes into its stream's message, and runs
// the method once the message is complete.
func (c *conn) data(f *http2.DataFrame) {
	n := int64(f.Length) // padding included: it counts against the windows
	if n > c.recvWindow {
		c.goAway(http2.ErrCodeFlowControl, "DATA beyond the connection's window")
		return
	}
	c.recvWindow -= n
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.lastID {
			c.goAway(http2.ErrCodeProtocol, "DATA on a stream not opened")
			return
		}
		c.credit += n // a stream answered, reset or refused: the data is dropped
		return
	}
	if st.ended || n > st.recvWindow {
		code := http2.ErrCodeStreamClosed
		if !st.ended {
			code = http2.ErrCodeFlowControl
		}
		c.credit += n
		c.writeRST(st.id, code)
		c.forget(st)
		return
	}
	st.recvWindow -= n
	st.ended = f.StreamEnded()
	data := f.Data()
	kept := 0
	if !st.complete && st.size < 0 {
		k := copy(st.prefix[st.nprefix:], data)
		st.nprefix += k
		data = data[k:]
		if st.nprefix == len(st.prefix) && !c.readPrefix(st) {
			c.credit += n
			return
		}
	}
	if !st.complete && st.size >= 0 {
		kept = min(len(data), st.size-len(st.msg))
		st.msg = append(st.msg, data[:kept]...)
	}
	c.credit += n - int64(kept)
	st.held += int64(kept)
	switch {
	case st.complete:
		// More than one message: a unary call's first is the request.
	case st.size >= 0 && len(st.msg) == st.size:
		c.run(st)
	case st.ended:
		c.fail(st, codes.Internal, errIncomplete)
	case st.recvWindow < c.s.streamWindow()/2:
		c.writeWindowUpdate(st.id, uint32(c.s.streamWindow()-st.recvWindow))
		st.recvWindow = c.s.streamWindow()
	}
}

// readPrefix reads the message's prefix, complete. A message compressed,
// or larger than MaxMessageBytes, is answered at once, with grpc-go's
// words, and its stream ended: it reports false.
func (c *conn) readPrefix(st *stream) bool {
	size := binary.BigEndian.Uint32(st.prefix[1:])
	switch flag := st.prefix[0]; {
	case flag == 1 && (st.encoding == "" || st.encoding == "identity"):
		c.fail(st, codes.Unimplemented, "grpc: compressed flag set with identity or empty encoding")
	case flag == 1:
		c.fail(st, codes.Unimplemented, fmt.Sprintf("grpc: Decompressor is not installed for grpc-encoding %q", st.encoding))
	case flag != 0:
		c.fail(st, codes.Internal, fmt.Sprintf("grpc: received unexpected payload format %d", flag))
	case int64(size) > int64(c.s.cfg.MaxMessageBytes):
		c.fail(st, codes.ResourceExhausted, fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", size, c.s.cfg.MaxMessageBytes))
	default:
		st.size = int(size)
		return true
	}
	return false
}

// run calls the method with the message, complete, and answers.
func (c *conn) run(st *stream) {
	st.complete = true
	out, err := st.handler(st.msg, append(c.out[:0], 0, 0, 0, 0, 0))
	c.credit += st.held
	st.held = 0
	if err != nil {
		s, _ := status.FromError(err)
		c.fail(st, s.Code(), s.Message())
		return
	}
	if len(out) < 5 || len(out)-5 > 1<<32-1 {
		c.fail(st, codes.Internal, "h2unary: the method's answer lost its prefix")
		return
	}
	out[0] = 0
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-5))
	c.answer(st, out)
	if cap(out) <= writeBufferBytes {
		c.out = out[:0]
	}
}

// forget ends st without a word more, and frees what it held.
func (c *conn) forget(st *stream) {
	delete(c.streams, st.id)
	c.s.inProgress.Add(-1)
	c.credit += st.held
	if st.waiting {
		for i, b := range c.blocked {
			if b == st {
				c.blocked = append(c.blocked[:i], c.blocked[i+1:]...)
				break
			}
		}
	}
	if len(c.streams) == 0 {
		c.idleSince = time.Now()
	}
	if len(c.free) < keptStreams {
		if cap(st.msg) > keptMessage {
			st.msg = nil
		}
		if cap(st.pending) > keptMessage {
			st.pending = nil
		}
		st.handler = nil
		c.free = append(c.free, st)
	}
}
