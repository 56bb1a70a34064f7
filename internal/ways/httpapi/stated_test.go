package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

func TestParseStated(t *testing.T) {
	leaky := func(rate float64, burst int) bucket.Quota { return bucket.Quota{Rate: rate, Burst: burst} }
	for _, tc := range []struct {
		raw    string
		stated bool
		quota  bucket.Quota
		hits   int
		err    string // "" for none
	}{
		{raw: "tag=a", hits: 1},
		{raw: "tag=a&limit=1000&per=24h", stated: true, quota: leaky(1000/86400.0, 1000), hits: 1},
		{raw: "tag=a&limit=60&per=1m&burst=5", stated: true, quota: leaky(1, 5), hits: 1},
		{raw: "tag=a&per=1s&limit=10&cost=0", stated: true, quota: leaky(10, 10), hits: 0},
		{raw: "tag=a&rate=0.5&burst=3&cost=2", stated: true, quota: leaky(0.5, 3), hits: 2},
		{raw: "tag=a&algorithm=leaky&rate=2&burst=2", stated: true, quota: leaky(2, 2), hits: 1},
		{raw: "tag=a&algorithm=window&limit=100&per=1h", stated: true, quota: bucket.Quota{Algorithm: bucket.Window, Burst: 100, Period: time.Hour}, hits: 1},
		{raw: "tag=a&l%69mit=10&p%65r=1s&%61lgorithm=window", stated: true, quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Second}, hits: 1},
		{raw: "tag=a&limit=10", err: "limit and per go together: give both, or rate with burst"},
		{raw: "tag=a&per=1s", err: "limit and per go together: give both, or rate with burst"},
		{raw: "tag=a&rate=1", err: "rate needs burst: give rate with burst, or limit with per"},
		{raw: "tag=a&burst=1", err: "burst goes with rate, or with limit and per"},
		{raw: "tag=a&algorithm=window", err: "algorithm needs a stated limit: limit with per"},
		{raw: "tag=a&rate=1&burst=1&limit=1&per=1s", err: "give limit with per, or rate with burst, not both"},
		{raw: "tag=a&algorithm=window&limit=1&per=1s&burst=2", err: "burst does not go with algorithm=window: limit is the hits a window serves"},
		{raw: "tag=a&algorithm=window&rate=1&burst=1", err: "algorithm=window takes limit and per, not rate"},
		{raw: "tag=a&algorithm=gcra&limit=1&per=1s", err: "algorithm must be leaky or window"},
		{raw: "tag=a&limit=0&per=1s", err: errBadLimit.Error()},
		{raw: "tag=a&limit=1073741825&per=1s", err: errBadLimit.Error()},
		{raw: "tag=a&limit=x&per=1s", err: errBadLimit.Error()},
		{raw: "tag=a&limit=1&per=1", err: errBadPer.Error()},
		{raw: "tag=a&limit=1&per=999us", err: errBadPer.Error()},
		{raw: "tag=a&limit=1&per=8785h", err: errBadPer.Error()},
		{raw: "tag=a&limit=1&per=-1s", err: errBadPer.Error()},
		{raw: "tag=a&limit=1&per=1s&burst=0", err: errBadBurst.Error()},
		{raw: "tag=a&rate=0&burst=1", err: errBadRate.Error()},
		{raw: "tag=a&rate=NaN&burst=1", err: errBadRate.Error()},
		{raw: "tag=a&rate=inf&burst=1", err: errBadRate.Error()},
		{raw: "tag=a&rate=1e-300&burst=1", err: "bucket: stated rate 1e-300: must be above 0 and high enough that the burst refills within 73 years"},
		{raw: "tag=a&limit=1&per=1s&limit=2", err: "limit given twice"},
		{raw: "tag=a&algorithm=window&algorithm=window&limit=1&per=1s", err: "algorithm given twice"},
		{raw: "tag=a&limit=1&per=1s&cost=-1", err: errBadCost.Error()},
		{raw: "tag=a&limit=1&per=1s&cost=1000001", err: errBadCost.Error()},
	} {
		q, err := parseQuery(tc.raw, nil)
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("parseQuery(%q): error %v, want %q", tc.raw, err, tc.err)
			}
		case err != nil:
			t.Errorf("parseQuery(%q): %v", tc.raw, err)
		case q.stated != tc.stated || q.req.Quota != tc.quota || q.req.Hits != tc.hits || string(q.tag) != "a":
			t.Errorf("parseQuery(%q) = tag %q, stated %v, %+v, hits %d; want stated %v, %+v, hits %d",
				tc.raw, q.tag, q.stated, q.req.Quota, q.req.Hits, tc.stated, tc.quota, tc.hits)
		}
	}
}

func TestParseStatedAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 64)
	for _, raw := range []string{"tag=k&limit=1000&per=24h&burst=10&cost=0", "tag=k&rate=0.5&burst=3", "tag=k&algorithm=window&limit=5&per=1m"} {
		if n := testing.AllocsPerRun(100, func() { parseQuery(raw, buf) }); n != 0 {
			t.Errorf("%q: %v allocations per parse, want 0", raw, n)
		}
	}
}

// fakeLimiter answers AllowQuota with v and err, keeping what it was
// asked.
type fakeLimiter struct {
	mu    sync.Mutex
	v     bucket.Verdict
	err   error
	tags  []string
	asked []bucket.Request
}

func (f *fakeLimiter) AllowQuota(now time.Time, tag []byte, r bucket.Request) (bucket.Verdict, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tags = append(f.tags, string(tag))
	f.asked = append(f.asked, r)
	return f.v, f.err
}

func (f *fakeLimiter) calls() ([]string, []bucket.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tags...), append([]bucket.Request(nil), f.asked...)
}

// TestStatedLimit: a query stating a limit is decided by the Limiter, its
// answer's RateLimit fields say the limit applied (the verdict's Policy),
// and the Limiter's errors get their statuses; a query stating none goes
// to the table as before.
func TestStatedLimit(t *testing.T) {
	applied := bucket.Policy{Name: "api", Rate: 1000 / 86400.0, Burst: 1000}
	lim := &fakeLimiter{v: bucket.Verdict{Allowed: true, Policy: applied, Tokens: 999, Full: 87 * time.Second}}
	tb := newTable(t, bucket.Policy{Name: "default", Rate: 1, Burst: 1})
	s, addr := startServer(t, tb, Config{Limiter: lim, Clock: time500s})
	c := dial(t, addr)

	want(t, "stated, served", c.get("/v1/allow?tag=key%3Aa&limit=1000&per=24h"), 200,
		"RateLimit-Policy", `"api";q=1000;w=86400`, "RateLimit", `"api";r=999;t=87`, "Retry-After", "")
	tags, asked := lim.calls()
	wantReq := bucket.Request{Quota: bucket.Quota{Rate: 1000 / 86400.0, Burst: 1000}, Hits: 1}
	if len(asked) != 1 || tags[0] != "key:a" || asked[0] != wantReq {
		t.Fatalf("asked %q %+v, want key:a %+v", tags, asked, wantReq)
	}

	lim.mu.Lock()
	lim.v = bucket.Verdict{Policy: bucket.Policy{Name: "api", Rate: 1, Burst: 2}, Tokens: 0.5, Wait: 500 * time.Millisecond, Full: 1500 * time.Millisecond}
	lim.mu.Unlock()
	want(t, "stated, refused", c.get("/v1/allow?tag=k&rate=5&burst=9&cost=0"), 403,
		"RateLimit-Policy", `"api";q=2;w=2`, "RateLimit", `"api";r=0;t=2`, "Retry-After", "1")
	if _, asked = lim.calls(); asked[1].Hits != 0 || asked[1].Quota != (bucket.Quota{Rate: 5, Burst: 9}) {
		t.Errorf("read-only query asked %+v", asked[1])
	}

	// Without a stated limit, the table decides: burst 1 serves once.
	want(t, "no stated limit", c.get("/v1/allow?tag=k"), 200, "RateLimit-Policy", `"default";q=1;w=1`)
	want(t, "no stated limit, again", c.get("/v1/allow?tag=k"), 403)
	if _, asked = lim.calls(); len(asked) != 2 {
		t.Errorf("the Limiter was asked %d times, want 2: queries stating no limit must not reach it", len(asked))
	}

	for _, tc := range []struct {
		err    error
		status int
		body   string
	}{
		{bucket.ErrLimitForbidden, 403, "forbidden: the tag's policy takes no stated limit"},
		{bucket.ErrTooManyLimits, 503, "too many distinct stated limits in use"},
		{&bucket.LimitError{Field: "burst", Value: "0", Want: "from 1"}, 400, "bucket: stated burst 0: must be from 1"},
		{errors.New("other"), 400, "other"},
	} {
		lim.mu.Lock()
		lim.err = tc.err
		lim.mu.Unlock()
		resp := c.get("/v1/allow?tag=k&limit=1&per=1s")
		want(t, tc.err.Error(), resp, tc.status, "RateLimit", "")
		if body := resp.Header.Get("X-Body"); !strings.HasPrefix(body, tc.body) {
			t.Errorf("%v: body %q, want %q...", tc.err, body, tc.body)
		}
		if tc.status == 503 && resp.Header.Get("Retry-After") != "1" {
			t.Errorf("503 without Retry-After: 1")
		}
	}
	want(t, "a bad stated limit never reaches the Limiter", c.get("/v1/allow?tag=k&limit=1"), 400)
	if _, asked = lim.calls(); len(asked) != 6 {
		t.Errorf("the Limiter was asked %d times, want 6", len(asked))
	}
	st := s.Stats()
	if st.Allowed != 2 || st.Refused != 2 || st.Bad != 4 || st.Busy != 1 {
		t.Errorf("stats %+v, want 2 allowed, 2 refused, 4 bad, 1 busy", st)
	}
}

// TestStatedLimitWithoutLimiter: a server given no Limiter answers a
// stated limit 400 and still decides every other query.
func TestStatedLimitWithoutLimiter(t *testing.T) {
	_, addr := startServer(t, newTable(t, bucket.Policy{Name: "default", Rate: 1, Burst: 1}), Config{Clock: time500s})
	c := dial(t, addr)
	resp := c.get("/v1/allow?tag=k&limit=1&per=1s")
	want(t, "stated", resp, http.StatusBadRequest)
	if body := resp.Header.Get("X-Body"); body != "this endpoint takes no stated limit\n" {
		t.Errorf("body %q", body)
	}
	want(t, "not stated", c.get("/v1/allow?tag=k"), 200)
}
