package daemon

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// withGubernator is base with Gubernator's API on both listeners.
const withGubernator = base + `[gubernator]
grpc = "127.0.0.1:0"
http = "127.0.0.1:0"
`

// TestGubernatorSharesTheTable: Gubernator's API decides in the table the
// query socket decides from; both its listeners serve, and its families
// are served.
func TestGubernatorSharesTheTable(t *testing.T) {
	r := start(t, withGubernator, nil)
	ga, ha := r.GubernatorGRPCAddr(), r.GubernatorHTTPAddr()
	if ga == nil || ha == nil || ga.String() == ha.String() {
		t.Fatalf("addresses: grpc %v, http %v", ga, ha)
	}
	c, err := guber.DialV1Server(ga.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{Name: "n", UniqueKey: "k", Hits: 1, Limit: 2, Duration: 60000}}}
	resp, err := c.GetRateLimits(ctx, req)
	if err != nil || resp.Responses[0].Status != guber.Status_UNDER_LIMIT || resp.Responses[0].Remaining != 1 {
		t.Fatalf("first hit: %v, %v", resp, err)
	}
	// The tag keeps the limit it was decided under: the line protocol's
	// query takes the last hit of the window.
	if got := r.ask(t, "n_k", "n_k"); got != "OK NO" {
		t.Fatalf("the line protocol after one hit of 2: %q, want OK NO", got)
	}
	hr, err := http.Post("http://"+ha.String()+"/v1/GetRateLimits", "application/json",
		strings.NewReader(`{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":2,"duration":60000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		t.Fatalf("HTTP: %s", hr.Status)
	}
	h, err := c.HealthCheck(ctx, &guber.HealthCheckReq{})
	if err != nil || h.Status != "healthy" || h.PeerCount != 1 || h.AdvertiseAddress != ga.String() {
		t.Errorf("HealthCheck = %+v, %v", h, err)
	}
	fams := mt.Gather(t, r.collectors()...)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_gubernator_calls_total", Labels: "result=ok", Kind: mt.Counter, Value: 2},
		mt.Sample{Name: "dthrottle_gubernator_limits_total", Labels: "result=under_limit", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_gubernator_limits_total", Labels: "result=over_limit", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_gubernator_connections_accepted_total", Kind: mt.Counter, Value: 2},
	)
	mt.Lint(t, r.collectors()...)
}

// TestGubernatorOneListener: either listener may be off.
func TestGubernatorOneListener(t *testing.T) {
	r := start(t, base+"[gubernator]\nhttp = \"127.0.0.1:0\"\n", nil)
	if r.GubernatorGRPCAddr() != nil || r.GubernatorHTTPAddr() == nil {
		t.Errorf("http only: grpc %v, http %v", r.GubernatorGRPCAddr(), r.GubernatorHTTPAddr())
	}
	off := start(t, base, nil)
	if off.GubernatorGRPCAddr() != nil || off.GubernatorHTTPAddr() != nil {
		t.Errorf("off: grpc %v, http %v", off.GubernatorGRPCAddr(), off.GubernatorHTTPAddr())
	}
}

// TestGubernatorQuotas: a policy's quotas key governs the limits
// Gubernator's rate limits state: "lower" lowers the limit to the
// policy's, "none" answers the item with an error, and the other items
// of the call are answered all the same.
func TestGubernatorQuotas(t *testing.T) {
	r := start(t, withGubernator+`[[policy]]
prefix = "low_"
rate = 1
burst = 2
quotas = "lower"
[[policy]]
prefix = "fixed_"
rate = 0.001
burst = 2
quotas = "none"
`, nil)
	c, err := guber.DialV1Server(r.GubernatorGRPCAddr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	item := func(name string) *guber.RateLimitReq {
		return &guber.RateLimitReq{Name: name, UniqueKey: "k", Hits: 1, Limit: 5, Duration: 60000}
	}
	resp, err := c.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{item("low"), item("fixed"), item("free")}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Responses
	if got[0].Error != "" || got[0].Limit != 2 || got[0].Remaining != 1 {
		t.Errorf("lowered: %+v, want limit 2, remaining 1", got[0])
	}
	if got[1].Error != "bucket: the tag's policy takes no stated limit" {
		t.Errorf("none: error %q", got[1].Error)
	}
	if got[2].Error != "" || got[2].Limit != 5 || got[2].Remaining != 4 {
		t.Errorf("any: %+v, want limit 5, remaining 4", got[2])
	}
}
