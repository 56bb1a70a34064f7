package caddydthrottle

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dthrottle/dthrottle/client"
	"github.com/dthrottle/dthrottle/internal/daemontest"
)

// runDaemon runs a dthrottled in the test's process on the Unix socket
// sock, with extra appended to its config, until the returned function
// or the test's end stops it.
func runDaemon(t testing.TB, sock, extra string) (stop func()) {
	t.Helper()
	text := "[listen]\nunix = \"" + sock + "\"\n" + extra
	if !strings.Contains(extra, "[limit]") {
		text += "[limit]\nrate = 0.001\nburst = 3\n"
	}
	return daemontest.Run(t, sock, text)
}

// newHandler provisions h as Caddy would, quiet, and cleans it up when
// the test ends.
func newHandler(t *testing.T, h *Handler) *Handler {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	h.logger = zap.NewNop()
	t.Cleanup(func() {
		if err := h.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// tagged is the tag of the unit tests: the X-Tag header, else the query's
// tag argument.
const tagged = "{http.request.header.X-Tag}{http.request.uri.query.tag}"

// served counts the requests that reached the next handler.
var served atomic.Int64

var next = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	served.Add(1)
	io.WriteString(w, "hello\n")
	return nil
})

// serve runs one request with X-Tag: tag (none when empty) and the query
// string query through h, as Caddy's server would, with a replacer.
func serve(t *testing.T, h *Handler, tag, query string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/hello.txt?"+query, nil)
	if tag != "" {
		r.Header.Set("X-Tag", tag)
	}
	caddyhttp.NewTestReplacer(r)
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatal(err)
	}
	return w.Result()
}

// awaitAttached waits until the client of h decides in process.
func awaitAttached(t *testing.T, h *Handler) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.client.Stats().Attaches == 0 {
		serve(t, h, "warm-up", "")
		if time.Now().After(deadline) {
			t.Fatalf("not attached to the shared table after 10s: %+v", h.client.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBurstThenRefused: a new tag is asked, then decided in process: three
// served, then 429 with the bucket's headers.
func TestBurstThenRefused(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, "")
	h := newHandler(t, &Handler{Tag: tagged, Socket: sock, Timeout: caddy.Duration(time.Second)})
	awaitAttached(t, h)
	before := h.client.Stats()
	var codes []int
	var res *http.Response
	for range 5 {
		res = serve(t, h, "a", "")
		codes = append(codes, res.StatusCode)
	}
	if got := fmtInts(codes); got != "200 200 200 429 429" {
		t.Fatalf("five requests: %s", got)
	}
	after := h.client.Stats()
	if got := after.InProcess - before.InProcess; got != 4 {
		t.Errorf("decided in process %d of 5 (the first is asked: a new tag), want 4: %+v", got, after)
	}
	b, _ := io.ReadAll(res.Body)
	if string(b) != "Too Many Requests\n" {
		t.Errorf("body %q", b)
	}
	for k, want := range map[string]string{
		"RateLimit-Policy": `"default";q=3;w=3000`,
		"Content-Type":     "text/plain; charset=utf-8",
	} {
		if got := header(res, k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || n < 990 || n > 1000 {
		t.Errorf("Retry-After %q, want about 1000 (a token at 0.001/s)", res.Header.Get("Retry-After"))
	}
	if rl := header(res, "RateLimit"); !strings.HasPrefix(rl, `"default";r=0;t=`) {
		t.Errorf("RateLimit %q", rl)
	}

	// A status of one's own.
	h503 := newHandler(t, &Handler{Tag: tagged, Socket: sock, Status: 503})
	if res := serve(t, h503, "a", ""); res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Errorf("status 503: %s %v", res.Status, res.Header)
	}
}

// header returns the first value of a header field named name in any
// case: SetHeaders sets the RateLimit fields as the draft spells them,
// not in Go's canonical form, and a recorder keeps them so.
func header(res *http.Response, name string) string {
	for k, v := range res.Header {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func fmtInts(a []int) string {
	var s []string
	for _, n := range a {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, " ")
}

// TestBadTags: an empty tag is served without a decision; a tag the
// line protocol cannot carry is refused, whatever the fail mode; a tag
// longer than the daemon keeps verbatim is asked each time.
func TestBadTags(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, "")
	h := newHandler(t, &Handler{Tag: tagged, Socket: sock, Timeout: caddy.Duration(time.Second)})
	awaitAttached(t, h)
	for range 5 {
		if res := serve(t, h, "", ""); res.StatusCode != 200 {
			t.Fatalf("an empty tag: %s, want 200", res.Status)
		}
	}
	for _, q := range []string{"a%0Ab", url.Values{"tag": {strings.Repeat("x", client.MaxTagLen+1)}}.Encode()[4:]} {
		for range 2 {
			if res := serve(t, h, "", "tag="+q); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
				t.Errorf("tag %.20q: %s %v, want 429 with Retry-After", q, res.Status, res.Header)
			}
		}
	}
	long := strings.Repeat("y", 600)
	before := h.client.Stats()
	var codes []int
	for range 4 {
		codes = append(codes, serve(t, h, long, "").StatusCode)
	}
	if fmtInts(codes) != "200 200 200 429" {
		t.Errorf("a 600-byte tag: %v", codes)
	}
	if st := h.client.Stats(); st.InProcess != before.InProcess || st.Invalid != 2*2 {
		t.Errorf("a 600-byte tag decided in process, or the bad tags not counted invalid: %+v", st)
	}
}

// TestFailModes: without a daemon, open serves and closed refuses, at
// once; the daemon appearing later is used without a new handler.
func TestFailModes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	open := newHandler(t, &Handler{Tag: tagged, Socket: sock})
	closed := newHandler(t, &Handler{Tag: tagged, Socket: sock, Fail: "closed"})
	core, logs := observer.New(zap.InfoLevel)
	open.logger = zap.New(core)
	start := time.Now()
	for range 20 {
		if res := serve(t, open, "f", ""); res.StatusCode != 200 {
			t.Fatalf("fail open, no daemon: %s", res.Status)
		}
		if res := serve(t, closed, "f", ""); res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("fail closed, no daemon: %s %v", res.Status, res.Header)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("40 requests without a daemon took %v", took)
	}
	runDaemon(t, sock, "")
	deadline := time.Now().Add(10 * time.Second)
	for serve(t, closed, "g", "").StatusCode != 429 || serve(t, open, "g", "").StatusCode != 429 {
		if time.Now().After(deadline) {
			t.Fatal("the daemon started: tag g never refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+": "+e.Message)
	}
	if want := "warn: dthrottled does not answer; the fail mode does until it answers again|info: dthrottled answers again"; strings.Join(got, "|") != want {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// TestConcurrent: goroutines at once on one tag, decided in process and
// asked: exactly the burst is served.
func TestConcurrent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	runDaemon(t, sock, "")
	h := newHandler(t, &Handler{Tag: tagged, Socket: sock, Timeout: caddy.Duration(time.Second)})
	awaitAttached(t, h)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if serve(t, h, "hot", "").StatusCode == 200 {
					ok.Add(1)
				}
				serve(t, h, "own-"+strconv.Itoa(g), "") // and one's own tag
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 3 {
		t.Errorf("served %d of 400 for a burst of 3", ok.Load())
	}
}

// TestPool: handlers with the same socket, fail mode and timeout share a
// client, which is closed when the last is cleaned up.
func TestPool(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	var hs [3]*Handler
	for i, fail := range []string{"open", "", "closed"} {
		hs[i] = &Handler{Tag: "x", Socket: sock, Fail: fail}
		if err := hs[i].Provision(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if hs[0].client != hs[1].client || hs[0].client == hs[2].client {
		t.Fatal("open and the default do not share a client, or closed shares theirs")
	}
	c := hs[0].client
	if n, _ := clients.References(hs[0].key); n != 2 {
		t.Errorf("%d references, want 2", n)
	}
	must(t, hs[0].Cleanup())
	must(t, hs[0].Cleanup()) // twice: nothing more
	if _, err := c.Check(context.Background(), "x"); err == client.ErrClosed {
		t.Fatal("closed while a handler holds it")
	}
	must(t, hs[1].Cleanup())
	if _, err := c.Check(context.Background(), "x"); err != client.ErrClosed {
		t.Errorf("after the last cleanup: %v, want ErrClosed", err)
	}
	must(t, hs[2].Cleanup())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkServeHTTP: a request through the handler, decided in process,
// its tag the client's address as in Caddyfile.shared, and never refused;
// beside it, what the next handler alone costs.
func BenchmarkServeHTTP(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "d.sock")
	runDaemon(b, sock, "[limit]\nrate = 1e6\nburst = 1000000\n")
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &Handler{Tag: "{http.request.remote.host}", Socket: sock, Timeout: caddy.Duration(time.Second)}
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer h.Cleanup()
	r := httptest.NewRequest(http.MethodGet, "/hello.txt", nil)
	caddyhttp.NewTestReplacer(r)
	w := httptest.NewRecorder()
	nop := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	deadline := time.Now().Add(10 * time.Second)
	for h.client.Stats().InProcess == 0 {
		h.ServeHTTP(w, r, nop)
		if time.Now().After(deadline) {
			b.Fatal("not deciding in process")
		}
		time.Sleep(time.Millisecond)
	}
	b.Run("handler", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.ServeHTTP(w, r, nop)
		}
	})
	b.Run("next alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			nop.ServeHTTP(w, r)
		}
	})
	if st := h.client.Stats(); st.NO != 0 {
		b.Errorf("refused %d: %+v", st.NO, st)
	}
}
