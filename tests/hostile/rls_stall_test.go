package hostile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// This file measures what clients that never let the rate limit service
// answer cost it: HTTP/2 connections that announce a flow-control window
// of 0 (SETTINGS_INITIAL_WINDOW_SIZE = 0), so that no reply's message can
// ever be sent, and then ask on more streams than a connection may hold
// (the clients: h2stall_test.go).

// rlsStallConfig serves the rate limit service on its defaults, with an
// allow policy for the stalled clients' descriptor, so that the table
// keeps nothing for them and the memory measured is the service's.
const rlsStallConfig = `
[listen]
unix = "%SOCK%"
[[policy]]
name = "stall"
prefix = "rls:stall|"
action = "allow"
[admin]
http = "127.0.0.1:0"
[rls]
listen = "127.0.0.1:0"
`

// rlsRequestTimeout is the rate limit service's request timeout, which
// docs/integrations/envoy.md promises.
const rlsRequestTimeout = 5 * time.Second

// TestRLSStalledClients opens 1,000 connections to the rate limit service
// that announce a window of 0 and send 110 requests each (10 more than a
// connection may have in progress), so that no answer can ever be sent
// whole: the daemon's memory grows by less than 100 MiB; every stream
// ends (refused at once, or its connection closed) within the request
// timeout of the daemon taking it (its answer's headers, which the window
// does not hold back); the refusals and the closed connections are
// counted; and the service answers an ordinary client afterwards.
func TestRLSStalledClients(t *testing.T) {
	harness.Alone(t)
	const perConn = 110
	n := connsAllowed(t, 1000)
	harness.RequireRLS(t, rlsStallConfig)
	config, addr := harness.PinPort(t, rlsStallConfig, "listen")
	d := harness.StartDaemon(t, config)
	admin := d.AdminAddr(t)
	pid := d.Cmd.Process.Pid
	rss0 := rssKiB(t, pid)

	msg := grpcMessage(t, &rlsv3.RateLimitRequest{Domain: "stall",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	start := time.Now()
	clients := make([]*stalledH2, n)
	for i := range clients {
		clients[i] = dialStalledH2(t, addr, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, msg, perConn)
	}
	sent := time.Since(start)
	// Each client's streams end, or the test fails after the request
	// timeout and as long again for the daemon to take 110,000 requests.
	o := awaitStalled(t, clients, start, time.Now().Add(2*rlsRequestTimeout+10*time.Second))
	held, last, outcomes, stalledConns := o.held, o.last, o.streams, o.closed
	peak := peakRSSKiB(t, pid)
	fams := harness.Scrape(t, admin)
	busy, stalled := harness.Metric(t, fams, "dthrottle_rls_busy_total"), harness.Metric(t, fams, "dthrottle_rls_connections_stalled_total")
	t.Logf("%d connections x %d requests sent in %v: daemon RSS %d KiB, peak +%d KiB (%d B a connection); streams %v, held at most %v; the last ended %v after the start; %v refused busy and %v connections closed stalled, as counted",
		n, perConn, sent.Round(time.Millisecond), rss0, peak-rss0, (peak-rss0)*1024/int64(n), outcomes,
		held.Round(time.Millisecond), last.Round(time.Millisecond), busy, stalled)
	if growth := peak - rss0; growth >= 100<<10 {
		t.Errorf("the daemon's memory grew by %d KiB, want under 100 MiB", growth)
	}
	if held > rlsRequestTimeout+time.Second {
		t.Errorf("a stream was held %v, want within the request timeout (%v) and a second", held, rlsRequestTimeout)
	}
	if int(busy) != outcomes["busy"] || int(stalled) != stalledConns {
		t.Errorf("the daemon counted %v refused busy and %v connections stalled; the clients saw %d and %d", busy, stalled, outcomes["busy"], stalledConns)
	}
	if outcomes["closed"] == 0 || outcomes["busy"] == 0 {
		t.Errorf("streams %v: want some refused busy and some closed with their connection", outcomes)
	}
	for _, c := range clients {
		c.c.Close()
	}
	awaitMetric(t, admin, "dthrottle_rls_connections", 0)
	if r := askRLSGo(t, addr, "api", "generic_key=after"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("after the stalled clients: %v, want OK", r.GetOverallCode())
	}
}

// askRLSGo asks the rate limit service on addr about one descriptor of
// "key=value" entries, through grpc-go, and returns the answer.
func askRLSGo(t *testing.T, addr, domain string, entries ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	harness.Must(t, err)
	defer cc.Close()
	d := &rlcommon.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	harness.Must(t, err)
	return r
}
