package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// fakeRLS answers OK to the first value it sees and OVER_LIMIT to every
// other, or fails every call when fail is set. It records the descriptors
// asked about.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	fail bool

	mu     sync.Mutex
	first  string
	values map[string]bool
	bad    string // a request not as RLSLoad sends them
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if f.fail {
		return nil, errors.New("fake refuses")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.GetDomain() != "d" || len(r.GetDescriptors()) != 1 || len(r.GetDescriptors()[0].GetEntries()) != 1 ||
		r.GetDescriptors()[0].GetEntries()[0].GetKey() != "k" || r.GetHitsAddend() != 1 {
		f.bad = r.String()
	}
	v := r.GetDescriptors()[0].GetEntries()[0].GetValue()
	f.values[v] = true
	if f.first == "" {
		f.first = v
	}
	code := rlsv3.RateLimitResponse_OVER_LIMIT
	if v == f.first {
		code = rlsv3.RateLimitResponse_OK
	}
	return &rlsv3.RateLimitResponse{OverallCode: code}, nil
}

func serveFakeRLS(t *testing.T, f *fakeRLS) string {
	t.Helper()
	l := listenUnix(t)
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return "unix:" + l.Addr().String()
}

func TestRLSLoad(t *testing.T) {
	f := &fakeRLS{values: map[string]bool{}}
	addr := serveFakeRLS(t, f)
	res, err := RLSLoad{Addr: addr, Domain: "d", Key: "k", Values: 10, Inflight: 4,
		Warmup: 50 * time.Millisecond, Duration: 200 * time.Millisecond, Pids: []int{os.Getpid()}}.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res.Queries == 0 || res.OK == 0 || res.OK >= res.Queries {
		t.Errorf("queries %d, OK %d: want some of each answer", res.Queries, res.OK)
	}
	if res.P50 <= 0 || res.P99 < res.P50 || res.ServerCPU < 0 || res.LoadCPU < 0 {
		t.Errorf("p50 %v, p99 %v, CPU %v / %v", res.P50, res.P99, res.ServerCPU, res.LoadCPU)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bad != "" {
		t.Errorf("unexpected request %s", f.bad)
	}
	if len(f.values) != 10 {
		t.Errorf("%d distinct values asked about, want 10", len(f.values))
	}
}

func TestRLSLoadServerError(t *testing.T) {
	addr := serveFakeRLS(t, &fakeRLS{fail: true})
	_, err := RLSLoad{Addr: addr, Domain: "d", Key: "k", Values: 10, Inflight: 4,
		Warmup: time.Second, Duration: time.Second}.Run()
	if err == nil || !strings.Contains(err.Error(), "fake refuses") {
		t.Errorf("got %v, want the server's error", err)
	}
}
