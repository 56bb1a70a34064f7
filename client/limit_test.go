package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/httpapi"
)

//lint:file-ignore SA1008 SetHeaders sets the fields as the draft spells them, not canonicalised, and these tests read them so.

// startEndpoint serves the daemon's HTTP decision endpoint, on a table of
// its own, on l until the test ends; its clock stands still, so buckets
// refill only when the test says. Policies: the default (1 a second,
// burst 1), "lower:" taking stated limits only below 10 a second and a
// burst of 5, and "none:" taking none.
func startEndpoint(t *testing.T, l net.Listener) {
	t.Helper()
	tb, err := bucket.New(bucket.Config{MaxTags: 1000, MaxTagBytes: 256,
		Default: bucket.Policy{Name: "default", Rate: 1, Burst: 1},
		Policies: []bucket.Policy{
			{Name: "lower", Prefix: "lower:", Rate: 10, Burst: 5, Quotas: bucket.QuotaLower},
			{Name: "none", Prefix: "none:", Rate: 1, Burst: 1, Quotas: bucket.QuotaNone},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := httpapi.New(tb, httpapi.Config{Limiter: tb, Clock: func() time.Time { return t0 }})
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func newHTTPClient(t *testing.T, addr string, mode FailMode) *Client {
	t.Helper()
	c, err := New(Config{Address: sockPath(t), NoShare: true, HTTP: addr, Timeout: long, FailMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAllowLimit: over a real HTTP endpoint, a stated limit of 3 a
// minute serves three and refuses the fourth, with the bucket in the
// Decision and the endpoint's header fields for SetHeaders.
func TestAllowLimit(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	startEndpoint(t, l)
	c := newHTTPClient(t, l.Addr().String(), FailOpen)
	ctx := context.Background()
	three := Limit{Requests: 3, Per: time.Minute}
	for i, want := range []struct {
		ok        bool
		remaining int
		retry     time.Duration
	}{{true, 2, 0}, {true, 1, 0}, {true, 0, 0}, {false, 0, 20 * time.Second}} {
		d, err := c.AllowLimit(ctx, "key:alice", three)
		if err != nil || d.OK != want.ok || d.Path != AskedHTTP || d.Limit != 3 || d.Remaining != want.remaining || d.RetryAfter != want.retry {
			t.Fatalf("query %d: %+v, %v; want ok %v, limit 3, remaining %d, retry %v", i+1, d, err, want.ok, want.remaining, want.retry)
		}
		if !want.ok {
			h := http.Header{}
			d.SetHeaders(h)
			// Set as the endpoint spells them, as in process (not canonical).
			if h.Get("Retry-After") != "20" || strings.Join(h["RateLimit"], ",") != `"default";r=0;t=60` ||
				strings.Join(h["RateLimit-Policy"], ",") != `"default";q=3;w=60` {
				t.Errorf("SetHeaders: %v", h)
			}
		}
	}
	// The tag's policy, asked without a limit, is another question:
	// another tag under the default's burst of 1 is served once.
	d, err := c.AllowLimit(ctx, "key:bob", Limit{Requests: 2, Per: time.Hour, Window: true})
	if err != nil || !d.OK || d.Limit != 2 || d.Remaining != 1 {
		t.Errorf("a window of 2 an hour: %+v, %v", d, err)
	}
	// A burst given beside the rate.
	if d, err = c.AllowLimit(ctx, "key:carol", Limit{Requests: 60, Per: time.Minute, Burst: 7}); err != nil || d.Limit != 7 || d.Remaining != 6 {
		t.Errorf("60 a minute, burst 7: %+v, %v", d, err)
	}
	// Under "lower", a burst above the policy's 5 is lowered to it.
	if d, err = c.AllowLimit(ctx, "lower:dave", Limit{Requests: 100, Per: time.Second}); err != nil || d.Limit != 5 || d.Remaining != 4 {
		t.Errorf("100 a second under lower: %+v, %v; want the policy's burst of 5", d, err)
	}
	if st := c.Stats(); st.OK != 6 || st.NO != 1 || st.BadLimits != 0 || st.FailOpen != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestAllowLimitRefusals: a limit the daemon refuses is refused, even
// failing open; an empty tag is served unasked, an invalid one refused.
func TestAllowLimitRefusals(t *testing.T) {
	dir := sockPath(t)
	l, err := net.Listen("unix", dir)
	if err != nil {
		t.Fatal(err)
	}
	startEndpoint(t, l)
	c := newHTTPClient(t, "unix:"+dir, FailOpen)
	ctx := context.Background()
	for _, tc := range []struct {
		tag    string
		limit  Limit
		status int
	}{
		{"none:x", Limit{Requests: 1, Per: time.Second}, http.StatusForbidden},
		{"key:x", Limit{}, http.StatusBadRequest},
		{"key:x", Limit{Requests: 1, Per: 500 * time.Microsecond}, http.StatusBadRequest},
		{"key:x", Limit{Requests: 1, Per: time.Second, Burst: 2, Window: true}, http.StatusBadRequest},
	} {
		d, err := c.AllowLimit(ctx, tc.tag, tc.limit)
		le, ok := errors.AsType[*LimitError](err)
		if d.OK || !ok || le.Status != tc.status || le.Msg == "" {
			t.Errorf("%s %+v: %+v, %v; want refused with a %d", tc.tag, tc.limit, d, err, tc.status)
		}
	}
	if d, err := c.AllowLimit(ctx, "", Limit{}); !d.OK || err != nil {
		t.Errorf("empty tag: %+v, %v", d, err)
	}
	if d, err := c.AllowLimit(ctx, "a\nb", Limit{Requests: 1, Per: time.Second}); d.OK || err != ErrInvalidTag {
		t.Errorf("tag with a newline: %+v, %v", d, err)
	}
	if st := c.Stats(); st.BadLimits != 4 || st.Invalid != 1 || st.FailOpen != 0 || st.OK != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestAllowLimitFails: with no endpoint configured, or none listening,
// AllowLimit answers with the fail mode and backs off.
func TestAllowLimitFails(t *testing.T) {
	c := newHTTPClient(t, "", FailClosed)
	if d, err := c.AllowLimit(context.Background(), "k", Limit{Requests: 1, Per: time.Second}); d.OK || err != ErrNoHTTP {
		t.Errorf("no endpoint, fail closed: %+v, %v", d, err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c = newHTTPClient(t, addr, FailOpen)
	d, err := c.AllowLimit(context.Background(), "k", Limit{Requests: 1, Per: time.Second})
	if !d.OK || d.Path != Failed || err == nil || errors.Is(err, ErrBackoff) {
		t.Errorf("endpoint down, fail open: %+v, %v", d, err)
	}
	if d, err = c.AllowLimit(context.Background(), "k", Limit{Requests: 1, Per: time.Second}); !d.OK || !errors.Is(err, ErrBackoff) {
		t.Errorf("right after a failure: %+v, %v; want ErrBackoff", d, err)
	}
	if st := c.Stats(); st.Errors != 1 || st.BackedOff != 1 || st.FailOpen != 2 {
		t.Errorf("stats %+v", st)
	}

	for _, bad := range []string{"unix:", "no-port"} {
		if _, err := New(Config{Address: "/s", HTTP: bad}); err == nil {
			t.Errorf("HTTP %q: New accepted it", bad)
		}
	}
}

func TestSFParam(t *testing.T) {
	for _, tc := range []struct {
		field, key string
		want       int64
	}{
		{`"api";q=1000;w=86400`, "q", 1000},
		{`"api";q=1000;w=86400`, "w", 86400},
		{`"a;q=9,b";q=2;w=3`, "q", 2},
		{`"a\"q=9";r=4;t=5`, "r", 4},
		{`"a";r=4, "b";r=7`, "r", 4},
		{`"a";r=-3`, "r", 0},
		{``, "q", 0},
		{`"a"`, "q", 0},
	} {
		if got := sfParam(tc.field, tc.key); got != tc.want {
			t.Errorf("sfParam(%q, %q) = %d, want %d", tc.field, tc.key, got, tc.want)
		}
	}
}
