package h2unary

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// What a client can hold, and for how long.

// TestHalfSentMessage: a request whose message stops half way is
// answered DEADLINE_EXCEEDED at RequestTimeout, not before, and freed.
func TestHalfSentMessage(t *testing.T) {
	const timeout = 100 * time.Millisecond
	s, _, addr := startServer(t, Config{RequestTimeout: timeout}, nil)
	c := h2test.Dial(t, addr)
	fr := c.Framer()
	start := time.Now()
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
	must(t, fr.WriteData(1, false, h2test.Message(echo(1000))[:500]))
	answered(t, c, 1, "4")
	if took := time.Since(start); took < timeout {
		t.Errorf("answered after %v, before the request timeout (%v)", took, timeout)
	}
	if n := s.InProgress(); n != 0 {
		t.Errorf("%d calls in progress", n)
	}
	c.Call(3, echoMethod, echo(1))
	answered(t, c, 3, "0")
}

// TestStalledClient: a client whose window lets no answer through (0
// from the start, or 10 bytes) has its connection closed RequestTimeout
// after its calls and not before, counted stalled, with no more of the
// answers sent than the window let through.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, window := range []uint32{0, 10} {
		t.Run("window "+strconv.Itoa(int(window)), func(t *testing.T) {
			s, srv, addr := startServer(t, Config{RequestTimeout: timeout}, nil)
			c := h2test.Dial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
			start := time.Now()
			for id := uint32(1); id <= 5; id += 2 {
				c.Call(id, echoMethod, echo(100))
			}
			begun, data := c.UntilClosed()
			if took := time.Since(start); took < timeout {
				t.Errorf("closed %v after the calls, before the timeout (%v)", took, timeout)
			}
			if begun != 3 || data > 3*int(window) {
				t.Errorf("%d answers begun, %d bytes of them sent; want 3 begun, at most %d bytes", begun, data, 3*window)
			}
			testkit.WaitFor(t, 10*time.Second, "the connection to end", func() bool { return srv.Stats().Active == 0 })
			if n, open := s.Stalled(), s.InProgress(); n != 1 || open != 0 {
				t.Errorf("%d connections stalled, %d calls in progress; want 1 and 0", n, open)
			}
		})
	}
}

// TestReaderGone: a client that opens its windows but reads nothing has
// its connection closed once a write has waited RequestTimeout; what
// the server held is freed.
func TestReaderGone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	s, srv, addr := startServer(t, Config{RequestTimeout: 100 * time.Millisecond}, h2test.SmallBuffers{Listener: l})
	nc, err := net.Dial("tcp", addr)
	must(t, err)
	defer nc.Close()
	nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	c := h2test.New(t, nc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	must(t, c.WindowUpdate(0, 1<<31-1-65535))
	nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for id := uint32(1); id < 400; id += 2 { // 200 answers of 5 KiB: more than the sockets hold
		if err := c.Send(id, echoMethod, echo(5<<10)); err != nil {
			break // the server closed it
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the connection to be closed stalled", func() bool { return s.Stalled() == 1 })
	testkit.WaitFor(t, 10*time.Second, "the connection to end", func() bool { return srv.Stats().Active == 0 })
	if n := s.InProgress(); n != 0 {
		t.Errorf("%d calls in progress", n)
	}
}

// TestMaxRequests: with MaxRequests in progress on the server, a call on
// any connection is answered RESOURCE_EXHAUSTED with Busy at once, and
// counted; once one ends, calls are served again.
func TestMaxRequests(t *testing.T) {
	s, _, addr := startServer(t, Config{MaxRequests: 2, Busy: "too busy"}, nil)
	a := h2test.Dial(t, addr)
	for id := uint32(1); id <= 3; id += 2 { // two calls whose messages have not come
		must(t, a.Framer().WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.HeaderBlock(echoMethod), EndHeaders: true}))
	}
	data := 0
	a.Sync(&data)
	b := h2test.Dial(t, addr)
	b.Call(1, echoMethod, echo(1))
	f, err := b.NextEnd(1, &data)
	must(t, err)
	if code, msg := h2test.HeaderValue(f, "grpc-status"), h2test.HeaderValue(f, "grpc-message"); code != "8" || msg != "too busy" {
		t.Errorf("over MaxRequests: grpc-status %s %q, want 8 \"too busy\"", code, msg)
	}
	if n := s.Busy(); n != 1 {
		t.Errorf("Busy = %d, want 1", n)
	}
	must(t, a.Framer().WriteData(1, true, h2test.Message(echo(1))))
	answered(t, a, 1, "0")
	b.Call(3, echoMethod, echo(1))
	answered(t, b, 3, "0")
}

// TestHandshakeTimeout: a client that connects and sends nothing, or
// the preface without its SETTINGS, is disconnected at HandshakeTimeout,
// not before.
func TestHandshakeTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	_, srv, addr := startServer(t, Config{HandshakeTimeout: timeout}, nil)
	for _, sent := range []string{"", http2.ClientPreface} {
		start := time.Now() // the server's time begins once it accepts
		nc, err := net.Dial("tcp", addr)
		must(t, err)
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.WriteString(nc, sent)
		must(t, err)
		io.Copy(io.Discard, nc) // the server's SETTINGS, then the end
		if took := time.Since(start); took < timeout {
			t.Errorf("having sent %q: closed after %v, before the handshake timeout (%v)", sent, took, timeout)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the connections to end", func() bool { return srv.Stats().Active == 0 })
}

// TestIdle: a connection without streams for IdleTimeout is sent GOAWAY
// and closed; one with a stream open is not.
func TestIdle(t *testing.T) {
	const idle = 50 * time.Millisecond
	_, _, addr := startServer(t, Config{IdleTimeout: idle}, nil)
	// Before the dial: the server's idle time begins with the connection,
	// before the handshake Dial waits for has ended.
	start := time.Now()
	c := h2test.Dial(t, addr)
	for {
		f, err := c.Next()
		if err != nil {
			t.Fatalf("closed without GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || time.Since(start) < idle {
				t.Errorf("GOAWAY %v after %v, want NO_ERROR after %v", g.ErrCode, time.Since(start), idle)
			}
			break
		}
	}
	if _, err := c.Next(); err == nil {
		t.Error("the connection goes on after GOAWAY")
	}

	// A stream whose message is half sent holds the connection open past
	// the idle time (a PING answered after it says so), and is answered.
	// A server of its own, whose idle time leaves the stream time to
	// begin after the dial on a loaded machine.
	const longer = 500 * time.Millisecond
	_, _, addr = startServer(t, Config{IdleTimeout: longer}, nil)
	c = h2test.Dial(t, addr)
	fr := c.Framer()
	msg := h2test.Message(echo(100))
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
	must(t, fr.WriteData(1, false, msg[:50]))
	time.Sleep(2 * longer)
	data := 0
	c.Sync(&data) // fails the test on GOAWAY's close
	must(t, fr.WriteData(1, true, msg[50:]))
	answered(t, c, 1, "0")
}

// TestStop: when the stop begins, the client is sent GOAWAY naming the
// last stream taken; that stream's message, completed after, is
// answered; then the connection is closed and the stop is done.
func TestStop(t *testing.T) {
	_, srv, addr := startServer(t, Config{}, nil)
	c := h2test.Dial(t, addr)
	c.Call(1, echoMethod, echo(1))
	answered(t, c, 1, "0")
	fr := c.Framer()
	msg := h2test.Message(echo(100))
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
	must(t, fr.WriteData(3, false, msg[:50]))
	data := 0
	c.Sync(&data)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- srv.Shutdown(ctx)
	}()
	for {
		f, err := c.Next()
		must(t, err)
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 3 {
				t.Fatalf("GOAWAY %v, last stream %d; want NO_ERROR, 3", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	must(t, fr.WriteData(3, true, msg[50:]))
	answered(t, c, 3, "0")
	if _, err := c.Next(); err != io.EOF {
		t.Errorf("after the last answer: %v, want the connection closed", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
