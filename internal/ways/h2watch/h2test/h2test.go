// Package h2test is the HTTP/2 client written frame by frame that the
// tests of every gRPC way in share (rls, gubernator, their watchdog
// h2watch, the unary server h2unary): over any net.Conn (Dial for TCP,
// DialMem for testkit's in-memory listener, so that a server's timeouts
// run on a synctest bubble's fake time), it opens streams with the
// windows a test chooses, sends calls' headers and messages, one write
// each or several in one (Batch), any frame a test writes (Framer), and
// reads the server's frames as they come, acknowledging its SETTINGS and
// PINGs, so that a test can be the client that never reads. A Conn is
// not safe for concurrent use. Beside it, what those tests all need: a
// grpc-go client connection (GRPC, or GRPCMem on an in-memory listener)
// and an echo service (EchoService); their bounded wait is
// testkit.WaitFor.
package h2test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// Conn is an HTTP/2 client connection written frame by frame.
type Conn struct {
	t   testing.TB
	c   net.Conn
	out batcher // what the framer writes goes through it
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

// Dial connects to addr over TCP, with a deadline 10 s on, and sends the
// preface with settings. The connection is closed when the test ends.
func Dial(t testing.TB, addr string, settings ...http2.Setting) *Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return New(t, c, settings...)
}

// DialMem connects to l, an in-memory listener, and sends the preface
// with settings; the connection is closed when the test ends. Inside
// synctest.Test, with the server on l, the server's deadlines are fake
// time.
func DialMem(t testing.TB, l *testkit.Listener, settings ...http2.Setting) *Conn {
	t.Helper()
	c, err := l.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return New(t, c, settings...)
}

// New sends the preface with settings on c.
func New(t testing.TB, c net.Conn, settings ...http2.Setting) *Conn {
	t.Helper()
	h := &Conn{t: t, c: c, out: batcher{c: c}}
	h.fr = http2.NewFramer(&h.out, c)
	h.enc = hpack.NewEncoder(&h.hb)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return h
}

// Call sends a call of method (its full name, "/package.Service/Method")
// with msg on stream id, failing the test on an error.
func (h *Conn) Call(id uint32, method string, msg proto.Message) {
	h.t.Helper()
	if err := h.Send(id, method, msg); err != nil {
		h.t.Fatal(err)
	}
}

// Send sends a call of method with msg on stream id: its headers, then
// its message in DATA frames of at most 16 KiB, the last ending the
// stream.
func (h *Conn) Send(id uint32, method string, msg proto.Message) error {
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.HeaderBlock(method), EndHeaders: true}); err != nil {
		return err
	}
	const maxFrame = 16 << 10
	b := Message(msg)
	for len(b) > maxFrame {
		if err := h.fr.WriteData(id, false, b[:maxFrame]); err != nil {
			return err
		}
		b = b[maxFrame:]
	}
	return h.fr.WriteData(id, true, b)
}

// HeaderBlock is a call's request header block for method, encoded with
// the connection's HPACK encoder, extra fields after gRPC's; the bytes
// are the caller's.
func (h *Conn) HeaderBlock(method string, extra ...hpack.HeaderField) []byte {
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "h2test"},
		{":path", method}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for _, f := range extra {
		h.enc.WriteField(f)
	}
	return bytes.Clone(h.hb.Bytes())
}

// Message is msg as a gRPC message: uncompressed, its length, its bytes.
func Message(msg proto.Message) []byte {
	b, err := proto.Marshal(msg)
	if err != nil {
		panic("h2test: " + err.Error())
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

// Batch runs send, holding back every frame it writes, and then writes
// them to the connection in one write: calls that reach the server
// together, as a pipelining client's do. It returns that write's error.
func (h *Conn) Batch(send func()) error {
	h.out.hold = true
	send()
	h.out.hold = false
	_, err := h.c.Write(h.out.held.Bytes())
	h.out.held.Reset()
	return err
}

// batcher writes to c, or holds what is written while hold is set.
type batcher struct {
	c    net.Conn
	hold bool
	held bytes.Buffer
}

func (b *batcher) Write(p []byte) (int, error) {
	if b.hold {
		return b.held.Write(p)
	}
	return b.c.Write(p)
}

// Framer is the connection's framer, for a test to write any frame.
func (h *Conn) Framer() *http2.Framer { return h.fr }

// WindowUpdate opens the window of stream (0: the connection's) by incr
// bytes.
func (h *Conn) WindowUpdate(stream, incr uint32) error { return h.fr.WriteWindowUpdate(stream, incr) }

// Next returns the server's next frame, having acknowledged its SETTINGS
// and PINGs (an acknowledgement of the client's PING is returned); an
// error once the connection ends.
func (h *Conn) Next() (http2.Frame, error) {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
			continue
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
				continue
			}
		}
		return f, nil
	}
}

// NextEnd reads until stream id's last headers (its trailers, or headers
// that end it at once), adding the DATA bytes read to *data; an error
// once the connection ends or the stream is reset.
func (h *Conn) NextEnd(id uint32, data *int) (*http2.MetaHeadersFrame, error) {
	for {
		f, err := h.Next()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			*data += int(f.Length)
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				return f, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return nil, errors.New("stream reset: " + f.ErrCode.String())
			}
		}
	}
}

// UntilClosed reads until the connection ends, and returns how many
// answers began (header blocks that did not end their stream) and the
// DATA bytes read, failing the test if a stream ends: what a client that
// holds its window shut gets before the server gives it up.
func (h *Conn) UntilClosed() (begun, data int) {
	h.t.Helper()
	for {
		f, err := h.Next()
		if err != nil {
			return begun, data
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				h.t.Fatalf("stream %d ended: %v", f.StreamID, f.Fields)
			}
			begun++
		case *http2.DataFrame:
			data += len(f.Data())
		}
	}
}

// HeaderValue is the value of field name in f, "" if it has none.
func HeaderValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// Sync sends a PING and reads until its acknowledgement, adding the DATA
// bytes read meanwhile to *data and failing the test if a stream ends:
// the server handles frames in order, so what it sends before the
// acknowledgement is all it could send for what came before the PING.
func (h *Conn) Sync(data *int) {
	h.t.Helper()
	if err := h.fr.WritePing(false, [8]byte{'s', 'y', 'n', 'c'}); err != nil {
		h.t.Fatal(err)
	}
	for {
		f, err := h.Next()
		if err != nil {
			h.t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			return
		case *http2.DataFrame:
			*data += int(f.Length)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				h.t.Fatalf("stream %d ended before the PING's acknowledgement: %v", f.StreamID, f.Fields)
			}
		}
	}
}
