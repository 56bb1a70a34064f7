package rls

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestStalledClient, on fake time: a client whose window does not let
// the answers be written, from the start (a window of 0) or once some of
// an answer is (10 bytes), has its connection closed by the watchdog
// (package h2watch, which tests the other ways a client stalls) exactly
// RequestTimeout after its requests were taken; the connection is
// counted in Stats, and nothing of the answers is sent beyond the
// window.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, window := range []uint32{0, 10} {
		t.Run("window "+strconv.Itoa(int(window)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{RequestTimeout: timeout})
				c := h2test.DialMem(t, l, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
				start := time.Now()
				for id := uint32(1); id <= 5; id += 2 {
					c.Call(id, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}})
				}
				answered, data := c.UntilClosed()
				if took := time.Since(start); took != timeout {
					t.Errorf("closed %v after the requests, want the request timeout (%v)", took, timeout)
				}
				if answered != 3 || data > 3*int(window) {
					t.Errorf("%d answers begun, %d bytes of them sent; want 3 begun, at most %d bytes", answered, data, 3*window)
				}
				synctest.Wait()
				if st := s.Stats(); st.Stalled != 1 || st.OK != 3 || st.Active != 0 {
					t.Errorf("stats %+v, want 1 stalled connection, 3 requests decided, none active", st)
				}
			})
		})
	}
}

// TestMaxRequests, on fake time: a request over MaxRequests in progress
// is answered RESOURCE_EXHAUSTED at once, counted; once the stalled
// requests' connection is closed, at RequestTimeout, the service answers
// again.
func TestMaxRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		s, l := startMem(t, newTable(t, bucket.Policy{Rate: 1, Burst: 5}), Config{MaxRequests: 2, RequestTimeout: timeout})
		c := h2test.DialMem(t, l, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v")}}
		start := time.Now()
		c.Call(1, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req)
		c.Call(3, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req)
		synctest.Wait()
		if n := s.Stats().OK; n != 2 {
			t.Fatalf("%d requests decided, want 2", n)
		}
		c.Call(5, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req)
		var data int
		f, err := c.NextEnd(5, &data)
		if err != nil {
			t.Fatal(err)
		}
		if got := h2test.HeaderValue(f, "grpc-status"); got != "8" || !f.StreamEnded() || time.Since(start) != 0 {
			t.Errorf("the third request: grpc-status %q, ended %v, after %v; want 8 (RESOURCE_EXHAUSTED), ended, at once", got, f.StreamEnded(), time.Since(start))
		}
		c.UntilClosed()
		if took := time.Since(start); took != timeout {
			t.Errorf("the stalled connection closed after %v, want the request timeout (%v)", took, timeout)
		}
		synctest.Wait()
		cc := h2test.GRPCMem(t, l)
		if r := (&client{t: t, rl: rlsv3.NewRateLimitServiceClient(cc)}).ask("api", desc("k=v")); codesOf(r) != "OK: OK" {
			t.Errorf("after the stalled connection: %s", codesOf(r))
		}
		if st := s.Stats(); st.Busy != 1 || st.Stalled != 1 || st.OK != 3 {
			t.Errorf("stats %+v, want 1 busy, 1 stalled, 3 decided", st)
		}
	})
}
