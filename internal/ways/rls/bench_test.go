package rls

import (
	"context"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// BenchmarkShouldRateLimit is the handler alone, without gRPC: a request
// of one descriptor of two entries over 1000 tags, served; then of two
// descriptors.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(strconv.Itoa(n)+"desc", func(b *testing.B) {
			tb := newTable(b, bucket.Policy{Rate: 1e9, Burst: 1000000})
			s := New(tb, Config{})
			svc := service{Server: s}
			reqs := make([]*rlsv3.RateLimitRequest, 1000)
			for i := range reqs {
				req := &rlsv3.RateLimitRequest{Domain: "bench"}
				for j := range n {
					req.Descriptors = append(req.Descriptors, desc("generic_key=k"+strconv.Itoa(j), "remote_address=192.0.2."+strconv.Itoa(i)))
				}
				reqs[i] = req
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatal(r, err)
				}
				i++
			}
		})
	}
}
