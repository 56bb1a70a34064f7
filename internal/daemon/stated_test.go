package daemon

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// withStated has a policy given as a quota that takes no stated limit,
// the HTTP endpoint and the rate limit service.
const withStated = base + `
[[policy]]
name = "fixed"
prefix = "fixed:"
limit = 100
per = "1h"
quotas = "none"
[[policy]]
name = "locked"
prefix = "rls:api|user=locked"
rate = 1
burst = 1
quotas = "none"
[http]
listen = "127.0.0.1:0"
[rls]
listen = "127.0.0.1:0"
`

// TestStatedLimits: the daemon gives its table to the HTTP endpoint and
// the rate limit service as their Limiter, and the policies' quotas key
// reaches the table.
func TestStatedLimits(t *testing.T) {
	r := start(t, withStated, nil)
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(query string) string {
		t.Helper()
		resp, err := hc.Get("http://" + r.HTTPAddr().String() + "/v1/allow?" + query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.Status[:3] + " " + resp.Header.Get("RateLimit") + " " + strings.TrimSpace(string(body))
	}
	// Two an hour, stated, where the default policy has a burst of 3.
	for i, want := range []string{`200 "default";r=1;t=1800 OK`, `200 "default";r=0;t=3600 OK`, `403 "default";r=0;t=3600 NO`} {
		if got := get("tag=k&limit=2&per=1h"); got != want {
			t.Fatalf("stated query %d: %q, want %q", i+1, got, want)
		}
	}
	// The tag keeps its stated limit: a line query finds it spent.
	if got := r.ask(t, "k"); got != "NO" {
		t.Errorf("a line query after the stated limit was spent: %s, want NO", got)
	}
	// quotas = "none": refused, as the endpoint documents; the policy's
	// own limit (100 an hour, burst 100) still serves.
	if got := get("tag=fixed:a&limit=1000&per=1s"); !strings.HasPrefix(got, "403  forbidden:") {
		t.Errorf("a stated limit under quotas = none: %q", got)
	}
	if got := get("tag=fixed:a"); got != `200 "fixed";r=99;t=36 OK` {
		t.Errorf("the quota policy without a stated limit: %q", got)
	}

	c, _ := rlsClient(t, r.RLSAddr().String())
	ask := func(tag string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: tag}},
			Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR},
		}}})
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := ask("bob")
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("descriptor of 1 an hour, request %d: %v, %v; want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	// A descriptor under a policy taking no stated limit fails the
	// request, PERMISSION_DENIED.
	_, err := ask("locked")
	if st, _ := status.FromError(err); st.Code() != codes.PermissionDenied {
		t.Errorf("a descriptor limit under quotas = none: %v, want PERMISSION_DENIED", err)
	}
}
