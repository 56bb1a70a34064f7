package daemon

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// withRLS is base with the rate limit service on TCP and a policy for
// one descriptor.
const withRLS = base + `[[policy]]
name = "upload"
prefix = "rls:api|generic_key=upload"
rate = 0.001
burst = 2
[rls]
listen = "127.0.0.1:0"
`

// rlsClient asks the rate limit service at addr ("host:port", or
// "unix:/path").
func rlsClient(t *testing.T, addr string) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	target := "passthrough:///" + addr
	if strings.HasPrefix(addr, "/") {
		target = "unix://" + addr
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc), healthpb.NewHealthClient(cc)
}

// rlsAsk sends one request of domain "api" with a descriptor per element
// of descs (each "key=value,key=value") and returns its codes, as
// "OVER_LIMIT: OVER_LIMIT OK".
func rlsAsk(t *testing.T, c rlsv3.RateLimitServiceClient, hitsAddend uint32, descs ...string) string {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: hitsAddend}
	for _, d := range descs {
		rd := &rlcommon.RateLimitDescriptor{}
		for _, e := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(e, "=")
			rd.Entries = append(rd.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit %v: %v", descs, err)
	}
	out := resp.GetOverallCode().String() + ":"
	for _, s := range resp.GetStatuses() {
		out += " " + s.GetCode().String()
	}
	return out
}

// TestRLSSharesTheTable: the rate limit service decides from, and
// charges, the table the query socket decides from, under the same
// policies; its health service says SERVING; its families are served.
func TestRLSSharesTheTable(t *testing.T) {
	r := start(t, withRLS, nil)
	c, h := rlsClient(t, r.RLSAddr().String())
	if got := rlsAsk(t, c, 0, "generic_key=upload"); got != "OK: OK" {
		t.Fatalf("first: %s", got)
	}
	if got := r.ask(t, "rls:api|generic_key=upload", "rls:api|generic_key=upload"); got != "OK NO" {
		t.Fatalf("the line protocol after one request: %q, want OK NO (burst 2)", got)
	}
	if got := rlsAsk(t, c, 0, "generic_key=upload"); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("after the line protocol spent the bucket: %s", got)
	}
	// Under the default policy (burst 3): a charge of 2 after the
	// response leaves one request.
	if got := rlsAsk(t, c, 2, "user=alice,dthrottle_charge=1"); got != "OK: OK" {
		t.Fatalf("the charge: %s", got)
	}
	if got := r.ask(t, "rls:api|user=alice", "rls:api|user=alice"); got != "OK NO" {
		t.Fatalf("the line protocol after a charge of 2: %q, want OK NO", got)
	}
	if v := r.tagView("rls:api|user=alice"); v.Unreported != 3 {
		t.Errorf("alice: %+v, want 3 hits to report", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hr, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"}); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", hr, err)
	}
	fams := mt.Gather(t, r.collectors()...)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=ok", Kind: mt.Counter, Value: 2},
		mt.Sample{Name: "dthrottle_rls_requests_total", Labels: "result=over_limit", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_descriptors_total", Labels: "result=charged", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_rls_connections", Kind: mt.Gauge, Value: 1},
		mt.Sample{Name: "dthrottle_policy_charges_total", Labels: "policy=default", Kind: mt.Counter, Value: 1},
	)
	mt.Lint(t, r.collectors()...)
}

// TestRLSReload: unmatched and charge_key change on reload; listen and
// max_conns need a restart, and the service goes on serving on its
// address.
func TestRLSReload(t *testing.T) {
	r := start(t, withRLS, nil)
	addr := r.RLSAddr().String()
	c, _ := rlsClient(t, addr)
	for range 3 {
		rlsAsk(t, c, 0, "k=v")
	}
	if got := rlsAsk(t, c, 0, "k=v"); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("under the default policy: %s", got)
	}
	next := strings.Replace(withRLS, `"127.0.0.1:0"`, `"127.0.0.1:1"`, 1) + "max_conns = 5\nunmatched = \"ok\"\ncharge_key = \"cost\"\n"
	writeConfig(t, filepath.Dir(r.path), r.sock, next)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := r.ev.wait(t, Reloaded, 0); !slices.Equal(ev.Keys, []string{"rls.listen", "rls.max_conns"}) {
		t.Fatalf("needs a restart: %v, want [rls.listen rls.max_conns]", ev.Keys)
	}
	if got := r.RLSAddr().String(); got != addr {
		t.Fatalf("after the reload the service is on %s, want %s", got, addr)
	}
	if got := rlsAsk(t, c, 0, "k=v"); got != "OK: OK" {
		t.Fatalf("unmatched = ok after the reload: %s", got)
	}
	// charge_key = "cost": dthrottle_charge is an entry like any other,
	// cost makes a charge.
	if got := rlsAsk(t, c, 5, "generic_key=upload,cost=1"); got != "OK: OK" {
		t.Fatalf("a charge under charge_key cost: %s", got)
	}
	if got := rlsAsk(t, c, 0, "generic_key=upload"); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("after charging upload 5: %s", got)
	}
}

// TestRLSUnixSocket: on a Unix socket, made with listen.unix_mode, gone
// after the stop.
func TestRLSUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.sock")
	r := start(t, strings.Replace(withRLS, `"127.0.0.1:0"`, `"unix:`+path+`"`, 1), nil)
	if a := r.RLSAddr(); a == nil || a.Network() != "unix" || a.String() != path {
		t.Fatalf("the service is on %v, want unix %s", a, path)
	}
	c, _ := rlsClient(t, path)
	if got := rlsAsk(t, c, 0, "generic_key=upload", "generic_key=upload"); got != "OK: OK OK" {
		t.Fatalf("two descriptors of one bucket (burst 2): %s", got)
	}
	r.stop()
	<-r.done
	r.done <- nil
	r.Close(time.Second)
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		t.Error("the service's socket still answers after the stop")
	}
}

// Without rls.listen, there is no service and none of its families.
func TestRLSOff(t *testing.T) {
	r := start(t, base, nil)
	if a := r.RLSAddr(); a != nil {
		t.Fatalf("the service is on %v with none configured", a)
	}
	mt.Absent(t, mt.Gather(t, r.collectors()...), "dthrottle_rls_")
}

// TestRLSMaxRequests: rls.max_requests reaches the service. With 1, a
// health watch in progress leaves no room: a request is answered
// RESOURCE_EXHAUSTED at once, and served again once the watch ends.
func TestRLSMaxRequests(t *testing.T) {
	r := start(t, withRLS+"max_requests = 1\n", nil)
	c, h := rlsClient(t, r.RLSAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watchCtx, endWatch := context.WithCancel(ctx)
	w, err := h.Watch(watchCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if _, err := c.ShouldRateLimit(ctx, req); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request beside the watch: %v, want RESOURCE_EXHAUSTED", err)
	}
	endWatch()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.ShouldRateLimit(ctx, req)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the watch ended: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
