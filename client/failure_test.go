package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// TestClosedMidReply: the daemon writes half a reply and closes. The query
// fails open at once with an I/O error, not a timeout.
func TestClosedMidReply(t *testing.T) {
	f := startFake(t, sockPath(t), func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		c.Write([]byte("O"))
	})
	c := newTestClient(t, f.path, Config{Timeout: long}, nil)
	ok, err := c.Allow(context.Background(), "a")
	if !ok || err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, %v; want true and a connection error", ok, err)
	}
	if !strings.Contains(err.Error(), "closed the connection") {
		t.Errorf("error %q does not say the daemon closed the connection", err)
	}
	if s := c.Stats(); s.Errors != 1 || s.FailOpen != 1 || s.Timeouts != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestBadReply: a reply that is neither OK nor NO breaks the connection.
func TestBadReply(t *testing.T) {
	f := startFake(t, sockPath(t), func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		c.Write([]byte("YES\n"))
		r.ReadString('\n') // until the client closes
	})
	c := newTestClient(t, f.path, Config{Timeout: long, FailMode: FailClosed}, nil)
	ok, err := c.Allow(context.Background(), "a")
	if ok || err == nil || !strings.Contains(err.Error(), "bad reply") {
		t.Fatalf("got %v, %v; want false and a bad reply error", ok, err)
	}
}

// TestReconnect: the daemon restarts. Once the client has seen its
// connections close, the next query dials a new one, with no backoff: an
// idle connection closing is not a failed query.
func TestReconnect(t *testing.T) {
	path := sockPath(t)
	f := startFake(t, path, answer)
	c := newTestClient(t, path, Config{Timeout: long, Conns: 1}, nil)
	if ok, err := c.Allow(context.Background(), "a"); !ok || err != nil {
		t.Fatalf("before the restart: %v, %v", ok, err)
	}
	f.stop()
	testkit.WaitFor(t, 10*time.Second, "the client to drop its closed connection", func() bool { return c.slots[0].cur.Load() == nil })
	startFake(t, path, answer)
	if ok, err := c.Allow(context.Background(), "no"); ok || err != nil {
		t.Fatalf("after the restart: got %v, %v; want false, nil", ok, err)
	}
	if s := c.Stats(); s.Dials != 2 || s.Reconnects != 1 || s.Errors != 0 {
		t.Fatalf("stats %+v: want 2 dials, 1 reconnect, no error", s)
	}
}

// TestRejectedConnection: a daemon over its connection limit accepts and
// closes at once; the query fails open at once.
func TestRejectedConnection(t *testing.T) {
	f := startFake(t, sockPath(t), func(net.Conn, *bufio.Reader) {})
	c := newTestClient(t, f.path, Config{Timeout: long}, nil)
	if ok, err := c.Allow(context.Background(), "a"); !ok || err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, %v; want true and a connection error", ok, err)
	}
}

func TestInvalidTag(t *testing.T) {
	f := startFake(t, sockPath(t), answer)
	c := newTestClient(t, f.path, Config{Timeout: long}, nil)
	for _, tag := range []string{"a\nb", "a\n", strings.Repeat("x", MaxTagLen+1)} {
		if ok, err := c.Allow(context.Background(), tag); ok || !errors.Is(err, ErrInvalidTag) {
			t.Errorf("tag of %d bytes: got %v, %v; want false, ErrInvalidTag even failing open", len(tag), ok, err)
		}
	}
	if ok, err := c.Allow(context.Background(), strings.Repeat("x", MaxTagLen)); !ok || err != nil {
		t.Errorf("tag of MaxTagLen bytes: got %v, %v", ok, err)
	}
	if ok, err := c.Allow(context.Background(), ""); !ok || err != nil {
		t.Errorf("empty tag: got %v, %v; want served", ok, err)
	}
	if s := c.Stats(); s.Invalid != 3 || s.Dials != 1 {
		t.Errorf("stats %+v: want 3 invalid, one dial", s)
	}
}

func TestClose(t *testing.T) {
	f := startFake(t, sockPath(t), answer)
	c := newTestClient(t, f.path, Config{Timeout: long, FailMode: FailClosed}, nil)
	if ok, err := c.Allow(context.Background(), "a"); !ok || err != nil {
		t.Fatalf("before Close: %v, %v", ok, err)
	}
	c.Close()
	c.Close()
	if ok, err := c.Allow(context.Background(), "a"); ok || !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: got %v, %v; want false, ErrClosed", ok, err)
	}
	if s := c.Stats(); s.Dials != 1 {
		t.Fatalf("dialed after Close: %+v", s)
	}
}

func TestContextDeadline(t *testing.T) {
	f := startFake(t, sockPath(t), hang)
	c := newTestClient(t, f.path, Config{Timeout: long}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ok, err := c.Allow(ctx, "a")
	if !ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, %v; want true, DeadlineExceeded", ok, err)
	}
	// The caller's deadline says nothing about the daemon: no backoff.
	if r := c.health.retryAt.Load(); r != 0 {
		t.Fatal("a canceled query started a backoff")
	}
}

// TestShortDeadlinesDetectHang, on fake time: callers whose contexts
// always end before Timeout still notice a hung daemon, and back off from
// it: queries of 5 ms each, one after the other, against a Timeout of
// 30 ms; the one that gives up at 35 ms finds the first waiting longer
// than Timeout, and the next, the eighth, is backed off.
func TestShortDeadlinesDetectHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Millisecond
		f := startFakeMem(t, hang)
		c := memClient(t, f, Config{Timeout: timeout}, nil)
		start := time.Now()
		for i := 0; ; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			ok, err := c.Allow(ctx, "a")
			cancel()
			if !ok {
				t.Fatalf("query %d refused failing open: %v", i, err)
			}
			if errors.Is(err, ErrBackoff) {
				if took := time.Since(start); i != 7 || took != 35*time.Millisecond {
					t.Errorf("backed off at query %d, %v on; want query 7, 35ms on", i, took)
				}
				break
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("query %d: %v, want DeadlineExceeded", i, err)
			}
			if i == 1000 {
				t.Fatal("1000 queries canceled on a hung daemon, and no backoff")
			}
		}
		if s := c.Stats(); s.Timeouts != 1 || s.Dials != 1 {
			t.Fatalf("stats %+v: want the hang noticed once, on the one connection", s)
		}
	})
}

func TestNewErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Address: "x", Network: "udp"},
		{Address: "x", Timeout: -1},
		{Address: "x", MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		{Address: "x", FailMode: 7},
	} {
		if _, err := New(cfg); err == nil || !strings.HasPrefix(err.Error(), "client: ") {
			t.Errorf("New(%+v): %v, want a client: error", cfg, err)
		}
	}
}

func TestBackoffSteps(t *testing.T) {
	h := health{min: 10 * time.Millisecond, max: 5 * time.Second}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5000, 5000}
	for i, w := range want {
		if got := h.backoff(i + 1); got != w*time.Millisecond {
			t.Errorf("step %d: got %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := h.backoff(1000); got != 5*time.Second {
		t.Errorf("1000 failures: got %v, want the 5s cap", got)
	}
}
