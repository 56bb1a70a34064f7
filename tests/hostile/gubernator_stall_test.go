package hostile

import (
	"context"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// This file measures what gRPC clients that never let Gubernator's API
// answer cost it, as rls_stall_test.go does for the rate limit service
// (the clients: h2stall_test.go).

// gubernatorStallConfig serves Gubernator's gRPC API on its defaults.
const gubernatorStallConfig = `
[listen]
unix = "%SOCK%"
[admin]
http = "127.0.0.1:0"
[gubernator]
grpc = "127.0.0.1:0"
`

// gubernatorRequestTimeout is the Gubernator API's request timeout,
// which docs/integrations/gubernator.md promises.
const gubernatorRequestTimeout = 5 * time.Second

// TestGubernatorStalledClients opens 300 connections to Gubernator's
// gRPC API that announce a window of 0 and send 110 GetRateLimits calls
// each (10 more than a connection may have in progress), so that no
// answer can ever be sent whole: the daemon's memory grows by less than
// 50 MiB; every stream ends (refused at once, or its connection closed)
// within the request timeout of the daemon taking it and a second; the
// refusals and the closed connections are counted; and the API answers
// an ordinary client afterwards.
func TestGubernatorStalledClients(t *testing.T) {
	harness.Alone(t)
	const perConn = 110
	n := connsAllowed(t, 300)
	config, addr := harness.PinPort(t, gubernatorStallConfig, "grpc")
	d := harness.StartDaemon(t, config)
	admin := d.AdminAddr(t)
	pid := d.Cmd.Process.Pid
	rss0 := rssKiB(t, pid)

	msg := grpcMessage(t, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		{Name: "stall", UniqueKey: "k", Hits: 1, Limit: 1 << 40, Duration: 60000}}})
	start := time.Now()
	clients := make([]*stalledH2, n)
	for i := range clients {
		clients[i] = dialStalledH2(t, addr, guber.V1_GetRateLimits_FullMethodName, msg, perConn)
	}
	sent := time.Since(start)
	o := awaitStalled(t, clients, start, time.Now().Add(2*gubernatorRequestTimeout+10*time.Second))
	peak := peakRSSKiB(t, pid)
	fams := harness.Scrape(t, admin)
	busy := harness.Metric(t, fams, "dthrottle_gubernator_busy_total")
	stalled := harness.Metric(t, fams, "dthrottle_gubernator_connections_stalled_total")
	t.Logf("%d connections x %d calls sent in %v: daemon RSS %d KiB, peak +%d KiB (%d B a connection); streams %v, held at most %v; the last ended %v after the start; %v refused busy and %v connections closed stalled, as counted",
		n, perConn, sent.Round(time.Millisecond), rss0, peak-rss0, (peak-rss0)*1024/int64(n), o.streams,
		o.held.Round(time.Millisecond), o.last.Round(time.Millisecond), busy, stalled)
	if growth := peak - rss0; growth >= 50<<10 {
		t.Errorf("the daemon's memory grew by %d KiB, want under 50 MiB", growth)
	}
	if o.held > gubernatorRequestTimeout+time.Second {
		t.Errorf("a stream was held %v, want within the request timeout (%v) and a second", o.held, gubernatorRequestTimeout)
	}
	if int(busy) != o.streams["busy"] || int(stalled) != o.closed {
		t.Errorf("the daemon counted %v refused busy and %v connections stalled; the clients saw %d and %d", busy, stalled, o.streams["busy"], o.closed)
	}
	if o.streams["closed"] == 0 || o.streams["busy"] == 0 {
		t.Errorf("streams %v: want some refused busy and some closed with their connection", o.streams)
	}
	for _, c := range clients {
		c.c.Close()
	}
	awaitMetric(t, admin, "dthrottle_gubernator_connections", 0)
	c, err := guber.DialV1Server(addr, nil)
	harness.Must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		{Name: "after", UniqueKey: "k", Hits: 1, Limit: 3, Duration: 60000}}})
	if err != nil || resp.Responses[0].Status != guber.Status_UNDER_LIMIT {
		t.Errorf("after the stalled clients: %v, %v; want UNDER_LIMIT", resp, err)
	}
}
