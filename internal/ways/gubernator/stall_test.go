package gubernator

import (
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"golang.org/x/net/http2"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestStalledClient: a gRPC client that announces a window of 0, so that
// no answer can be sent, has its connection closed by the watchdog
// (package h2watch, which tests the other ways a client stalls),
// RequestTimeout after its calls were taken and not before; the
// connection is counted in Stats, and its calls were answered.
func TestStalledClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	s, grpcAddr, _ := startServer(t, counting(3), Config{RequestTimeout: timeout})
	c := h2test.Dial(t, grpcAddr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{Name: "n", UniqueKey: "k", Hits: 1, Limit: 3, Duration: 1000}}}
	start := time.Now()
	for id := uint32(1); id <= 5; id += 2 {
		c.Call(id, guber.V1_GetRateLimits_FullMethodName, req)
	}
	c.UntilClosed()
	if took := time.Since(start); took < timeout {
		t.Errorf("closed %v after the calls, before the request timeout (%v)", took, timeout)
	}
	testkit.WaitFor(t, 10*time.Second, "the connection freed", func() bool { return s.Stats().Active == 0 })
	if st := s.Stats(); st.Stalled != 1 || st.Calls != 3 {
		t.Errorf("stats %+v, want 1 stalled connection, 3 calls answered", st)
	}
}
