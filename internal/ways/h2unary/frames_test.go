package h2unary

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// The server's HTTP/2, frame by frame, with a client that sends what a
// test chooses (package h2test).

// answered reads stream id's answer to its end, and fails the test
// unless its grpc-status is code; it returns the DATA bytes read.
func answered(t *testing.T, c *h2test.Conn, id uint32, code string) int {
	t.Helper()
	data := 0
	f, err := c.NextEnd(id, &data)
	if err != nil {
		t.Fatalf("stream %d: %v", id, err)
	}
	if got := h2test.HeaderValue(f, "grpc-status"); got != code {
		t.Fatalf("stream %d: grpc-status %q (%q), want %s", id, got, h2test.HeaderValue(f, "grpc-message"), code)
	}
	return data
}

// answerBytes is the length of the echo answer of n bytes on the wire:
// the gRPC prefix, the field's tag and length, the bytes.
func answerBytes(n int) int { return 5 + 1 + len(binary.AppendUvarint(nil, uint64(n))) + n }

// TestStreamWindow: a client whose streams' window is 1000 bytes gets
// 1000 bytes of a longer answer, nothing more, and the rest with its
// trailers once it opens the window.
func TestStreamWindow(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	c.Call(1, echoMethod, echo(5000))
	data := 0
	c.Sync(&data)
	if data != 1000 {
		t.Fatalf("%d bytes sent in a window of 1000", data)
	}
	must(t, c.WindowUpdate(1, 1<<20))
	if data += answered(t, c, 1, "0"); data != answerBytes(5000) {
		t.Errorf("%d bytes of answer, want %d", data, answerBytes(5000))
	}
}

// TestConnectionWindow: an answer larger than the connection's window
// (65535 until the client opens it) is sent up to the window, and the
// rest once a WINDOW_UPDATE opens it; the frames are no larger than
// 16 KiB, the client's SETTINGS_MAX_FRAME_SIZE.
func TestConnectionWindow(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	c.Call(1, echoMethod, echo(100<<10))
	data := 0
	c.Sync(&data)
	if data != 65535 {
		t.Fatalf("%d bytes sent in a connection window of 65535", data)
	}
	must(t, c.WindowUpdate(0, 1<<20))
	for {
		f, err := c.Next()
		must(t, err)
		if d, ok := f.(*http2.DataFrame); ok {
			if d.Length > 16<<10 {
				t.Errorf("a DATA frame of %d bytes", d.Length)
			}
			data += int(d.Length)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamEnded() {
			break
		}
	}
	if data != answerBytes(100<<10) {
		t.Errorf("%d bytes of answer, want %d", data, answerBytes(100<<10))
	}
}

// TestContinuation: request headers in a HEADERS frame and two
// CONTINUATION frames are one header block.
func TestContinuation(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr)
	fr := c.Framer()
	block := c.HeaderBlock(echoMethod, hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("p", 100)})
	a, b := len(block)/3, 2*len(block)/3
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:a]}))
	must(t, fr.WriteContinuation(1, false, block[a:b]))
	must(t, fr.WriteContinuation(1, true, block[b:]))
	must(t, fr.WriteData(1, true, h2test.Message(echo(10))))
	if n := answered(t, c, 1, "0"); n != answerBytes(10) {
		t.Errorf("%d bytes of answer, want %d", n, answerBytes(10))
	}
}

// TestPing: a PING is acknowledged with its data.
func TestPing(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr)
	must(t, c.Framer().WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}))
	for {
		f, err := c.Next()
		must(t, err)
		if p, ok := f.(*http2.PingFrame); ok {
			if !p.IsAck() || p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
				t.Errorf("PING answered %v %v", p.IsAck(), p.Data)
			}
			return
		}
	}
}

// TestResetMidRequest: a stream the client resets before its message is
// complete is forgotten (no call in progress), and the connection goes
// on serving.
func TestResetMidRequest(t *testing.T) {
	s, _, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr)
	fr := c.Framer()
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
	must(t, fr.WriteData(1, false, h2test.Message(echo(100))[:50]))
	data := 0
	c.Sync(&data)
	if n := s.InProgress(); n != 1 {
		t.Fatalf("%d calls in progress, want the one half sent", n)
	}
	must(t, fr.WriteRSTStream(1, http2.ErrCodeCancel))
	must(t, fr.WriteData(1, true, h2test.Message(echo(100))[50:])) // in flight when the client reset it: dropped
	c.Sync(&data)
	if n := s.InProgress(); n != 0 || data != 0 {
		t.Fatalf("%d calls in progress, %d bytes answered after the reset; want none", n, data)
	}
	c.Call(3, echoMethod, echo(1))
	answered(t, c, 3, "0")
}

// TestBadPreface: a client that does not speak HTTP/2 is disconnected at
// once.
func TestBadPreface(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	must(t, err)
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after a bad preface: %v, want the connection closed", err)
	}
}

// TestFirstFrameNotSettings: a preface followed by anything but SETTINGS
// is a protocol error: GOAWAY, then the connection is closed.
func TestFirstFrameNotSettings(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	must(t, fr.WritePing(false, [8]byte{}))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("closed without GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol {
				t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", g.ErrCode)
			}
			return
		}
	}
}

// TestTooManyStreams: past MaxStreams open on a connection, a stream is
// refused; the others are served.
func TestTooManyStreams(t *testing.T) {
	_, _, addr := startServer(t, Config{MaxStreams: 2}, nil)
	c := h2test.Dial(t, addr)
	fr := c.Framer()
	for id := uint32(1); id <= 5; id += 2 {
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
	}
	for {
		f, err := c.Next()
		must(t, err)
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			if r.StreamID != 5 || r.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("RST_STREAM %d %v, want 5 REFUSED_STREAM", r.StreamID, r.ErrCode)
			}
			break
		}
	}
	must(t, fr.WriteData(1, true, h2test.Message(echo(1))))
	answered(t, c, 1, "0")
}

// TestHeaderListTooLarge: a header list past MaxHeaderBytes resets its
// stream FRAME_SIZE_ERROR, as grpc-go does; the connection (and its
// HPACK state) goes on.
func TestHeaderListTooLarge(t *testing.T) {
	_, _, addr := startServer(t, Config{MaxHeaderBytes: 1024}, nil)
	c := h2test.Dial(t, addr)
	var big []hpack.HeaderField
	for i := range 3 {
		big = append(big, hpack.HeaderField{Name: "x-big-" + string(rune('a'+i)), Value: strings.Repeat("v", 500)})
	}
	must(t, c.Framer().WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod, big...), EndHeaders: true}))
	must(t, c.Framer().WriteData(1, true, h2test.Message(echo(1))))
	data := 0
	if _, err := c.NextEnd(1, &data); err == nil || !strings.Contains(err.Error(), "FRAME_SIZE_ERROR") {
		t.Fatalf("a header list of 1.5 KiB: %v, want the stream reset FRAME_SIZE_ERROR", err)
	}
	c.Call(3, echoMethod, echo(1))
	answered(t, c, 3, "0")
}

// TestMessageTooLarge: a message longer than MaxMessageBytes is refused
// RESOURCE_EXHAUSTED from its prefix alone, with grpc-go's words, before
// any of it is sent.
func TestMessageTooLarge(t *testing.T) {
	s, _, addr := startServer(t, Config{MaxMessageBytes: 1000}, nil)
	c := h2test.Dial(t, addr)
	fr := c.Framer()
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
	must(t, fr.WriteData(1, false, []byte{0, 0, 0, 0x03, 0xe9})) // 1001 bytes to come
	data := 0
	f, err := c.NextEnd(1, &data)
	must(t, err)
	if code, msg := h2test.HeaderValue(f, "grpc-status"), h2test.HeaderValue(f, "grpc-message"); code != "8" ||
		msg != "grpc: received message larger than max (1001 vs. 1000)" || data != 0 {
		t.Errorf("grpc-status %s %q after %d bytes, want 8, grpc-go's message", code, msg, data)
	}
	if n := s.InProgress(); n != 0 {
		t.Errorf("%d calls in progress", n)
	}
}

// TestCompressed: a message with the compressed flag set is answered
// UNIMPLEMENTED: the server has no decompressor.
func TestCompressed(t *testing.T) {
	_, _, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr)
	fr := c.Framer()
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
		BlockFragment: c.HeaderBlock(echoMethod, hpack.HeaderField{Name: "grpc-encoding", Value: "gzip"})}))
	msg := h2test.Message(echo(1))
	msg[0] = 1
	must(t, fr.WriteData(1, true, msg))
	data := 0
	f, err := c.NextEnd(1, &data)
	must(t, err)
	if code, msg := h2test.HeaderValue(f, "grpc-status"), h2test.HeaderValue(f, "grpc-message"); code != "12" ||
		msg != `grpc: Decompressor is not installed for grpc-encoding "gzip"` {
		t.Errorf("grpc-status %s %q, want 12, grpc-go's message", code, msg)
	}
}

// TestPipelined: calls sent in one write are answered in one write.
func TestPipelined(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	cl := &countingListener{Listener: l}
	_, _, addr := startServer(t, Config{}, cl)
	nc, err := net.Dial("tcp", addr)
	must(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := h2test.New(t, nc)
	c.Call(1, echoMethod, echo(1))
	answered(t, c, 1, "0")
	data := 0
	c.Sync(&data) // the handshake's frames are all written
	before := cl.writes.Load()
	const calls = 50
	must(t, c.Batch(func() {
		for i := range calls {
			c.Call(uint32(3+2*i), echoMethod, echo(i))
		}
	}))
	for i := range calls {
		answered(t, c, uint32(3+2*i), "0")
	}
	if n := cl.writes.Load() - before; n != 1 {
		t.Errorf("%d calls sent in one write answered in %d writes, want 1", calls, n)
	}
}

// countingListener counts the writes to the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}
