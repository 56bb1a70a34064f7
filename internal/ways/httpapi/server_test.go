package httpapi

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

func TestBurstThenRefused(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 0.5, Burst: 3})
	_, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	for i, r := range []string{"2", "1", "0"} {
		resp := c.get("/v1/allow?tag=1.2.3.4")
		want(t, "query "+r, resp, 200, "RateLimit-Policy", `"default";q=3;w=6`,
			"RateLimit", `"default";r=`+r+`;t=`+[]string{"2", "4", "6"}[i], "Retry-After", "", "X-Body", "OK\n",
			"Cache-Control", "no-store", "Dthrottle-Dry-Run", "")
	}
	want(t, "refused", c.get("/v1/allow?tag=1.2.3.4"), 403, "RateLimit-Policy", `"default";q=3;w=6`,
		"RateLimit", `"default";r=0;t=6`, "Retry-After", "2", "X-Body", "NO\n")
	clk.Add(500 * time.Millisecond)
	want(t, "refused later", c.get("/v1/allow?tag=1.2.3.4"), 403, "RateLimit", `"default";r=0;t=6`, "Retry-After", "2")
	clk.Add(1500 * time.Millisecond)
	want(t, "a token back", c.get("/v1/allow?tag=1.2.3.4"), 200, "RateLimit", `"default";r=0;t=6`)
	want(t, "another tag", c.get("/v1/allow?tag=5.6.7.8"), 200, "RateLimit", `"default";r=2;t=2`)
	// The same table as the line protocol: its bucket is spent.
	if tb.Allow(clk.Now(), []byte("1.2.3.4")) {
		t.Error("the table served a tag the endpoint spent")
	}
}

func TestCostAndEscapes(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10}, bucket.Policy{Name: `api "v1"`, Prefix: "api key:", Rate: 2, Burst: 5})
	_, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	want(t, "cost 4", c.get("/v1/allow?cost=4&tag=api+key%3A%E2%82%AC&x=y"), 200,
		"RateLimit-Policy", `"api \"v1\"";q=5;w=3`, "RateLimit", `"api \"v1\"";r=1;t=2`)
	want(t, "cost 2", c.get("/v1/allow?tag=api%20key:%e2%82%ac&cost=2"), 403, "RateLimit", `"api \"v1\"";r=1;t=2`, "Retry-After", "1")
	want(t, "cost over burst", c.get("/v1/allow?tag=api+key:x&cost=6"), 403, "RateLimit", `"api \"v1\"";r=5;t=0`, "Retry-After", "")
	if st, err := tb.Peek(clk.Now(), "api key:€"); err != nil || st.Tokens != 1 || st.Unreported != 4 {
		t.Errorf("bucket %+v, %v: want 1 token left, 4 hits unreported", st, err)
	}
	want(t, "empty tag", c.get("/v1/allow?tag="), 200, "RateLimit", "", "RateLimit-Policy", "")
}

func TestRefuseStatus(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 0.001, Burst: 1}, bucket.Policy{Name: "no", Prefix: "no:", Action: bucket.Deny},
		bucket.Policy{Name: "yes", Prefix: "yes:", Action: bucket.Allow})
	s, addr := startServer(t, tb, Config{RefuseStatus: 429})
	c := dial(t, addr)
	want(t, "first", c.get("/v1/allow?tag=a"), 200)
	want(t, "second", c.get("/v1/allow?tag=a"), 429, "Retry-After", "1000")
	want(t, "deny", c.get("/v1/allow?tag=no:1"), 429, "RateLimit", "", "Retry-After", "")
	want(t, "allow", c.get("/v1/allow?tag=yes:1"), 200, "RateLimit", "")
	s.SetRefuseStatus(403)
	want(t, "403 again", c.get("/v1/allow?tag=a"), 403)
	if st := s.Stats(); st.Allowed != 2 || st.Refused != 3 || st.Accepted != 1 || st.Active != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestDryRunMarked(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 0.001, Burst: 1, DryRun: true})
	s, addr := startServer(t, tb, Config{})
	c := dial(t, addr)
	want(t, "first", c.get("/v1/allow?tag=a"), 200, "Dthrottle-Dry-Run", "served", "RateLimit", `"default";r=0;t=1000`)
	want(t, "second", c.get("/v1/allow?tag=a"), 200, "Dthrottle-Dry-Run", "refused", "RateLimit", `"default";r=0;t=1000`, "Retry-After", "")
	if st := s.Stats(); st.Allowed != 2 || st.DryRun != 1 || st.Refused != 0 {
		t.Errorf("stats %+v", st)
	}
	if ps := tb.PolicyStats()[0]; ps.DryRunRefused != 1 {
		t.Errorf("the table counted %d dry-run refusals, want 1", ps.DryRunRefused)
	}
}

// TestBadRequests, on fake time (net/http waits 500 ms before it closes
// a connection it answered 431).
func TestBadRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
		s, l := startMem(t, tb, Config{})
		c := dialMem(t, l)
		want(t, "no tag", c.get("/v1/allow"), 400, "X-Body", "missing tag parameter\n")
		want(t, "two tags", c.get("/v1/allow?tag=a&tag=b"), 400, "X-Body", "tag given twice\n")
		want(t, "bad escape", c.get("/v1/allow?tag=a%2"), 400, "X-Body", "bad percent-encoding\n")
		want(t, "cost 0", c.get("/v1/allow?tag=a&cost=0"), 400)
		want(t, "cost big", c.get("/v1/allow?tag=a&cost=1000001"), 400)
		want(t, "cost text", c.get("/v1/allow?tag=a&cost=x"), 400)
		want(t, "other path", c.get("/metrics"), 404)
		c.send("POST /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
		want(t, "post", c.read("POST"), 405, "Allow", "GET, HEAD")
		want(t, "long uri", c.get("/v1/allow?tag="+strings.Repeat("a", maxURI)), 414)
		c.send("HEAD /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\n\r\n")
		want(t, "head", c.read("HEAD"), 200, "X-Body", "", "Content-Length", "3")
		want(t, "still in step", c.get("/v1/allow?tag=a"), 200, "RateLimit", `"default";r=8;t=2`)
		if st := s.Stats(); st.Bad != 9 {
			t.Errorf("counted %d bad requests, want 9", st.Bad)
		}
		// A head over the limit: 431, and the connection is closed.
		c.send("GET /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 2*maxHeaderBytes) + "\r\n\r\n")
		resp, err := http.ReadResponse(c.r, &http.Request{Method: "GET"})
		if err != nil || resp.StatusCode != 431 || !resp.Close {
			t.Fatalf("a big head: %v, %v: want 431 and the connection closed", resp, err)
		}
		if _, err := io.Copy(io.Discard, c.r); err != nil {
			t.Errorf("after 431: %v, want the connection closed", err)
		}
		// Nothing else disturbed.
		want(t, "a new connection", dialMem(t, l).get("/v1/allow?tag=a"), 200)
	})
}

func TestPipelinedKeepAlive(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 0.001, Burst: 2})
	_, addr := startServer(t, tb, Config{})
	c := dial(t, addr)
	var req strings.Builder
	for range 4 {
		req.WriteString("GET /v1/allow?tag=p HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	c.send(req.String())
	for i, code := range []int{200, 200, 403, 403} {
		want(t, "pipelined "+string(rune('0'+i)), c.read("GET"), code)
	}
	c.send("GET /v1/allow?tag=q HTTP/1.0\r\n\r\n")
	resp := c.read("GET")
	want(t, "HTTP/1.0", resp, 200)
	if !resp.Close {
		t.Error("HTTP/1.0 without keep-alive: connection left open")
	}
}

func TestMaxConns(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
	s, addr := startServer(t, tb, Config{MaxConns: 1})
	first := dial(t, addr)
	want(t, "first", first.get("/v1/allow?tag=a"), 200)
	second := dial(t, addr)
	second.send("GET /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\n\r\n")
	want(t, "over max_conns", second.read("GET"), 503, "Retry-After", "1")
	want(t, "first still served", first.get("/v1/allow?tag=a"), 200)
	first.c.Close()
	// Its place comes back once the server sees it closed.
	testkit.WaitFor(t, 5*time.Second, "the closed connection no longer active", func() bool { return s.Stats().Active == 0 })
	want(t, "third", dial(t, addr).get("/v1/allow?tag=a"), 200)
	if st := s.Stats(); st.Rejected != 1 || st.Accepted != 2 {
		t.Errorf("stats %+v: want 1 rejected, 2 accepted", st)
	}
}

// TestSlowClientClosed, on fake time: a request head that never ends is
// closed exactly ReadHeaderTimeout after the connection began, and a
// connection with no request exactly IdleTimeout after its last answer;
// the others are served.
func TestSlowClientClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const head, idle = 100 * time.Millisecond, 300 * time.Millisecond
		tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
		_, l := startMem(t, tb, Config{ReadHeaderTimeout: head, IdleTimeout: idle})
		start := time.Now()
		slow := dialMem(t, l)
		slow.send("GET /v1/allow?tag=a HTTP/1.1\r\nHost:")
		if _, err := slow.r.ReadByte(); err == nil {
			t.Error("a request head that never ends got an answer")
		}
		if took := time.Since(start); took != head {
			t.Errorf("a head that never ends: closed after %v, want the read header timeout (%v)", took, head)
		}
		want(t, "others served", dialMem(t, l).get("/v1/allow?tag=c"), 200)

		c := dialMem(t, l)
		want(t, "before idling", c.get("/v1/allow?tag=b"), 200)
		start = time.Now()
		if _, err := c.r.ReadByte(); err != io.EOF {
			t.Errorf("an idle connection: read %v, want EOF", err)
		}
		if took := time.Since(start); took != idle {
			t.Errorf("an idle connection: closed after %v, want the idle timeout (%v)", took, idle)
		}
	})
}

// TestSlowReaderClosed, on fake time: a client that sends requests and
// reads no answer, over 1 KiB buffers each way, has its connection
// closed exactly WriteTimeout after the request whose answer found the
// buffers full, and not a nanosecond before.
func TestSlowReaderClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
		s, l := startMem(t, tb, Config{WriteTimeout: timeout})
		c, server := testkit.Pipe()
		defer c.Close()
		c.SetReadBuffer(1 << 10)
		server.SetWriteBuffer(1 << 10)
		if err := l.Offer(server); err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(strings.Repeat("GET /v1/allow?tag=a HTTP/1.1\r\nHost: x\r\n\r\n", 100)))
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if n := s.Stats().Active; n != 1 {
			t.Fatalf("%d connections served a nanosecond before the write timeout, want 1", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := s.Stats().Active; n != 0 {
			t.Errorf("%d connections served at the write timeout, want 0", n)
		}
	})
}

func TestShutdownStopsServing(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
	s, addr := startServer(t, tb, Config{})
	c := dial(t, addr)
	want(t, "before", c.get("/v1/allow?tag=a"), 200)
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Errorf("an idle connection after Shutdown: read %v, want EOF", err)
	}
	if _, err := http.Get("http://" + addr + "/v1/allow?tag=a"); err == nil {
		t.Error("a request after Shutdown was answered")
	}
}

// blockDecider serves every tag; on the tag "block" it signals entered
// and waits for release.
type blockDecider struct{ entered, release chan struct{} }

func (d *blockDecider) AllowN(_ time.Time, tag []byte, _ int) bucket.Verdict {
	if string(tag) == "block" {
		close(d.entered)
		<-d.release
	}
	return bucket.Verdict{Allowed: true}
}

// TestShutdownAnswersRequestInFlight: Shutdown waits for the request
// being decided, which is answered, and then closes its connection.
func TestShutdownAnswersRequestInFlight(t *testing.T) {
	d := &blockDecider{entered: make(chan struct{}), release: make(chan struct{})}
	s, addr := startServer(t, d, Config{})
	c := dial(t, addr)
	c.send("GET /v1/allow?tag=block HTTP/1.1\r\nHost: x\r\n\r\n")
	<-d.entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(t.Context()) }()
	testkit.WaitFor(t, 5*time.Second, "no longer accepting after Shutdown began", func() bool {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		nc.Close()
		return false
	})
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while a request was being decided", err)
	default:
	}
	close(d.release)
	resp := c.read("GET")
	want(t, "in flight", resp, 200, "X-Body", "OK\n")
	if !resp.Close {
		t.Error("the answer during shutdown left the connection open")
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if st := s.Stats(); st.Active != 0 || st.Allowed != 1 {
		t.Errorf("stats %+v: want 1 allowed, none active", st)
	}
}
