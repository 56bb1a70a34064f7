package h2watch

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestStalledClient, on fake time: a client whose window does not let
// the answers be written, from the start (a window of 0) or once some of
// an answer is (10 bytes), has its connection closed exactly the timeout
// after its requests were taken; the connection is counted, and nothing
// of the answers is sent beyond the window.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, window := range []uint32{0, 10} {
		t.Run("window "+strconv.Itoa(int(window)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dog, l := startServer(t, timeout)
				c := h2test.DialMem(t, l, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
				start := time.Now()
				for id := uint32(1); id <= 5; id += 2 {
					c.Call(id, echoMethod, echo(100))
				}
				answered, data := c.UntilClosed()
				if took := time.Since(start); took != timeout {
					t.Errorf("closed %v after the requests, want the timeout (%v)", took, timeout)
				}
				if answered != 3 || data > 3*int(window) {
					t.Errorf("%d answers begun, %d bytes of them sent; want 3 begun, at most %d bytes", answered, data, 3*window)
				}
				synctest.Wait()
				if n, open := dog.Stalled(), dog.Streams(); n != 1 || open != 0 {
					t.Errorf("%d connections stalled, %d streams open; want 1, 0", n, open)
				}
			})
		})
	}
}

// TestSpentConnectionWindow, on fake time: a client that never opens the
// connection's window again has its connection closed once the answers
// have spent it, exactly the timeout after the answer that does not fit.
func TestSpentConnectionWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		dog, l := startServer(t, timeout)
		c := h2test.DialMem(t, l)
		data, answers := 0, 0
		var sent time.Time
		for id := uint32(1); ; id += 2 {
			if id > 201 {
				t.Fatalf("%d answers, %d bytes: the connection's window was never spent", answers, data)
			}
			sent = time.Now()
			c.Call(id, echoMethod, echo(5<<10))
			f, err := c.NextEnd(id, &data)
			if err != nil {
				break
			}
			if f.StreamEnded() {
				answers++
			}
		}
		if took := time.Since(sent); took != timeout {
			t.Errorf("closed %v after the call that did not fit, want the timeout (%v)", took, timeout)
		}
		if data > defaultWindow || data < defaultWindow-8<<10 {
			t.Errorf("%d bytes of answers sent, want the connection's window, %d, nearly spent", data, defaultWindow)
		}
		synctest.Wait()
		if n, open := dog.Stalled(), dog.Streams(); n != 1 || open != 0 {
			t.Errorf("%d connections stalled, %d streams open; want 1, 0", n, open)
		}
	})
}

// TestReaderGone, on fake time: a client that opens its windows but
// reads nothing, over buffers of 4 KiB each way, has the connection
// closed exactly when the server's writes, blocked on the full buffers,
// have waited the timeout, and not a nanosecond before.
func TestReaderGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		dog, l := startServer(t, timeout)
		c, server := testkit.Pipe()
		defer c.Close()
		c.SetReadBuffer(4 << 10)
		server.SetWriteBuffer(4 << 10)
		must(t, l.Offer(server))
		h := h2test.New(t, c, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		must(t, h.WindowUpdate(0, 1<<31-1-defaultWindow))
		for id := uint32(1); id < 40; id += 2 { // 20 answers of 5 KiB: more than the buffers hold
			h.Call(id, echoMethod, echo(5<<10))
		}
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if n := dog.Stalled(); n != 0 {
			t.Fatalf("%d connections stalled a nanosecond before the timeout, want 0", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n, open := dog.Stalled(), dog.Streams(); n != 1 || open != 0 {
			t.Errorf("at the timeout: %d connections stalled, %d streams open; want 1, 0", n, open)
		}
	})
}

// TestLastingWatch, on fake time: a health watch outlives the timeout
// many times over while its client reads: the watchdog checks it once
// every timeout, five times in five and a half, and leaves it be.
func TestLastingWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 20 * time.Millisecond
		dog, l := startServer(t, timeout)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w, err := healthpb.NewHealthClient(h2test.GRPCMem(t, l)).Watch(ctx, &healthpb.HealthCheckRequest{})
		must(t, err)
		if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch: %v, %v; want SERVING", r, err)
		}
		time.Sleep(5*timeout + timeout/2)
		synctest.Wait()
		if n, stalled, open := dog.lasting.Load(), dog.Stalled(), dog.Streams(); n != 5 || stalled != 0 || open != 1 {
			t.Errorf("%d checks, %d connections stalled, %d streams open; want 5 checks, none stalled, the watch open", n, stalled, open)
		}
	})
}

// TestAnswered, on fake time: a client that reads its answers leaves
// nothing open and nothing counted.
func TestAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dog, l := startServer(t, time.Second)
		c := h2test.DialMem(t, l)
		data := 0
		for id := uint32(1); id <= 9; id += 2 {
			c.Call(id, echoMethod, echo(100))
			if _, err := c.NextEnd(id, &data); err != nil {
				t.Fatalf("stream %d: %v", id, err)
			}
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n, open := dog.Stalled(), dog.Streams(); n != 0 || open != 0 {
			t.Errorf("%d connections stalled, %d streams open; want 0, 0", n, open)
		}
	})
}
