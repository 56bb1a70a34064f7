package httpapi

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/decide"
)

// t0 is the instant the test clock starts at.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newClock is a test clock at t0, moved by hand.
func newClock() *testkit.Clock { return testkit.NewClock(t0) }

// newTable is a table with the default policy def and the prefix policies.
func newTable(t testing.TB, def bucket.Policy, policies ...bucket.Policy) *bucket.Table {
	t.Helper()
	tb, err := bucket.New(bucket.Config{Default: def, Policies: policies, MaxTags: 1000, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// startServer starts a Server for d on 127.0.0.1:0 and returns its
// address; it is shut down when the test ends.
func startServer(t testing.TB, d decide.Decider, cfg Config) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, d, cfg, l), l.Addr().String()
}

// startMem starts a Server for d like startServer, on an in-memory
// listener that dialMem dials: inside synctest.Test, net/http's timeouts
// are the bubble's fake time.
func startMem(t testing.TB, d decide.Decider, cfg Config) (*Server, *testkit.Listener) {
	t.Helper()
	l := testkit.NewListener()
	return serveOn(t, d, cfg, l), l
}

// serveOn serves a Server for d on l until the test ends, then shuts it
// down.
func serveOn(t testing.TB, d decide.Decider, cfg Config, l net.Listener) *Server {
	t.Helper()
	s := New(d, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// conn is a raw keep-alive client connection.
type conn struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

// dial connects to addr, with a deadline 10 s on.
func dial(t testing.TB, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &conn{t, c, bufio.NewReader(c)}
}

// dialMem connects to l, an in-memory listener.
func dialMem(t testing.TB, l *testkit.Listener) *conn {
	t.Helper()
	c, err := l.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{t, c, bufio.NewReader(c)}
}

// send writes raw request bytes.
func (c *conn) send(raw string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(raw)); err != nil {
		c.t.Fatal(err)
	}
}

// get sends a GET for target and reads the answer.
func (c *conn) get(target string) *http.Response {
	c.t.Helper()
	c.send("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")
	return c.read("GET")
}

// read reads one answer to a request of method and its body.
func (c *conn) read(method string) *http.Response {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	var body strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&body); err != nil {
		c.t.Fatalf("reading a body: %v", err)
	}
	resp.Body.Close()
	resp.Header.Set("X-Body", body.String())
	return resp
}

// want checks an answer's status and the header fields given as
// name, value pairs ("" for absent).
func want(t testing.TB, what string, resp *http.Response, status int, fields ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d (body %q)", what, resp.StatusCode, status, resp.Header.Get("X-Body"))
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if got := resp.Header.Get(fields[i]); got != fields[i+1] {
			t.Errorf("%s: %s = %q, want %q", what, fields[i], got, fields[i+1])
		}
	}
}

// time500s is a deadline far enough for any benchmark.
func time500s() time.Time { return time.Now().Add(500 * time.Second) }
