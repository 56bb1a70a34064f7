package gubernator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// The Gubernator API of a real dthrottled, asked by Gubernator's own Go
// client (v2.13.0) over gRPC and by plain HTTP with Gubernator's JSON.

// node is a dthrottled with Gubernator's API on two free loopback ports.
type node struct {
	*harness.Daemon
	grpc, http string
	client     guber.V1Client
}

// startNode starts dthrottled with [gubernator] on free ports, the
// default policy slow enough (0.001 a second, burst 1000) that a stated
// limit, not it, decides; gossip is the [gossip] section's keys.
func startNode(t *testing.T, gossip string) *node {
	t.Helper()
	n := &node{grpc: fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)), http: fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))}
	n.Daemon = harness.StartDaemon(t, fmt.Sprintf(`[listen]
unix = "%%SOCK%%"
[limit]
rate = 0.001
burst = 1000
[gossip]
%s
[gubernator]
grpc = %q
http = %q
`, gossip, n.grpc, n.http))
	c, err := guber.DialV1Server(n.grpc, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.client = c
	return n
}

// ask sends one rate limit over gRPC and returns its answer.
func (n *node) ask(t *testing.T, r *guber.RateLimitReq) *guber.RateLimitResp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.client.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{r}})
	if err != nil {
		t.Fatalf("GetRateLimits: %v\n%s", err, n.Stderr)
	}
	if len(resp.Responses) != 1 {
		t.Fatalf("%d responses to one rate limit", len(resp.Responses))
	}
	return resp.Responses[0]
}

// perMinute is the rate limit of the tests: 3 hits a minute.
func perMinute(key string, hits int64) *guber.RateLimitReq {
	return &guber.RateLimitReq{Name: "requests_per_min", UniqueKey: key, Hits: hits, Limit: 3, Duration: 60000}
}

// inOneMinute runs try with a fresh key until a run starts and ends
// within one minute, and so within one window of a 60000 ms limit (the
// windows are aligned to the minute: a run that crossed into the next saw
// its hits given back). A run takes well under a minute, so the second
// never crosses. try reports what went wrong through the returned errors,
// which count only for a run within one minute.
func inOneMinute(t *testing.T, try func(key string) []string) {
	t.Helper()
	for attempt := range 3 {
		start := time.Now().Truncate(time.Minute)
		errs := try(fmt.Sprintf("account:%d-%d", start.Unix(), attempt))
		if !time.Now().Truncate(time.Minute).Equal(start) {
			t.Logf("run %d crossed into the next minute: again, with another key", attempt+1)
			continue
		}
		for _, e := range errs {
			t.Error(e)
		}
		return
	}
	t.Fatal("three runs each crossed into the next minute")
}

func TestThreeThenOverLimit(t *testing.T) {
	n := startNode(t, "")
	inOneMinute(t, func(key string) (errs []string) {
		threeThenOver(t, n, key, &errs)
		return errs
	})
	// A bad item is answered with Gubernator's error.
	if got := n.ask(t, &guber.RateLimitReq{Name: "requests_per_min", Hits: 1, Limit: 3, Duration: 60000}); got.Error != "field 'unique_key' cannot be empty" {
		t.Errorf("empty unique_key: error %q", got.Error)
	}
}

// threeThenOver spends key's three hits on n, with reads between, and
// adds to errs what differs from what is due.
func threeThenOver(t *testing.T, n *node, key string, errs *[]string) {
	before := time.Now().UnixMilli()
	for i, want := range []struct {
		hits      int64
		status    guber.Status
		remaining int64
	}{
		{1, guber.Status_UNDER_LIMIT, 2},
		{0, guber.Status_UNDER_LIMIT, 2}, // a read spends nothing
		{0, guber.Status_UNDER_LIMIT, 2},
		{1, guber.Status_UNDER_LIMIT, 1},
		{1, guber.Status_UNDER_LIMIT, 0},
		{1, guber.Status_OVER_LIMIT, 0},
		{0, guber.Status_OVER_LIMIT, 0}, // a read says whether one more hit would be served
	} {
		got := n.ask(t, perMinute(key, want.hits))
		after := time.Now().UnixMilli()
		// The window is aligned to the minute: it ends within a minute.
		if got.Status != want.status || got.Remaining != want.remaining || got.Limit != 3 || got.Error != "" ||
			got.ResetTime <= before || got.ResetTime > after+60000 {
			*errs = append(*errs, fmt.Sprintf("step %d (hits %d): %v remaining %d limit %d reset_time %d (now %d) error %q; want %v remaining %d",
				i, want.hits, got.Status, got.Remaining, got.Limit, got.ResetTime, after, got.Error, want.status, want.remaining))
		}
	}
	// Another key has a window of its own.
	if got := n.ask(t, perMinute(key+"-other", 1)); got.Status != guber.Status_UNDER_LIMIT || got.Remaining != 2 {
		*errs = append(*errs, fmt.Sprintf("another key: %v remaining %d", got.Status, got.Remaining))
	}
}

func TestLeakyBucket(t *testing.T) {
	n := startNode(t, "")
	// 2 a second, a burst of 4: four served at once, the fifth refused.
	r := &guber.RateLimitReq{Name: "leaky", UniqueKey: "k", Hits: 1, Limit: 2, Duration: 1000, Burst: 4, Algorithm: guber.Algorithm_LEAKY_BUCKET}
	for i := range 4 {
		if got := n.ask(t, r); got.Status != guber.Status_UNDER_LIMIT || got.Error != "" {
			t.Fatalf("hit %d: %v error %q", i+1, got.Status, got.Error)
		}
	}
	if got := n.ask(t, r); got.Status != guber.Status_OVER_LIMIT || got.Remaining != 0 || got.ResetTime < time.Now().UnixMilli() {
		t.Errorf("fifth hit: %v remaining %d reset_time %d", got.Status, got.Remaining, got.ResetTime)
	}
}

// post sends body to n's /v1/GetRateLimits and returns the status and the
// answer's JSON, compacted.
func (n *node) post(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+n.http+"/v1/GetRateLimits", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return readJSON(t, resp)
}

func readJSON(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return resp.StatusCode, c.String()
}

func TestHTTPJSON(t *testing.T) {
	n := startNode(t, "")
	inOneMinute(t, func(key string) []string { return httpJSON(t, n, key) })
}

// httpJSON spends key's three hits over HTTP, and returns what differs
// from Gubernator's JSON.
func httpJSON(t *testing.T, n *node, key string) (errs []string) {
	ask := func(hits int) string {
		return fmt.Sprintf(`{"requests":[{"name":"requests_per_min","unique_key":%q,"hits":"%d","limit":"3","duration":"60000"}]}`, key, hits)
	}
	var reset string
	for i, want := range []struct {
		hits              int
		status, remaining string
	}{{1, "UNDER_LIMIT", "2"}, {0, "UNDER_LIMIT", "2"}, {1, "UNDER_LIMIT", "1"}, {1, "UNDER_LIMIT", "0"}, {1, "OVER_LIMIT", "0"}} {
		code, body := n.post(t, ask(want.hits))
		var got struct {
			Responses []map[string]any `json:"responses"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK || len(got.Responses) != 1 {
			t.Fatalf("step %d: %d %s (%v)", i, code, body, err)
		}
		if reset == "" {
			reset, _ = got.Responses[0]["reset_time"].(string)
		}
		// Gubernator's gateway: names as in the proto, enums by name,
		// 64-bit integers as strings, every field written.
		want := fmt.Sprintf(`{"responses":[{"status":%q,"limit":"3","remaining":%q,"reset_time":%q,"error":"","metadata":{}}]}`,
			want.status, want.remaining, reset)
		if body != want {
			errs = append(errs, fmt.Sprintf("step %d: %s\nwant %s", i, body, want))
		}
	}
	// gRPC and HTTP decide from the same table.
	if got := n.ask(t, perMinute(key, 0)); got.Status != guber.Status_OVER_LIMIT {
		errs = append(errs, fmt.Sprintf("the key spent over HTTP, read over gRPC: %v remaining %d", got.Status, got.Remaining))
	}
	return errs
}

func TestHealthCheck(t *testing.T) {
	n := startNode(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := n.client.HealthCheck(ctx, &guber.HealthCheckReq{})
	if err != nil || h.Status != guber.Healthy || h.PeerCount != 1 || h.AdvertiseAddress != n.grpc {
		t.Errorf("HealthCheck = %+v, %v; want healthy, 1 peer (itself), %s", h, err, n.grpc)
	}
	resp, err := http.Get("http://" + n.http + "/v1/HealthCheck")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"status":"healthy","message":"","peer_count":1,"advertise_address":%q}`, n.grpc)
	if code, body := readJSON(t, resp); code != http.StatusOK || body != want {
		t.Errorf("GET /v1/HealthCheck = %d %s\nwant 200 %s", code, body, want)
	}
}
