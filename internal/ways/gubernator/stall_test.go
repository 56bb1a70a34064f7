package gubernator

import (
	"testing"
	"testing/synctest"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"golang.org/x/net/http2"

	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestStalledClient, on fake time: a gRPC client that announces a window
// of 0, so that no answer can be sent, has its connection closed by the
// watchdog (package h2watch, which tests the other ways a client
// stalls) exactly RequestTimeout after its calls were taken; the
// connection is counted in Stats, and its calls were answered.
func TestStalledClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		s, grpcL, _ := startMem(t, counting(3), Config{RequestTimeout: timeout})
		c := h2test.DialMem(t, grpcL, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{Name: "n", UniqueKey: "k", Hits: 1, Limit: 3, Duration: 1000}}}
		start := time.Now()
		for id := uint32(1); id <= 5; id += 2 {
			c.Call(id, guber.V1_GetRateLimits_FullMethodName, req)
		}
		c.UntilClosed()
		if took := time.Since(start); took != timeout {
			t.Errorf("closed %v after the calls, want the request timeout (%v)", took, timeout)
		}
		synctest.Wait()
		if st := s.Stats(); st.Stalled != 1 || st.Calls != 3 || st.Active != 0 {
			t.Errorf("stats %+v, want 1 stalled connection, 3 calls answered, none active", st)
		}
	})
}
