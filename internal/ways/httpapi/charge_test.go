package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// post sends a POST for target, with body, and reads the answer.
func (c *conn) post(target, body string) *http.Response {
	c.t.Helper()
	c.send("POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	return c.read("POST")
}

// TestChargeThenRefused: a cost charged after the response takes the
// bucket into debt, and the queries after it are refused until the debt
// has refilled, with the wait in their headers.
func TestChargeThenRefused(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 0.5, Burst: 3})
	s, addr := startServer(t, tb, Config{Clock: clk.Now, Charger: tb})
	c := dial(t, addr)
	want(t, "before", c.get("/v1/allow?tag=1.2.3.4"), 200, "RateLimit", `"default";r=2;t=2`)
	want(t, "charge", c.post("/v1/charge?tag=1.2.3.4&cost=10", ""), 204,
		"X-Body", "", "Cache-Control", "no-store", "RateLimit", "", "Content-Length", "")
	// 3 - 1 - 10 = -8 tokens: one token back after 9 at 0.5/s, 18 s;
	// full after 22 s.
	want(t, "after", c.get("/v1/allow?tag=1.2.3.4"), 403, "RateLimit", `"default";r=0;t=22`, "Retry-After", "18")
	clk.Add(17 * time.Second)
	want(t, "still in debt", c.get("/v1/allow?tag=1.2.3.4"), 403, "Retry-After", "1")
	clk.Add(time.Second)
	want(t, "refilled", c.get("/v1/allow?tag=1.2.3.4"), 200, "RateLimit", `"default";r=0;t=6`)
	if st, err := tb.Peek(clk.Now(), "1.2.3.4"); err != nil || st.Unreported != 12 {
		t.Errorf("bucket %+v, %v: want 12 hits unreported (two queries and 10 tokens charged)", st, err)
	}
	if st := s.Stats(); st.Charged != 1 || st.Allowed != 2 || st.Refused != 2 || st.Bad != 0 {
		t.Errorf("stats %+v: want 1 charged, 2 allowed, 2 refused", st)
	}
}

// TestChargeWhatIsLeft: a charge is never refused, whatever the cost or
// the policy, and 0 tokens, an empty tag, or an allow or deny policy
// charge nothing; a body is ignored and the connection stays in step.
func TestChargeWhatIsLeft(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 0.001, Burst: 2},
		bucket.Policy{Name: "free", Prefix: "free:", Action: bucket.Allow}, bucket.Policy{Name: "no", Prefix: "no:", Action: bucket.Deny})
	s, addr := startServer(t, tb, Config{Charger: tb, Clock: time500s})
	c := dial(t, addr)
	for _, target := range []string{
		"/v1/charge?tag=a&cost=0",
		"/v1/charge?tag=&cost=5",
		"/v1/charge?tag=free%3A1&cost=5",
		"/v1/charge?tag=no:1&cost=5",
	} {
		want(t, target, c.post(target, ""), 204)
	}
	if st := tb.Stats(); st.Tags != 0 {
		t.Errorf("%d tags tracked after charging nothing", st.Tags)
	}
	want(t, "the largest cost", c.post("/v1/charge?cost=4294967295&tag=big", "ignored body"), 204)
	want(t, "twice over", c.post("/v1/charge?cost=4294967295&tag=big", "{\"tokens\": 1}"), 204)
	if st, err := tb.Peek(time500s(), "big"); err != nil || !(st.Tokens < -1e6) || st.Unreported != math.MaxUint32 {
		t.Errorf("bucket %+v, %v: want deep debt and %d unreported", st, err, uint32(math.MaxUint32))
	}
	want(t, "in step", c.get("/v1/allow?tag=big"), 403)
	want(t, "another tag", c.get("/v1/allow?tag=a"), 200)
	if st := s.Stats(); st.Charged != 6 {
		t.Errorf("counted %d charges, want 6", st.Charged)
	}
	var charges, tokens uint64
	for _, ps := range tb.PolicyStats() {
		charges += ps.Charges
		tokens += ps.ChargedTokens
	}
	if charges != 2 || tokens != 2*math.MaxUint32 {
		t.Errorf("the table counted %d charges of %d tokens, want 2 of %d", charges, tokens, uint64(2*math.MaxUint32))
	}
}

func TestChargeBadRequests(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
	s, addr := startServer(t, tb, Config{Charger: tb})
	c := dial(t, addr)
	for _, tc := range []struct{ target, body string }{
		{"/v1/charge?tag=a", "missing cost parameter: the tokens to charge\n"},
		{"/v1/charge?cost=3", "missing tag parameter\n"},
		{"/v1/charge?tag=a&cost=-1", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=%2B1", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=+1", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=1.5", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=x", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=4294967296", "cost must be an integer from 0 to 4294967295\n"},
		{"/v1/charge?tag=a&cost=1&cost=1", "cost given twice\n"},
		{"/v1/charge?tag=a&tag=b&cost=1", "tag given twice\n"},
		{"/v1/charge?tag=%zz&cost=1", "bad percent-encoding\n"},
	} {
		want(t, tc.target, c.post(tc.target, ""), 400, "X-Body", tc.body)
	}
	want(t, "GET", c.get("/v1/charge?tag=a&cost=1"), 405, "Allow", "POST")
	c.send("HEAD /v1/charge?tag=a&cost=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	want(t, "HEAD", c.read("HEAD"), 405, "Allow", "POST")
	want(t, "long uri", c.post("/v1/charge?cost=1&tag="+strings.Repeat("a", maxURI), ""), 414)
	want(t, "POST to /v1/allow", c.post("/v1/allow?tag=a", ""), 405, "Allow", "GET, HEAD")
	if st, err := tb.Peek(time.Now(), "a"); err == nil {
		t.Errorf("a bad request charged: %+v", st)
	}
	if st := s.Stats(); st.Bad != 16 || st.Charged != 0 {
		t.Errorf("stats %+v: want 16 bad, none charged", st)
	}
}

// Without a Charger the path is unknown.
func TestChargeOff(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
	_, addr := startServer(t, tb, Config{})
	c := dial(t, addr)
	want(t, "off", c.post("/v1/charge?tag=a&cost=1", ""), 404, "X-Body", "not found: the endpoint is GET /v1/allow?tag=\n")
}

// TestChargeConcurrent charges from several connections at once while
// others query: every charge is applied once, and reported.
func TestChargeConcurrent(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 1000000})
	s, addr := startServer(t, tb, Config{Charger: tb, Clock: time500s})
	const workers, rounds = 4, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := dial(t, addr)
			for i := range rounds {
				if resp := c.post("/v1/charge?tag=shared&cost="+strconv.Itoa(w+i), ""); resp.StatusCode != 204 {
					t.Errorf("charge: %d", resp.StatusCode)
				}
				if resp := c.get("/v1/allow?tag=shared"); resp.StatusCode != 200 {
					t.Errorf("query: %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	var want uint64 = workers * rounds // the queries
	for w := range workers {
		for i := range rounds {
			want += uint64(w + i)
		}
	}
	if st, _ := tb.Peek(time500s(), "shared"); uint64(st.Unreported) != want {
		t.Errorf("%d hits unreported, want %d", st.Unreported, want)
	}
	if st := s.Stats(); st.Charged != workers*rounds {
		t.Errorf("%d charges counted, want %d", st.Charged, workers*rounds)
	}
	mt.Expect(t, mt.Gather(t, s.Collector()),
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=charged", Kind: mt.Counter, Value: workers * rounds},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=allowed", Kind: mt.Counter, Value: workers * rounds},
	)
}
