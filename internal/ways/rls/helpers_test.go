package rls

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// t0 is the instant the test clock starts at.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// DefaultChargeKey is the charge key the tests give the service, as
// dthrottled gives its rls.charge_key.
const DefaultChargeKey = "dthrottle_charge"

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

// startServer starts a Server for tb on 127.0.0.1:0 and returns its
// address; it is shut down when the test ends.
func startServer(t testing.TB, tb Table, cfg Config) (*Server, string) {
	t.Helper()
	s := New(tb, cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, s, l)
	return s, l.Addr().String()
}

// startMem starts a Server for tb like startServer, on an in-memory
// listener that h2test.DialMem and h2test.GRPCMem dial: inside
// synctest.Test, its timeouts are the bubble's fake time.
func startMem(t testing.TB, tb Table, cfg Config) (*Server, *testkit.Listener) {
	t.Helper()
	s := New(tb, cfg)
	l := testkit.NewListener()
	serveOn(t, s, l)
	return s, l
}

// serveOn serves s on l until the test ends, then shuts it down.
func serveOn(t testing.TB, s *Server, l net.Listener) {
	t.Helper()
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
}

// client asks a rate limit service.
type client struct {
	t  testing.TB
	rl rlsv3.RateLimitServiceClient
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	return &client{t: t, rl: rlsv3.NewRateLimitServiceClient(h2test.GRPC(t, addr))}
}

// call sends req and returns the answer or the error.
func (c *client) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.rl.ShouldRateLimit(ctx, req)
}

// ask sends a request of domain with descs and returns the answer,
// failing the test on an error.
func (c *client) ask(domain string, descs ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	c.t.Helper()
	resp, err := c.call(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs})
	if err != nil {
		c.t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// desc is a descriptor of "key=value" entries.
func desc(entries ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// hits sets d's hits_addend to n.
func hits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// codesOf is the overall code and each status's code, as text:
// "OVER_LIMIT: OVER_LIMIT OK".
func codesOf(r *rlsv3.RateLimitResponse) string {
	s := r.GetOverallCode().String() + ":"
	for _, st := range r.GetStatuses() {
		s += " " + st.GetCode().String()
	}
	return s
}

// header is the value of the header field name the answer adds, "" when
// it adds none.
func header(r *rlsv3.RateLimitResponse, name string) string {
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}

// headerNames lists the header fields an answer adds.
func headerNames(hs []*corev3.HeaderValue) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.GetKey())
	}
	return out
}

// wantCode fails the test unless err is a gRPC status with code want.
func wantCode(t testing.TB, err error, want codes.Code, what string) {
	t.Helper()
	if st, _ := status.FromError(err); err == nil || st.Code() != want {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

// must fails the test on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
