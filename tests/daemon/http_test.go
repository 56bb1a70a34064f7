package daemon

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// httpConfig runs the HTTP decision endpoint on a port the test picks,
// beside the admin endpoint, with a dry-run policy.
const httpConfig = `
[listen]
unix = "%SOCK%"
[limit]
rate = 0.001
burst = 3
[[policy]]
name = "try"
prefix = "try:"
rate = 0.001
burst = 1
dry_run = true
[[policy]]
name = "free"
prefix = "free:"
action = "allow"
[admin]
http = "127.0.0.1:0"
[http]
listen = "127.0.0.1:0"
max_conns = 3
`

// rawConn is a client connection that writes raw bytes and reads answers.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func rawDial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{c, bufio.NewReader(c)}
}

// do writes raw and reads one answer to a GET.
func (c *rawConn) do(t *testing.T, raw string) *http.Response {
	t.Helper()
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.r, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// served dials addr until a connection is served (the daemon answers 503
// while max_conns connections are open, and closed ones free their places
// only once it has seen them close), sends raw on it and returns the
// answer and the connection, left open.
func served(t *testing.T, addr, raw string) (*http.Response, *rawConn) {
	t.Helper()
	var resp *http.Response
	var c *rawConn
	testkit.WaitFor(t, 10*time.Second, "a connection below max_conns", func() bool {
		c = rawDial(t, addr)
		if resp = c.do(t, raw); resp.StatusCode == 503 {
			c.Close()
			return false
		}
		return true
	})
	return resp, c
}

func get1(tag string) string {
	return "GET /v1/allow?tag=" + tag + " HTTP/1.1\r\nHost: dthrottle\r\n\r\n"
}

func TestHTTPEndpointBurst(t *testing.T) {
	d, addr := harness.StartHTTPDaemon(t, httpConfig)
	c := rawDial(t, addr)
	for i := range 3 {
		resp := c.do(t, get1("1.2.3.4"))
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"default";q=3;w=3000` {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
		}
	}
	resp := c.do(t, get1("1.2.3.4"))
	if resp.StatusCode != 403 || resp.Header.Get("Retry-After") != "1000" || resp.Header.Get("RateLimit") != `"default";r=0;t=3000` {
		t.Fatalf("the fourth request: %d %v; want 403, Retry-After 1000, r=0", resp.StatusCode, resp.Header)
	}
	// The line protocol shares the bucket.
	if got := harness.NC(t, "1.2.3.4\n", "-U", d.Sock); got != "NO\n" {
		t.Fatalf("the line protocol: %q, want NO", got)
	}
	// A dry-run policy serves, marks the answer, and counts.
	for _, want := range []string{"served", "refused"} {
		if resp := c.do(t, get1("try%3Ax")); resp.StatusCode != 200 || resp.Header.Get("Dthrottle-Dry-Run") != want {
			t.Fatalf("dry run: %d %v, want 200 and %s", resp.StatusCode, resp.Header, want)
		}
	}
	fams := harness.Scrape(t, d.AdminAddr(t))
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dthrottle_http_requests_total", []string{"result=allowed"}, 5},
		{"dthrottle_http_requests_total", []string{"result=refused"}, 1},
		{"dthrottle_policy_dry_run_refused_total", []string{"policy=try"}, 1},
		{"dthrottle_policy_dry_run_refused_total", []string{"policy=default"}, 0},
		{"dthrottle_policy_queries_total", []string{"policy=try", "result=ok"}, 2},
	} {
		if got := harness.Metric(t, fams, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	code, body := harness.HTTPDo(t, http.MethodGet, "http://"+d.AdminAddr(t)+"/v1/tags/try:x")
	var tag api.Tag
	if err := json.Unmarshal([]byte(body), &tag); code != 200 || err != nil || !tag.DryRun || tag.DryRunRefused != 1 {
		t.Fatalf("/v1/tags/try:x: %d %s (%v)", code, body, err)
	}
}

// TestHTTPEndpointBadInput sends what a broken or hostile client might:
// each gets a clear status or a clean close, and nothing else is
// disturbed.
func TestHTTPEndpointBadInput(t *testing.T) {
	d, addr := harness.StartHTTPDaemon(t, httpConfig)
	for _, tc := range []struct {
		name string
		raw  string
		code int
	}{
		{"no tag", "GET /v1/allow HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"bad escape", "GET /v1/allow?tag=%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"bad cost", "GET /v1/allow?tag=a&cost=-3 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"admin path", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404},
		{"post", "POST /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405},
		{"oversized tag", "GET /v1/allow?tag=" + strings.Repeat("x", 9000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
		{"oversized head", "GET /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\nCookie: " + strings.Repeat("c", 20000) + "\r\n\r\n", 431},
		{"garbage", "\x00\x01\x02 nonsense\r\n\r\n", 400},
		{"two lengths", "GET /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
	} {
		resp, c := served(t, addr, tc.raw)
		c.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
	}
	// A slow client holds one connection, which the others do not wait on.
	slow := rawDial(t, addr)
	slow.Write([]byte("GET /v1/allow?tag=slow HTTP/1.1\r\nHo"))
	resp, keep := served(t, addr, get1("free:ok"))
	if resp.StatusCode != 200 {
		t.Fatalf("beside a slow client: %d", resp.StatusCode)
	}
	// max_conns = 3: a third open connection is served, a fourth is not.
	resp, third := served(t, addr, get1("free:ok"))
	if resp.StatusCode != 200 {
		t.Fatalf("the third connection: %d", resp.StatusCode)
	}
	testkit.WaitFor(t, 10*time.Second, "a connection over max_conns to get 503", func() bool {
		return rawDial(t, addr).do(t, get1("free:ok")).StatusCode == 503
	})
	if resp := keep.do(t, get1("free:ok")); resp.StatusCode != 200 {
		t.Fatalf("an open connection after the 503: %d", resp.StatusCode)
	}
	if got := harness.NC(t, "q\n", "-U", d.Sock); got != "OK\n" {
		t.Fatalf("the line protocol: %q", got)
	}
	if rejected := harness.Metric(t, harness.Scrape(t, d.AdminAddr(t)), "dthrottle_http_connections_rejected_total"); rejected < 1 {
		t.Errorf("rejected connections counted: %v", rejected)
	}
	// Closing the connections frees their places.
	slow.Close()
	third.Close()
	testkit.WaitFor(t, 10*time.Second, "a new connection to be served again", func() bool {
		return rawDial(t, addr).do(t, get1("free:ok")).StatusCode == 200
	})
}
