package gubernator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

// dial is Gubernator's own client for addr.
func dial(t *testing.T, addr string) guber.V1Client {
	t.Helper()
	c, err := guber.DialV1Server(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestGetRateLimitsOverGRPC(t *testing.T) {
	fake := counting(3)
	_, addr, _ := startServer(t, fake, Config{})
	c := dial(t, addr)
	ask := func(hits int64) *guber.RateLimitResp {
		t.Helper()
		resp, err := c.GetRateLimits(ctx(t), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
			{Name: "requests_per_min", UniqueKey: "account:1", Hits: hits, Limit: 3, Duration: 60000}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Responses) != 1 {
			t.Fatalf("%d responses, want 1", len(resp.Responses))
		}
		return resp.Responses[0]
	}
	for i, want := range []struct {
		hits      int64
		status    guber.Status
		remaining int64
	}{{1, guber.Status_UNDER_LIMIT, 2}, {0, guber.Status_UNDER_LIMIT, 2}, {1, guber.Status_UNDER_LIMIT, 1},
		{1, guber.Status_UNDER_LIMIT, 0}, {1, guber.Status_OVER_LIMIT, 0}, {0, guber.Status_OVER_LIMIT, 0}} {
		got := ask(want.hits)
		if got.Status != want.status || got.Remaining != want.remaining || got.Limit != 3 || got.Error != "" ||
			got.ResetTime != t0.UnixMilli()+60000 && want.remaining < 3 {
			t.Errorf("step %d: hits %d: got %v remaining %d limit %d reset %d error %q, want %v remaining %d",
				i, want.hits, got.Status, got.Remaining, got.Limit, got.ResetTime, got.Error, want.status, want.remaining)
		}
	}
	calls := fake.Calls()
	if len(calls) != 6 || calls[0].tag != "requests_per_min_account:1" || !calls[0].now.Equal(t0) || calls[1].req.Hits != 0 {
		t.Errorf("calls = %+v", calls)
	}
}

func TestGetRateLimitsBatch(t *testing.T) {
	fake := counting(5)
	inner := fake.answer
	fake.answer = func(tag string, r bucket.Request) (bucket.Verdict, error) {
		switch tag {
		case "n_forbidden":
			return bucket.Verdict{}, bucket.ErrLimitForbidden
		case "n_full":
			return bucket.Verdict{}, bucket.ErrTooManyLimits
		case "n_range":
			return bucket.Verdict{}, &bucket.LimitError{Field: "rate", Value: "1e-12", Want: "above 0"}
		}
		return inner(tag, r)
	}
	s, addr, _ := startServer(t, fake, Config{})
	item := func(name, key string) *guber.RateLimitReq {
		return &guber.RateLimitReq{Name: name, UniqueKey: key, Hits: 1, Limit: 5, Duration: 1000}
	}
	resp, err := dial(t, addr).GetRateLimits(ctx(t), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		item("n", "a"), item("n", ""), item("", "b"), item("n", "forbidden"), item("n", "full"), item("n", "range"), item("n", "a"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		remaining int64
		err       string
	}{{4, ""}, {0, "field 'unique_key' cannot be empty"}, {0, "field 'namespace' cannot be empty"},
		{0, "bucket: the tag's policy takes no stated limit"}, {0, "bucket: too many distinct stated limits in use"},
		{0, "bucket: stated rate 1e-12: must be above 0"}, {3, ""}}
	if len(resp.Responses) != len(want) {
		t.Fatalf("%d responses, want %d", len(resp.Responses), len(want))
	}
	for i, w := range want {
		if got := resp.Responses[i]; got.Remaining != w.remaining || got.Error != w.err {
			t.Errorf("item %d: remaining %d error %q, want %d %q", i, got.Remaining, got.Error, w.remaining, w.err)
		}
	}
	if st := s.Stats(); st.Calls != 1 || st.UnderLimit != 2 || st.Errors != 5 || st.OverLimit != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestBatchTooLarge(t *testing.T) {
	s, addr, httpAddr := startServer(t, counting(1), Config{})
	reqs := make([]*guber.RateLimitReq, MaxBatch+1)
	for i := range reqs {
		reqs[i] = &guber.RateLimitReq{Name: "n", UniqueKey: fmt.Sprint(i), Hits: 1, Limit: 1, Duration: 1000}
	}
	_, err := dial(t, addr).GetRateLimits(ctx(t), &guber.GetRateLimitsReq{Requests: reqs})
	if status.Code(err) != codes.OutOfRange || status.Convert(err).Message() != "Requests.RateLimits list too large; max size is '1000'" {
		t.Errorf("GetRateLimits(1001) = %v, want OutOfRange, Gubernator's message", err)
	}
	// The same over HTTP: 400 with the status as JSON.
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := range MaxBatch + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"n","unique_key":"%d","hits":1,"limit":1,"duration":1000}`, i)
	}
	b.WriteString(`]}`)
	code, body := post(t, httpAddr, b.String())
	if code != http.StatusBadRequest || compact(t, body) != `{"code":11,"message":"Requests.RateLimits list too large; max size is '1000'","details":[]}` {
		t.Errorf("POST 1001 = %d %s", code, body)
	}
	if st := s.Stats(); st.TooLarge != 2 || st.Calls != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

// post sends body to /v1/GetRateLimits at addr and returns the status
// and the body of the answer.
func post(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	return postWith(t, http.DefaultClient, addr, body)
}

// postMem is a client of s's HTTP listener l, an in-memory one, for
// postWith inside synctest.Test. When the test ends, before the server's
// shutdown, it closes its idle connections and waits until s serves
// none: net/http's Shutdown, which the server starts and does not wait
// for, would otherwise poll for them on a clock that no longer moves
// once the test's function has returned.
func postMem(t *testing.T, s *Server, l *testkit.Listener) *http.Client {
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return l.Dial() }}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		testkit.WaitFor(t, time.Minute, "the HTTP connections closed", func() bool { return s.Stats().Active == 0 })
		synctest.Wait()
	})
	return &http.Client{Transport: tr}
}

// postWith posts body to addr's GetRateLimits with c, and returns the
// answer's status and body.
func postWith(t *testing.T, c *http.Client, addr, body string) (int, string) {
	t.Helper()
	resp, err := c.Post("http://"+addr+"/v1/GetRateLimits", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestGetRateLimitsOverHTTP, on fake time: net/http waits 500 ms before
// it closes the connection of a body it refused unread.
func TestGetRateLimitsOverHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, l := startMem(t, counting(3), Config{})
		c, addr := postMem(t, s, l), l.Addr().String()
		const one = `{"requests":[{"name":"requests_per_min","unique_key":"account:1","hits":"1","limit":"3","duration":"60000","algorithm":"TOKEN_BUCKET","behavior":"BATCHING","unknown":1}]}`
		reset := t0.UnixMilli() + 60000
		for i, want := range []string{
			fmt.Sprintf(`{"responses":[{"status":"UNDER_LIMIT","limit":"3","remaining":"2","reset_time":"%d","error":"","metadata":{}}]}`, reset),
			fmt.Sprintf(`{"responses":[{"status":"UNDER_LIMIT","limit":"3","remaining":"1","reset_time":"%d","error":"","metadata":{}}]}`, reset),
			fmt.Sprintf(`{"responses":[{"status":"UNDER_LIMIT","limit":"3","remaining":"0","reset_time":"%d","error":"","metadata":{}}]}`, reset),
			fmt.Sprintf(`{"responses":[{"status":"OVER_LIMIT","limit":"3","remaining":"0","reset_time":"%d","error":"","metadata":{}}]}`, reset),
		} {
			if code, body := postWith(t, c, addr, one); code != http.StatusOK || compact(t, body) != want {
				t.Errorf("step %d: %d %s\nwant 200 %s", i, code, body, want)
			}
		}
		// Enums as numbers, and an item's error, as Gubernator's gateway takes and gives them.
		code, body := postWith(t, c, addr, `{"requests":[{"name":"n","unique_key":"","limit":3,"duration":1000,"algorithm":1,"behavior":32}]}`)
		if want := `{"responses":[{"status":"UNDER_LIMIT","limit":"0","remaining":"0","reset_time":"0","error":"field 'unique_key' cannot be empty","metadata":{}}]}`; code != http.StatusOK || compact(t, body) != want {
			t.Errorf("empty key: %d %s\nwant %s", code, body, want)
		}
		if code, body := postWith(t, c, addr, `{"requests":[`); code != http.StatusBadRequest || !strings.Contains(body, `"code":3`) {
			t.Errorf("truncated JSON: %d %s, want 400 INVALID_ARGUMENT", code, body)
		}
		if code, body := postWith(t, c, addr, `{"requests":[{"name":"`+strings.Repeat("n", MaxMessageBytes)+`"}]}`); code != http.StatusBadRequest {
			t.Errorf("body over 1 MiB: %d %.200s, want 400", code, body)
		}
	})
}

// compact is body's JSON without white space (the gateway's marshaler
// may add some), keys in the order written.
func compact(t *testing.T, body string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(body)); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return b.String()
}

func TestHealthCheck(t *testing.T) {
	_, addr, httpAddr := startServer(t, counting(1), Config{Peers: func() int { return 2 }})
	h, err := dial(t, addr).HealthCheck(ctx(t), &guber.HealthCheckReq{})
	if err != nil || h.Status != "healthy" || h.PeerCount != 3 || h.AdvertiseAddress != addr || h.Message != "" {
		t.Errorf("HealthCheck = %+v, %v; want healthy, 3 peers, %s", h, err, addr)
	}
	resp, err := http.Get("http://" + httpAddr + "/v1/HealthCheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`{"status":"healthy","message":"","peer_count":3,"advertise_address":"%s"}`, addr); resp.StatusCode != 200 || compact(t, string(b)) != want {
		t.Errorf("GET /v1/HealthCheck = %d %s\nwant 200 %s", resp.StatusCode, b, want)
	}
	if _, err := dial(t, addr).LiveCheck(ctx(t), &guber.LiveCheckReq{}); err != nil {
		t.Errorf("LiveCheck: %v", err)
	}
}

func TestMaxRequests(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	fake := &fakeLimiter{answer: func(string, bucket.Request) (bucket.Verdict, error) {
		entered <- struct{}{}
		<-release
		return bucket.Verdict{Allowed: true}, nil
	}}
	s, addr, _ := startServer(t, fake, Config{MaxRequests: 1})
	// Two connections: a connection's calls are decided one after the
	// other, on its own goroutine, so the second waits on another.
	c, c2 := dial(t, addr), dial(t, addr)
	req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{Name: "n", UniqueKey: "k", Hits: 1, Limit: 1, Duration: 1000}}}
	first := make(chan error, 1)
	go func() { _, err := c.GetRateLimits(ctx(t), req); first <- err }()
	<-entered
	if _, err := c2.GetRateLimits(ctx(t), req); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second request while one is in progress: %v, want ResourceExhausted", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first request: %v", err)
	}
	if st := s.Stats(); st.Busy != 1 {
		t.Errorf("Busy = %d, want 1", st.Busy)
	}
	// The slot is free again once the first has ended.
	go func() { <-entered }()
	testkit.WaitFor(t, 5*time.Second, "a request served after the first ended", func() bool {
		_, err := c.GetRateLimits(ctx(t), req)
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("after the first ended: %v", err)
		}
		return err == nil
	})
}
