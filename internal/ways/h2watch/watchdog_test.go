package h2watch

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestStalledClient: a client whose window does not let the answers be
// written, from the start (a window of 0) or once some of an answer is
// (10 bytes), has its connection closed, the timeout after its requests
// were taken and not before; the connection is counted, and nothing of
// the answers is sent beyond the window.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, window := range []uint32{0, 10} {
		t.Run("window "+strconv.Itoa(int(window)), func(t *testing.T) {
			dog, addr := startServer(t, timeout, nil)
			c := h2test.Dial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
			start := time.Now()
			for id := uint32(1); id <= 5; id += 2 {
				c.Call(id, echoMethod, echo(100))
			}
			answered, data := c.UntilClosed()
			if took := time.Since(start); took < timeout {
				t.Errorf("closed %v after the requests, before the timeout (%v)", took, timeout)
			}
			if answered != 3 || data > 3*int(window) {
				t.Errorf("%d answers begun, %d bytes of them sent; want 3 begun, at most %d bytes", answered, data, 3*window)
			}
			testkit.WaitFor(t, 10*time.Second, "the streams to be ended", func() bool { return dog.Streams() == 0 })
			if n := dog.Stalled(); n != 1 {
				t.Errorf("%d connections stalled, want 1", n)
			}
		})
	}
}

// TestSpentConnectionWindow: a client that never opens the connection's
// window again has its connection closed once the answers have spent it,
// the timeout after the answer that does not fit.
func TestSpentConnectionWindow(t *testing.T) {
	dog, addr := startServer(t, 100*time.Millisecond, nil)
	c := h2test.Dial(t, addr)
	data, answers := 0, 0
	for id := uint32(1); ; id += 2 {
		if id > 201 {
			t.Fatalf("%d answers, %d bytes: the connection's window was never spent", answers, data)
		}
		c.Call(id, echoMethod, echo(5<<10))
		f, err := c.NextEnd(id, &data)
		if err != nil {
			break
		}
		if f.StreamEnded() {
			answers++
		}
	}
	if data > defaultWindow || data < defaultWindow-8<<10 {
		t.Errorf("%d bytes of answers sent, want the connection's window, %d, nearly spent", data, defaultWindow)
	}
	testkit.WaitFor(t, 10*time.Second, "the streams to be ended", func() bool { return dog.Streams() == 0 })
	if n := dog.Stalled(); n != 1 {
		t.Errorf("%d connections stalled, want 1", n)
	}
}

// TestReaderGone: a client that opens its windows but reads nothing has
// the connection closed once the server's writes, blocked on the full
// socket, have waited the timeout.
func TestReaderGone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	dog, addr := startServer(t, 100*time.Millisecond, h2test.SmallBuffers{Listener: l})
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	h := h2test.New(t, c, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	must(t, h.WindowUpdate(0, 1<<31-1-defaultWindow))
	// 100 answers of 5 KiB each: more than the sockets hold.
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for id := uint32(1); id < 200; id += 2 {
		if err := h.Send(id, echoMethod, echo(5<<10)); err != nil {
			break // the server closed it, or stopped reading
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the connection to be closed stalled", func() bool { return dog.Stalled() == 1 })
	testkit.WaitFor(t, 10*time.Second, "the streams to be ended", func() bool { return dog.Streams() == 0 })
}

// TestLastingWatch: a health watch outlives the timeout many times over
// while its client reads: the watchdog checks it again and again and
// leaves it be.
func TestLastingWatch(t *testing.T) {
	dog, addr := startServer(t, 20*time.Millisecond, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(h2test.GRPC(t, addr)).Watch(ctx, &healthpb.HealthCheckRequest{})
	must(t, err)
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", r, err)
	}
	testkit.WaitFor(t, 10*time.Second, "the watch to be checked 5 times", func() bool { return dog.lasting.Load() >= 5 })
	if n, open := dog.Stalled(), dog.Streams(); n != 0 || open != 1 {
		t.Errorf("%d connections stalled, %d streams open; want none stalled, the watch open", n, open)
	}
}

// TestAnswered: a client that reads its answers leaves nothing open and
// nothing counted.
func TestAnswered(t *testing.T) {
	dog, addr := startServer(t, time.Second, nil)
	c := h2test.Dial(t, addr)
	data := 0
	for id := uint32(1); id <= 9; id += 2 {
		c.Call(id, echoMethod, echo(100))
		if _, err := c.NextEnd(id, &data); err != nil {
			t.Fatalf("stream %d: %v", id, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the streams to be ended", func() bool { return dog.Streams() == 0 })
	if n := dog.Stalled(); n != 0 {
		t.Errorf("%d connections stalled, want 0", n)
	}
}
