package gubernator

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

// call is one query the fake limiter was asked.
type call struct {
	now time.Time
	tag string
	req bucket.Request
}

// fakeLimiter answers AllowQuota from answer, and records each call. It
// is safe for concurrent use.
type fakeLimiter struct {
	answer func(tag string, r bucket.Request) (bucket.Verdict, error)
	mu     sync.Mutex
	calls  []call
}

func (f *fakeLimiter) AllowQuota(now time.Time, tag []byte, r bucket.Request) (bucket.Verdict, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{now, string(tag), r})
	f.mu.Unlock()
	return f.answer(string(tag), r)
}

func (f *fakeLimiter) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// counting is a limiter keeping a window of burst hits per tag, never
// refilled: enough to tell a spent query from a read.
func counting(burst int) *fakeLimiter {
	left := map[string]int{}
	var mu sync.Mutex
	return &fakeLimiter{answer: func(tag string, r bucket.Request) (bucket.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		n, ok := left[tag]
		if !ok {
			n = burst
		}
		p := bucket.Policy{Name: "default", Action: bucket.Limit, Burst: r.Quota.Burst, Rate: r.Quota.Rate}
		if r.Hits == 0 {
			v := bucket.Verdict{Allowed: n >= 1, Policy: p, Tokens: float64(n)}
			if n < burst {
				v.Full = time.Minute
			}
			return v, nil
		}
		if n < r.Hits {
			return bucket.Verdict{Policy: p, Tokens: float64(n), Wait: time.Minute, Full: time.Minute}, nil
		}
		left[tag] = n - r.Hits
		return bucket.Verdict{Allowed: true, Policy: p, Tokens: float64(n - r.Hits), Full: time.Minute}, nil
	}}
}

// startServer serves a Server for l on a gRPC and an HTTP listener on
// 127.0.0.1:0 until the test ends, and returns their addresses.
func startServer(t testing.TB, l *fakeLimiter, cfg Config) (s *Server, grpcAddr, httpAddr string) {
	t.Helper()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = serveOn(t, l, cfg, gl, hl)
	return s, gl.Addr().String(), hl.Addr().String()
}

// startMem is startServer on two in-memory listeners, the gRPC one and
// the HTTP one, which the test dials: inside synctest.Test the server's
// timeouts, and net/http's pauses, are the bubble's fake time.
func startMem(t testing.TB, l *fakeLimiter, cfg Config) (s *Server, grpcL, httpL *testkit.Listener) {
	t.Helper()
	grpcL, httpL = testkit.NewListener(), testkit.NewListener()
	return serveOn(t, l, cfg, grpcL, httpL), grpcL, httpL
}

// serveOn serves a Server for l on gl as gRPC and on hl as HTTP until
// the test ends, then shuts it down.
func serveOn(t testing.TB, l *fakeLimiter, cfg Config, gl, hl net.Listener) (s *Server) {
	t.Helper()
	cfg.Advertise = gl.Addr().String()
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return t0 }
	}
	s = New(l, cfg)
	done := make(chan error, 2)
	go func() { done <- s.Serve(GRPCListener(gl)) }()
	go func() { done <- s.Serve(hl) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	})
	return s
}
