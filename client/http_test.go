package client

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHandler(t *testing.T) {
	f := startFake(t, sockPath(t), answer)
	c := newTestClient(t, f.path, Config{Timeout: long}, nil)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h := c.Middleware(func(r *http.Request) string { return r.Header.Get("X-Key") })(hello)
	for _, tc := range []struct {
		key, retryAfter string
		status          int
	}{
		{"alice", "", http.StatusOK},
		{"no-bob", "1", http.StatusTooManyRequests},
		{"", "", http.StatusOK}, // no tag: unthrottled
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Key", tc.key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("key %q: status %d, Retry-After %q; want %d, %q", tc.key, rec.Code, rec.Header().Get("Retry-After"), tc.status, tc.retryAfter)
		}
		if tc.status == http.StatusOK && rec.Body.String() != "hello" {
			t.Errorf("key %q: body %q, want the wrapped handler's", tc.key, rec.Body)
		}
	}

	custom := &Handler{Client: c, Tag: func(*http.Request) string { return "no-carol" }, Next: hello, RetryAfter: "30"}
	rec := httptest.NewRecorder()
	custom.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "30" {
		t.Errorf("RetryAfter 30: status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// TestHandlerFailOpen: with no daemon, requests are served.
func TestHandlerFailOpen(t *testing.T) {
	c := newTestClient(t, sockPath(t), Config{}, nil)
	served := 0
	h := &Handler{Client: c, Tag: RemoteIP, Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })}
	for range 5 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d with no daemon, want 200 (fail open)", rec.Code)
		}
	}
	if served != 5 || c.Stats().FailOpen != 5 {
		t.Fatalf("served %d, stats %+v", served, c.Stats())
	}
}

func TestRemoteIP(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.1:1234":   "192.0.2.1",
		"[2001:db8::1]:80": "2001:db8::1",
		"@":                "@", // a Unix socket peer: no port to strip
	} {
		r := &http.Request{RemoteAddr: addr}
		if got := RemoteIP(r); got != want {
			t.Errorf("RemoteIP(%q) = %q, want %q", addr, got, want)
		}
	}
}
