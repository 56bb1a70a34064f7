package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/client"
	"github.com/dthrottle/dthrottle/internal/daemontest"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

//lint:file-ignore SA1008 SetHeaders sets the fields as the draft spells them, not canonicalised, and these tests read them so.

// runDaemon runs a real daemon on the Unix socket sock with config text
// (the [listen] section's unix is added first) until stop or the test's
// end.
func runDaemon(t *testing.T, sock, text string) (stop func()) {
	t.Helper()
	return daemontest.Run(t, sock, "[listen]\nunix = \""+sock+"\"\n"+text)
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// awaitAttach checks tags of its own until c has attached n times, at
// most for 5 s.
func awaitAttach(t *testing.T, c *client.Client, n uint64) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("%d attaches", n), func() bool {
		c.Check(context.Background(), "warm")
		return c.Stats().Attaches >= n
	})
}

// awaitPath checks tag until a check is decided by want, at most for 5 s,
// and returns that decision.
func awaitPath(t *testing.T, c *client.Client, tag string, want client.Path) client.Decision {
	t.Helper()
	var d client.Decision
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("%s decided %v", tag, want), func() bool {
		d, _ = c.Check(context.Background(), tag)
		return d.Path == want
	})
	return d
}

const limits = `[limit]
rate = 0.001
burst = 3
[[policy]]
name = "api keys"
prefix = "api:"
rate = 0.5
burst = 2
[[policy]]
prefix = "bad:"
action = "deny"
[[policy]]
name = "trial"
prefix = "dry:"
rate = 0.001
burst = 1
dry_run = true
`

// TestCheckInProcess: a tag the table holds is decided in process, as
// exactly as the daemon would, with the bucket's headers; the first query
// of a new tag is asked.
func TestCheckInProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, limits)
	c := newClient(t, client.Config{Address: sock, Timeout: time.Second})
	awaitAttach(t, c, 1)
	if d, err := c.Check(context.Background(), "api:k"); err != nil || !d.OK || d.Path != client.Asked {
		t.Fatalf("first query of api:k: %+v %v, want asked OK", d, err)
	}
	// The tag is now in the table: the next query is decided here.
	d, _ := c.Check(context.Background(), "api:k")
	if !d.OK || d.Path != client.InProcess || d.Limit != 2 || d.Remaining != 0 {
		t.Errorf("second query of api:k: %+v, want OK with 0 of 2 left", d)
	}
	d, _ = c.Check(context.Background(), "api:k")
	if d.OK || d.Path != client.InProcess || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second {
		t.Fatalf("third query of api:k: %+v, want refused in process, a token within 2 s", d)
	}
	h := http.Header{}
	d.SetHeaders(h)
	if got := h.Get("Retry-After"); got != "1" && got != "2" {
		t.Errorf("Retry-After %q, want 1 or 2", got)
	}
	if got := h["RateLimit-Policy"]; len(got) != 1 || got[0] != `"api keys";q=2;w=4` {
		t.Errorf("RateLimit-Policy %q, want \"api keys\";q=2;w=4", got)
	}
	if got := h["RateLimit"]; len(got) != 1 || !strings.HasPrefix(got[0], `"api keys";r=0;t=`) {
		t.Errorf("RateLimit %q, want \"api keys\";r=0;t=...", got)
	}
	// A deny policy refuses in process without headers of a bucket.
	c.Check(context.Background(), "bad:x")
	d = awaitPath(t, c, "bad:x", client.InProcess)
	h = http.Header{}
	d.SetHeaders(h)
	if d.OK || len(h) != 0 {
		t.Errorf("bad:x: %+v with headers %v, want refused with none", d, h)
	}
	// A dry run serves what the limit refuses, and says so.
	c.Check(context.Background(), "dry:x")
	d, _ = c.Check(context.Background(), "dry:x")
	h = http.Header{}
	d.SetHeaders(h)
	if !d.OK || d.Path != client.InProcess || len(h["DThrottle-Dry-Run"]) != 1 || h["DThrottle-Dry-Run"][0] != "refused" || h.Get("Retry-After") != "" ||
		len(h["RateLimit-Policy"]) != 1 || h["RateLimit-Policy"][0] != `"trial";q=1;w=1000` {
		t.Errorf("dry:x over its burst: %+v with headers %v, want served, dry run refused, the bucket's headers", d, h)
	}
	s := c.Stats()
	if s.InProcess < 3 || s.Attaches != 1 || s.InProcess > s.OK+s.NO {
		t.Errorf("stats %+v: want 3 or more in process of OK+NO, one attach", s)
	}
}

// TestCheckExact: however the queries of one tag are split between the
// socket and the table, and between goroutines, the tag is served exactly
// its burst.
func TestCheckExact(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, limits)
	shared := newClient(t, client.Config{Address: sock, Timeout: time.Second})
	asking := newClient(t, client.Config{Address: sock, Timeout: time.Second, NoShare: true})
	awaitAttach(t, shared, 1)
	shared.Check(context.Background(), "one") // asked: the tag is in the table from now on
	var served atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := shared
			if g%3 == 0 {
				c = asking
			}
			for range 50 {
				if ok, err := c.Allow(context.Background(), "one"); err != nil {
					t.Error(err)
					return
				} else if ok {
					served.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if served.Load() != 2 {
		t.Errorf("served %d of 400 after the first, want the rest of the burst, 2", served.Load())
	}
	if s := asking.Stats(); s.InProcess != 0 || s.Attaches != 0 {
		t.Errorf("NoShare client stats %+v: want nothing in process", s)
	}
	if s := shared.Stats(); s.InProcess == 0 {
		t.Errorf("sharing client stats %+v: want decisions in process", s)
	}
}

// TestCheckDaemonRestart: when the daemon stops, the fail mode answers at
// once; when it is back, the Client attaches again by itself.
func TestCheckDaemonRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	stop := runDaemon(t, sock, limits)
	c := newClient(t, client.Config{Address: sock, Timeout: 100 * time.Millisecond, FailMode: client.FailClosed,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	awaitPath(t, c, "t", client.InProcess)
	stop()
	if d, err := c.Check(context.Background(), "t"); d.OK || d.Path != client.Failed || err == nil {
		t.Fatalf("with the daemon stopped: %+v %v, want the fail mode (closed)", d, err)
	}
	runDaemon(t, sock, limits)
	awaitAttach(t, c, 2)
	c.Check(context.Background(), "t2") // asked: now in the new table
	if d, _ := c.Check(context.Background(), "t2"); !d.OK || d.Path != client.InProcess || d.Remaining != 1 {
		t.Errorf("after the restart: %+v, want served in process with 1 of 3 left", d)
	}
}

// TestMiddlewareInProcess: the middleware answers 429 with the bucket's
// headers once the burst is spent, deciding in process.
func TestMiddlewareInProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, limits)
	c := newClient(t, client.Config{Address: sock, Timeout: time.Second})
	awaitAttach(t, c, 1)
	srv := httptest.NewServer(c.Middleware(func(r *http.Request) string { return "api:" + r.Header.Get("X-Key") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) })))
	defer srv.Close()
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Key", "abc")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	var codes []int
	var last *http.Response
	for range 4 {
		last = get()
		codes = append(codes, last.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 || codes[3] != 429 {
		t.Errorf("codes %v, want 200 200 429 429 (burst 2)", codes)
	}
	if last.Header.Get("Retry-After") == "" || last.Header.Get("RateLimit-Policy") != `"api keys";q=2;w=4` ||
		!strings.HasPrefix(last.Header.Get("RateLimit"), `"api keys";r=0;t=`) {
		t.Errorf("429 headers %v", last.Header)
	}
	if s := c.Stats(); s.InProcess < 3 {
		t.Errorf("stats %+v: want the requests decided in process", s)
	}
}

// TestCheckBadTags: every odd tag gets a defined answer on the shared
// path, and the same bucket as over the socket.
func TestCheckBadTags(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, "max_tag_bytes = 64\n"+limits) // in [listen]
	c := newClient(t, client.Config{Address: sock, Timeout: time.Second})
	awaitAttach(t, c, 1)
	ctx := context.Background()
	if d, err := c.Check(ctx, "a\nb"); d.OK || err != client.ErrInvalidTag {
		t.Errorf("a tag with a newline: %+v %v, want refused, ErrInvalidTag", d, err)
	}
	if d, err := c.Check(ctx, strings.Repeat("x", client.MaxTagLen+1)); d.OK || err != client.ErrInvalidTag {
		t.Errorf("a tag past MaxTagLen: %+v %v, want refused, ErrInvalidTag", d, err)
	}
	if d, err := c.Check(ctx, ""); !d.OK || err != nil {
		t.Errorf("the empty tag: %+v %v, want served", d, err)
	}
	// Bytes of every value, and a trailing '\r', which the daemon strips:
	// "bin\r" and "bin..." share the bucket whichever path decides.
	bin := "\x00\xff\x01\x80 \t;\"bin"
	served := 0
	for i := range 6 {
		tag := bin
		if i%2 == 1 {
			tag += "\r"
		}
		if d, err := c.Check(ctx, tag); err != nil {
			t.Fatalf("%q: %v", tag, err)
		} else if d.OK {
			served++
		}
	}
	if served != 3 {
		t.Errorf("binary tag served %d of 6, want its burst, 3", served)
	}
	// A tag longer than the daemon keeps verbatim is asked every time,
	// and throttled all the same.
	long := strings.Repeat("L", 100)
	served = 0
	for range 5 {
		d, err := c.Check(ctx, long)
		if err != nil || d.Path != client.Asked {
			t.Fatalf("a 100-byte tag: %+v %v, want asked", d, err)
		}
		if d.OK {
			served++
		}
	}
	if served != 3 {
		t.Errorf("the 100-byte tag served %d of 5, want 3", served)
	}
}

// TestCheckNotShared: a daemon that shares nothing is asked every query,
// and attached to at most once in 10 s.
func TestCheckNotShared(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, "share_table = false\n"+limits) // in [listen]
	c := newClient(t, client.Config{Address: sock, Timeout: time.Second})
	for range 30 {
		if d, err := c.Check(context.Background(), "n"); err != nil || d.Path != client.Asked {
			t.Fatalf("%+v %v, want asked", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := c.Stats(); s.Attaches != 0 || s.Dials != 1 || s.InProcess != 0 || s.AttachErrors != 0 {
		t.Errorf("stats %+v: want one dial, nothing attached or decided in process", s)
	}
	if n := client.AttachAttempts(c); n != 1 {
		t.Errorf("%d attaches tried in 0.3 s, want 1", n)
	}
}
