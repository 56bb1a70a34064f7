package h2unary

import (
	"context"
	"io"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// What a client can hold, and for how long.

// TestHalfSentMessage, on fake time: a request whose message stops half
// way is answered DEADLINE_EXCEEDED exactly RequestTimeout after its
// headers, and freed.
func TestHalfSentMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		s, _, l := startMem(t, Config{RequestTimeout: timeout})
		c := h2test.DialMem(t, l)
		fr := c.Framer()
		start := time.Now()
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
		must(t, fr.WriteData(1, false, h2test.Message(echo(1000))[:500]))
		answered(t, c, 1, "4")
		if took := time.Since(start); took != timeout {
			t.Errorf("answered after %v, want the request timeout (%v)", took, timeout)
		}
		if n := s.InProgress(); n != 0 {
			t.Errorf("%d calls in progress", n)
		}
		c.Call(3, echoMethod, echo(1))
		answered(t, c, 3, "0")
	})
}

// TestStalledClient, on fake time: a client whose window lets no answer
// through (0 from the start, or 10 bytes) has its connection closed
// exactly RequestTimeout after its calls, counted stalled, with no more
// of the answers sent than the window let through.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, window := range []uint32{0, 10} {
		t.Run("window "+strconv.Itoa(int(window)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, srv, l := startMem(t, Config{RequestTimeout: timeout})
				c := h2test.DialMem(t, l, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
				start := time.Now()
				for id := uint32(1); id <= 5; id += 2 {
					c.Call(id, echoMethod, echo(100))
				}
				begun, data := c.UntilClosed()
				if took := time.Since(start); took != timeout {
					t.Errorf("closed %v after the calls, want the request timeout (%v)", took, timeout)
				}
				if begun != 3 || data > 3*int(window) {
					t.Errorf("%d answers begun, %d bytes of them sent; want 3 begun, at most %d bytes", begun, data, 3*window)
				}
				synctest.Wait()
				if n, open, active := s.Stalled(), s.InProgress(), srv.Stats().Active; n != 1 || open != 0 || active != 0 {
					t.Errorf("%d connections stalled, %d calls in progress, %d connections active; want 1, 0, 0", n, open, active)
				}
			})
		})
	}
}

// TestReaderGone, on fake time: a client that opens its windows but
// reads nothing, over buffers of 4 KiB each way, has its connection
// closed exactly RequestTimeout after the write that found them full,
// and not a nanosecond before; what the server held is freed.
func TestReaderGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		s, srv, l := startMem(t, Config{RequestTimeout: timeout})
		nc, server := testkit.Pipe()
		defer nc.Close()
		nc.SetReadBuffer(4 << 10)
		server.SetWriteBuffer(4 << 10)
		must(t, l.Offer(server))
		c := h2test.New(t, nc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		must(t, c.WindowUpdate(0, 1<<31-1-65535))
		for id := uint32(1); id < 40; id += 2 { // 20 answers of 5 KiB: more than the buffers hold
			c.Call(id, echoMethod, echo(5<<10))
		}
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if n := s.Stalled(); n != 0 || srv.Stats().Active != 1 {
			t.Fatalf("%d connections stalled, %d active a nanosecond before the request timeout; want 0, 1", n, srv.Stats().Active)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n, open, active := s.Stalled(), s.InProgress(), srv.Stats().Active; n != 1 || open != 0 || active != 0 {
			t.Errorf("at the request timeout: %d connections stalled, %d calls in progress, %d connections active; want 1, 0, 0", n, open, active)
		}
	})
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

// TestHandshakeTimeout, on fake time: a client that connects and sends
// nothing, or the preface without its SETTINGS, is disconnected exactly
// HandshakeTimeout after it connected.
func TestHandshakeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 50 * time.Millisecond
		_, srv, l := startMem(t, Config{HandshakeTimeout: timeout})
		for _, sent := range []string{"", http2.ClientPreface} {
			start := time.Now()
			nc, err := l.Dial()
			must(t, err)
			defer nc.Close()
			_, err = io.WriteString(nc, sent)
			must(t, err)
			io.Copy(io.Discard, nc) // the server's SETTINGS, then the end
			if took := time.Since(start); took != timeout {
				t.Errorf("having sent %q: closed after %v, want the handshake timeout (%v)", sent, took, timeout)
			}
		}
		synctest.Wait()
		if n := srv.Stats().Active; n != 0 {
			t.Errorf("%d connections active", n)
		}
	})
}

// TestIdle, on fake time: a connection without streams is sent GOAWAY
// and closed exactly IdleTimeout after it began; one with a stream open
// is not, for a thousand times as long (within its RequestTimeout).
func TestIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 50 * time.Millisecond
		_, _, l := startMem(t, Config{IdleTimeout: idle, RequestTimeout: time.Hour})
		start := time.Now()
		c := h2test.DialMem(t, l)
		for {
			f, err := c.Next()
			if err != nil {
				t.Fatalf("closed without GOAWAY: %v", err)
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				if g.ErrCode != http2.ErrCodeNo || time.Since(start) != idle {
					t.Errorf("GOAWAY %v after %v, want NO_ERROR after %v", g.ErrCode, time.Since(start), idle)
				}
				break
			}
		}
		if _, err := c.Next(); err == nil {
			t.Error("the connection goes on after GOAWAY")
		}

		// A stream whose message is half sent holds the connection open
		// past the idle time (a PING answered after it says so), and is
		// answered.
		c = h2test.DialMem(t, l)
		fr := c.Framer()
		msg := h2test.Message(echo(100))
		must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.HeaderBlock(echoMethod), EndHeaders: true}))
		must(t, fr.WriteData(1, false, msg[:50]))
		time.Sleep(1000 * idle)
		data := 0
		c.Sync(&data) // fails the test on GOAWAY's close
		must(t, fr.WriteData(1, true, msg[50:]))
		answered(t, c, 1, "0")
	})
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
