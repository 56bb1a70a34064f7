package client

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// fakeDaemon is a hand-written stand-in for dthrottled on a Unix socket:
// each connection is served by behave, which reads requests and decides
// what (if anything) to write.
type fakeDaemon struct {
	path    string
	l       net.Listener
	accepts atomic.Int64
	conns   sync.WaitGroup
	mu      sync.Mutex
	open    []net.Conn
}

// behavior serves one connection of a fakeDaemon.
type behavior func(c net.Conn, r *bufio.Reader)

// sockPath returns a short socket path in a fresh temp dir (t.TempDir's
// paths can outgrow the 108 bytes a Unix socket path may have).
func sockPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dtc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// startFake serves behave on path until the test ends.
func startFake(t testing.TB, path string, behave behavior) *fakeDaemon {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return serveFake(t, &fakeDaemon{path: path, l: l}, behave)
}

// startFakeMem serves behave on an in-memory listener until the test
// ends; a client made by memClient dials it. Inside synctest.Test, the
// client's timeouts are the bubble's fake time.
func startFakeMem(t testing.TB, behave behavior) *fakeDaemon {
	t.Helper()
	return serveFake(t, &fakeDaemon{path: "memory", l: testkit.NewListener()}, behave)
}

// serveFake serves behave on f's listener until the test ends.
func serveFake(t testing.TB, f *fakeDaemon, behave behavior) *fakeDaemon {
	t.Helper()
	l := f.l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.accepts.Add(1)
			f.mu.Lock()
			f.open = append(f.open, c)
			f.mu.Unlock()
			f.conns.Add(1)
			go func() {
				defer f.conns.Done()
				defer c.Close()
				behave(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(f.stop)
	return f
}

// stop closes the listener and every connection, and waits for them.
// Safe to call twice.
func (f *fakeDaemon) stop() {
	f.l.Close()
	f.mu.Lock()
	for _, c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.conns.Wait()
}

// answer is the well-behaved daemon: a tag starting with "no" gets NO,
// any other OK. Replies to everything read together go in one write.
func answer(c net.Conn, r *bufio.Reader) {
	var out []byte
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "no") {
			out = append(out, "NO\n"...)
		} else {
			out = append(out, "OK\n"...)
		}
		if r.Buffered() == 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}

// hang reads requests and never answers.
func hang(c net.Conn, r *bufio.Reader) {
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
	}
}

// gated answers like answer, but each reply waits for a value on release;
// every request read is announced on got.
type gated struct {
	got     chan string
	release chan struct{}
	wrote   chan error // the result of each reply's write
}

func newGated() *gated {
	return &gated{got: make(chan string, 100), release: make(chan struct{}, 100), wrote: make(chan error, 100)}
}

func (g *gated) serve(c net.Conn, r *bufio.Reader) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		g.got <- strings.TrimSuffix(line, "\n")
		<-g.release
		rep := "OK\n"
		if strings.HasPrefix(line, "no") {
			rep = "NO\n"
		}
		_, err = c.Write([]byte(rep))
		g.wrote <- err
	}
}

// newClock is a clock tests step by hand.
func newClock() *testkit.Clock { return testkit.NewClock(time.Unix(1_700_000_000, 0)) }

// newTestClient returns a Client on path with cfg's other fields, stepped
// by clk when clk is not nil, closed when the test ends.
// The fake daemons speak the line protocol only: the Client must not
// attach to them (shared_test.go tests attaching against a real table).
func newTestClient(t testing.TB, path string, cfg Config, clk *testkit.Clock) *Client {
	t.Helper()
	cfg.Address = path
	cfg.NoShare = true
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		c.health.now = clk.Now
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memClient is newTestClient for f, a fake daemon of startFakeMem.
func memClient(t testing.TB, f *fakeDaemon, cfg Config, clk *testkit.Clock) *Client {
	t.Helper()
	c := newTestClient(t, f.path, cfg, clk)
	l := f.l.(*testkit.Listener)
	c.dial = func(context.Context, string, string, time.Time) (net.Conn, error) { return l.Dial() }
	return c
}
