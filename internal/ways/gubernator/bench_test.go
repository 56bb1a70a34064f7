package gubernator

import (
	"context"
	"strconv"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// BenchmarkGetRateLimits is the service alone, without gRPC, on the real
// table: calls of 1 and of 100 rate limits over 1000 keys, each served
// under a stated limit it never runs out of (a leaky bucket and a token
// bucket). Per call; the decisions a second are calls times the batch.
func BenchmarkGetRateLimits(b *testing.B) {
	for _, alg := range []guber.Algorithm{guber.Algorithm_TOKEN_BUCKET, guber.Algorithm_LEAKY_BUCKET} {
		for _, batch := range []int{1, 100} {
			b.Run(alg.String()+"/"+strconv.Itoa(batch), func(b *testing.B) {
				tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1, Burst: 10}, MaxTags: 10000, MaxTagBytes: 256})
				if err != nil {
					b.Fatal(err)
				}
				s := New(tb, Config{})
				calls := make([]*guber.GetRateLimitsReq, 1000/batch)
				for i := range calls {
					req := &guber.GetRateLimitsReq{}
					for j := range batch {
						req.Requests = append(req.Requests, &guber.RateLimitReq{Name: "bench", UniqueKey: "account:" + strconv.Itoa(i*batch+j),
							Hits: 1, Limit: 1 << 29, Duration: 1000, Algorithm: alg})
					}
					calls[i] = req
				}
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					r, err := s.svc.GetRateLimits(ctx, calls[i%len(calls)])
					if err != nil {
						b.Fatal(err)
					}
					for _, resp := range r.Responses {
						if resp.Status != guber.Status_UNDER_LIMIT || resp.Error != "" {
							b.Fatal(resp)
						}
					}
					i++
				}
				b.ReportMetric(float64(b.Elapsed())/float64(b.N*batch)/float64(time.Nanosecond), "ns/limit")
			})
		}
	}
}
