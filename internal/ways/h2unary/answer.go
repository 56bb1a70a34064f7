package h2unary

import (
	"encoding/binary"
	"strconv"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// This file owns what the server sends: the frames, written straight
// into the connection's buffered writer; the header blocks, encoded by
// hand without HPACK's dynamic table (the constant ones once, an error's
// status as literals that the table never keeps); an answer's message,
// sent as the client's windows allow and queued until its WINDOW_UPDATE
// when it does not fit; and the client's SETTINGS and WINDOW_UPDATEs
// that move those windows.

// The constant header blocks: an answer's headers (:status 200,
// content-type: application/grpc) and its trailers (grpc-status: 0).
var (
	okHeaders  = appendLiteral(appendIndexed(nil, staticStatus200), staticContentType, "", "application/grpc")
	okTrailers = appendLiteral(nil, 0, "grpc-status", "0")
)

// Entries of HPACK's static table (RFC 7541, appendix A).
const (
	staticStatus      = 8 // :status, whose value is 200
	staticStatus200   = 8
	staticContentType = 31
)

// maxStatusMessage bounds an error's grpc-message, before its
// percent-encoding, so that a header block always fits one frame.
const maxStatusMessage = 1 << 10

// appendIndexed appends the field at index of the static table.
func appendIndexed(dst []byte, index uint64) []byte { return appendInt(dst, 0x80, 7, index) }

// appendLiteral appends a field as a literal never added to the dynamic
// table: its name by index of the static table, or, index 0, by name.
func appendLiteral(dst []byte, index uint64, name, value string) []byte {
	dst = appendInt(dst, 0x00, 4, index)
	if index == 0 {
		dst = appendString(dst, name)
	}
	return appendString(dst, value)
}

// appendString appends s as an HPACK string literal, not Huffman-coded.
func appendString(dst []byte, s string) []byte {
	return append(appendInt(dst, 0x00, 7, uint64(len(s))), s...)
}

// appendInt appends i as an HPACK integer of an n-bit prefix, the bits
// above the prefix in the first byte set to first.
func appendInt(dst []byte, first byte, n uint, i uint64) []byte {
	limit := uint64(1)<<n - 1
	if i < limit {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(limit))
	for i -= limit; i >= 0x80; i >>= 7 {
		dst = append(dst, byte(i&0x7f|0x80))
	}
	return append(dst, byte(i))
}

// appendPercent appends s percent-encoded as gRPC encodes grpc-message:
// every byte outside printable ASCII, and '%', as %XX.
func appendPercent(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		if b := s[i]; b >= 0x20 && b <= 0x7e && b != '%' {
			dst = append(dst, b)
		} else {
			dst = append(dst, '%', hex[b>>4], hex[b&15])
		}
	}
	return dst
}

// answer sends a message's answer on st: its headers, the message as far
// as the windows allow, and its trailers once the message is sent. What
// does not fit waits for the client's WINDOW_UPDATE, and st with it.
func (c *conn) answer(st *stream, msg []byte) {
	c.writeHeaders(st.id, okHeaders, false)
	if rest := c.sendData(st, msg); len(rest) > 0 {
		st.pending = append(st.pending[:0], rest...)
		st.waiting = true
		c.blocked = append(c.blocked, st)
		return
	}
	c.writeHeaders(st.id, okTrailers, true)
	c.finish(st)
}

// sendData sends what the windows allow of p on st, in frames no larger
// than the client's SETTINGS_MAX_FRAME_SIZE, and returns the rest.
func (c *conn) sendData(st *stream, p []byte) []byte {
	for len(p) > 0 {
		n := min(int64(len(p)), c.sendWindow, st.sendWindow, int64(c.peerFrame))
		if n <= 0 {
			break
		}
		c.writeFrameHeader(http2.FrameData, 0, st.id, int(n))
		c.bw.Write(p[:n])
		p = p[n:]
		c.sendWindow -= n
		st.sendWindow -= n
	}
	return p
}

// drain sends the answers waiting, in order, as far as the windows now
// allow.
func (c *conn) drain() {
	kept := c.blocked[:0]
	for _, st := range c.blocked {
		st.pending = c.sendData(st, st.pending)
		if len(st.pending) > 0 {
			kept = append(kept, st)
			continue
		}
		st.waiting = false
		c.writeHeaders(st.id, okTrailers, true)
		c.finish(st)
	}
	clear(c.blocked[len(kept):])
	c.blocked = kept
}

// finish ends st, its answer written: a client that has not ended its
// side is told to stop sending (RST_STREAM NO_ERROR, as grpc-go does).
func (c *conn) finish(st *stream) {
	if !st.ended {
		c.writeRST(st.id, http2.ErrCodeNo)
	}
	c.forget(st)
}

// fail answers st with a status and ends it.
func (c *conn) fail(st *stream, code codes.Code, msg string) {
	c.answerStatus(st.id, false, 200, code, msg)
	c.finish(st)
}

// answerStatus answers stream id with a status alone, in one header
// block that ends the stream (gRPC's trailers-only answer), and, when
// reset is set, tells the client to stop sending.
func (c *conn) answerStatus(id uint32, reset bool, httpStatus int, code codes.Code, msg string) {
	c.hbuf = appendStatus(c.hbuf[:0], httpStatus, code, msg)
	c.writeHeaders(id, c.hbuf, true)
	if reset {
		c.writeRST(id, http2.ErrCodeNo)
	}
}

// appendStatus appends the header block of a trailers-only answer: the
// HTTP status, the content-type, grpc-status and grpc-message, its first
// maxStatusMessage bytes percent-encoded.
func appendStatus(b []byte, httpStatus int, code codes.Code, msg string) []byte {
	if httpStatus == 200 {
		b = append(b, okHeaders...)
	} else {
		b = appendLiteral(b, staticStatus, "", strconv.Itoa(httpStatus))
		b = appendLiteral(b, staticContentType, "", "application/grpc")
	}
	b = appendLiteral(b, 0, "grpc-status", strconv.Itoa(int(code)))
	if msg != "" {
		if len(msg) > maxStatusMessage {
			msg = msg[:maxStatusMessage]
		}
		enc := appendPercent(b[len(b):], msg) // encoded past the block's end, then moved into place
		b = appendLiteral(b, 0, "grpc-message", string(enc))
	}
	return b
}

// settings applies the client's SETTINGS and acknowledges them; a new
// SETTINGS_INITIAL_WINDOW_SIZE moves every stream's window by the
// difference (RFC 9113, 6.9.2).
func (c *conn) settings(f *http2.SettingsFrame) {
	if f.IsAck() {
		return
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerInitial
			c.peerInitial = int64(s.Val)
			for _, st := range c.streams {
				if st.sendWindow += delta; st.sendWindow > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		}
		return nil
	})
	if err != nil {
		c.frameError(err)
		return
	}
	c.writeFrameHeader(http2.FrameSettings, http2.FlagSettingsAck, 0, 0)
	c.drain()
}

// maxWindow is the largest flow-control window.
const maxWindow = 1<<31 - 1

// windowUpdate opens the connection's window, or a stream's, and sends
// what waited for it.
func (c *conn) windowUpdate(f *http2.WindowUpdateFrame) {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if c.sendWindow += inc; c.sendWindow > maxWindow {
			c.goAway(http2.ErrCodeFlowControl, "the connection's window went past 2^31-1")
			return
		}
		c.drain()
		return
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return
	}
	if st.sendWindow += inc; st.sendWindow > maxWindow {
		c.writeRST(st.id, http2.ErrCodeFlowControl)
		c.forget(st)
		return
	}
	if st.waiting {
		c.drain()
	}
}

// giveCredit opens the connection's window by what was consumed, once
// that is a quarter of it.
func (c *conn) giveCredit() {
	if c.credit >= c.s.connWindow()/4 {
		c.writeWindowUpdate(0, uint32(c.credit))
		c.recvWindow += c.credit
		c.credit = 0
	}
}

// writeSettings writes the server's SETTINGS, then opens the
// connection's window from HTTP/2's default to the server's.
func (c *conn) writeSettings() {
	settings := [...]struct {
		id  http2.SettingID
		val uint32
	}{
		{http2.SettingMaxConcurrentStreams, uint32(c.s.cfg.MaxStreams)},
		{http2.SettingInitialWindowSize, uint32(c.s.streamWindow())},
		{http2.SettingMaxHeaderListSize, uint32(c.s.cfg.MaxHeaderBytes)},
	}
	c.writeFrameHeader(http2.FrameSettings, 0, 0, 6*len(settings))
	b := c.bw.AvailableBuffer()
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.id))
		b = binary.BigEndian.AppendUint32(b, s.val)
	}
	c.bw.Write(b)
	c.writeWindowUpdate(0, uint32(c.recvWindow-initialWindow))
}

// writeFrameHeader writes the header of a frame whose payload, length
// bytes, the caller writes next.
func (c *conn) writeFrameHeader(t http2.FrameType, flags http2.Flags, id uint32, length int) {
	b := c.bw.AvailableBuffer()
	b = append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags))
	c.bw.Write(binary.BigEndian.AppendUint32(b, id&maxWindow))
}

// writeUint32 writes v as 4 bytes of a payload.
func (c *conn) writeUint32(v uint32) {
	c.bw.Write(binary.BigEndian.AppendUint32(c.bw.AvailableBuffer(), v))
}

func (c *conn) writeHeaders(id uint32, block []byte, endStream bool) {
	flags := http2.FlagHeadersEndHeaders
	if endStream {
		flags |= http2.FlagHeadersEndStream
	}
	c.writeFrameHeader(http2.FrameHeaders, flags, id, len(block))
	c.bw.Write(block)
}

func (c *conn) writeRST(id uint32, code http2.ErrCode) {
	c.writeFrameHeader(http2.FrameRSTStream, 0, id, 4)
	c.writeUint32(uint32(code))
}

func (c *conn) writeWindowUpdate(id, inc uint32) {
	c.writeFrameHeader(http2.FrameWindowUpdate, 0, id, 4)
	c.writeUint32(inc)
}

func (c *conn) writePing(data [8]byte) {
	c.writeFrameHeader(http2.FramePing, http2.FlagPingAck, 0, 8)
	c.bw.Write(append(c.bw.AvailableBuffer(), data[:]...))
}

// writeGoAway tells the client the last stream served and why the
// connection ends.
func (c *conn) writeGoAway(code http2.ErrCode, debug []byte) {
	c.writeFrameHeader(http2.FrameGoAway, 0, 0, 8+len(debug))
	c.writeUint32(c.lastID)
	c.writeUint32(uint32(code))
	c.bw.Write(debug)
}
