package rls

import (
	"slices"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// limited sets d's limit to n per unit, times mult when mult > 0.
func limited(d *rlcommon.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit, mult uint32) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	if mult > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

func TestQuotaOf(t *testing.T) {
	window := func(n int, d time.Duration) bucket.Quota {
		return bucket.Quota{Algorithm: bucket.Window, Burst: n, Period: d}
	}
	for _, tc := range []struct {
		n    uint32
		unit typev3.RateLimitUnit
		mult uint32 // 0: unset
		want bucket.Quota
		err  string
	}{
		{n: 10, unit: typev3.RateLimitUnit_SECOND, want: window(10, time.Second)},
		{n: 100, unit: typev3.RateLimitUnit_MINUTE, want: window(100, time.Minute)},
		{n: 5, unit: typev3.RateLimitUnit_HOUR, mult: 6, want: window(5, 6*time.Hour)},
		{n: 1000, unit: typev3.RateLimitUnit_DAY, mult: 1, want: window(1000, 24*time.Hour)},
		{n: 1, unit: typev3.RateLimitUnit_DAY, mult: 366, want: window(1, 366*24*time.Hour)},
		{n: 7, unit: typev3.RateLimitUnit_MONTH, want: bucket.Quota{Algorithm: bucket.Window, Burst: 7, Calendar: bucket.Month}},
		{n: 7, unit: typev3.RateLimitUnit_YEAR, want: bucket.Quota{Algorithm: bucket.Window, Burst: 7, Calendar: bucket.Year}},
		{n: 0, unit: typev3.RateLimitUnit_SECOND, err: "requests_per_unit 0: must be from 1 to 1073741824"},
		{n: 1 << 31, unit: typev3.RateLimitUnit_SECOND, err: "requests_per_unit 2147483648: must be from 1 to 1073741824"},
		{n: 1, unit: typev3.RateLimitUnit_UNKNOWN, err: "unit UNKNOWN: must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR"},
		{n: 1, unit: typev3.RateLimitUnit(42), err: "unit 42: must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR"},
		{n: 1, unit: typev3.RateLimitUnit_SECOND, mult: 0, want: window(1, time.Second)},
		{n: 1, unit: typev3.RateLimitUnit_DAY, mult: 367, err: "367 x DAY: a window must be at most 8784h0m0s"},
		{n: 1, unit: typev3.RateLimitUnit_SECOND, mult: 1 << 31, err: "2147483648 x SECOND: a window must be at most 8784h0m0s"},
		{n: 1, unit: typev3.RateLimitUnit_MONTH, mult: 2, err: "unit_multiplier 2: a MONTH window follows the calendar, and takes none"},
	} {
		d := limited(desc("k=v"), tc.n, tc.unit, tc.mult)
		q, err := quotaOf(d.GetLimit())
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("%d per %v x%d: error %v, want %q", tc.n, tc.unit, tc.mult, err, tc.err)
			}
		case err != nil || q != tc.want:
			t.Errorf("%d per %v x%d: %+v, %v; want %+v", tc.n, tc.unit, tc.mult, q, err, tc.want)
		case q.Check() != nil:
			t.Errorf("%d per %v x%d: %+v out of the table's range: %v", tc.n, tc.unit, tc.mult, q, q.Check())
		}
	}
	// A unit_multiplier of 0 given explicitly is no window.
	d := limited(desc("k=v"), 1, typev3.RateLimitUnit_SECOND, 0)
	d.Limit.UnitMultiplier = wrapperspb.UInt32(0)
	if _, err := quotaOf(d.GetLimit()); err == nil || err.Error() != "unit_multiplier 0: must be at least 1" {
		t.Errorf("unit_multiplier 0: %v", err)
	}
}

// windows is a hand-written Limiter: a fixed window per tag that never
// ends (the tests do not move its clock), keeping every request asked.
type windows struct {
	mu    sync.Mutex
	used  map[string]int
	err   error
	asked []bucket.Request
}

func (w *windows) AllowQuota(now time.Time, tag []byte, r bucket.Request) (bucket.Verdict, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = append(w.asked, r)
	if w.err != nil {
		return bucket.Verdict{}, w.err
	}
	q := r.Quota
	p := bucket.Policy{Name: "stated", Action: bucket.Limit, Burst: q.Burst, Rate: float64(q.Burst) / q.Period.Seconds()}
	left := q.Burst - w.used[string(tag)]
	v := bucket.Verdict{Policy: p, Allowed: left >= max(r.Hits, 1), Tokens: float64(left), Full: q.Period}
	if r.Hits > 0 && v.Allowed {
		w.used[string(tag)] += r.Hits
		v.Tokens -= float64(r.Hits)
	}
	if !v.Allowed {
		v.Wait = q.Period
	}
	return v, nil
}

func (w *windows) hits() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, r := range w.asked {
		out = append(out, r.Hits)
	}
	return out
}

// TestStatedLimit: a descriptor carrying a limit is checked under it with
// 0 hits and then spent with its cost, beside a descriptor under its
// policy; when the stated limit refuses, the other descriptor is not
// spent and the refusal is counted once.
func TestStatedLimit(t *testing.T) {
	tb := newTable(t, bucket.Policy{Name: "default", Rate: 1, Burst: 10}, upload)
	lim := &windows{used: map[string]int{}}
	_, addr := startServer(t, tb, Config{Clock: newClock().Now, Limiter: lim})
	c := dial(t, addr)
	user := func() *rlcommon.RateLimitDescriptor {
		return limited(desc("user=alice"), 2, typev3.RateLimitUnit_MINUTE, 0)
	}
	for i, want := range []string{"OK: OK OK", "OK: OK OK", "OVER_LIMIT: OVER_LIMIT OK"} {
		r := c.ask("api", user(), desc("generic_key=upload"))
		if codesOf(r) != want {
			t.Fatalf("request %d: %s, want %s", i+1, codesOf(r), want)
		}
		got := statusOf(r.GetStatuses()[0])
		if w := (descStatus{r.GetStatuses()[0].GetCode().String(), "2 per MINUTE (stated)", uint32(max(1-i, 0)), time.Minute}); got != w {
			t.Errorf("request %d: stated descriptor %+v, want %+v", i+1, got, w)
		}
	}
	// Check (0 hits) then spend (1 hit) twice; the third only checked.
	if got, want := lim.hits(), []int{0, 1, 0, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("hits asked %v, want %v", got, want)
	}
	// The upload descriptor was spent by the first two requests only.
	if st, _ := tb.Peek(t0, "rls:api|generic_key=upload"); st.Tokens != 1 {
		t.Errorf("upload bucket holds %v tokens, want 1: a refused request spends nothing", st.Tokens)
	}
	if ps := policyStats(t, tb, "default"); ps.NO != 1 {
		t.Errorf("default policy counted %d refusals, want 1 (the stated descriptor's)", ps.NO)
	}
	// The request's hits_addend is the stated descriptor's cost too.
	r, err := c.call(&rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 3,
		Descriptors: []*rlcommon.RateLimitDescriptor{limited(desc("user=bob"), 5, typev3.RateLimitUnit_HOUR, 0)}})
	if err != nil || codesOf(r) != "OK: OK" || r.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("3 hits of 5 an hour: %s, %v", codesOf(r), err)
	}
}

// TestStatedLimitErrors: a limit the table refuses, or a service with no
// Limiter, fails the request at the check, spending nothing.
func TestStatedLimitErrors(t *testing.T) {
	tb := newTable(t, bucket.Policy{Name: "default", Rate: 1, Burst: 10}, upload)
	lim := &windows{used: map[string]int{}}
	s, addr := startServer(t, tb, Config{Clock: newClock().Now, Limiter: lim})
	c := dial(t, addr)
	ask := func(d *rlcommon.RateLimitDescriptor) error {
		_, err := c.call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("generic_key=upload"), d}})
		return err
	}
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{bucket.ErrLimitForbidden, codes.PermissionDenied},
		{bucket.ErrTooManyLimits, codes.ResourceExhausted},
		{&bucket.LimitError{Field: "burst", Value: "0", Want: "from 1"}, codes.InvalidArgument},
	} {
		lim.mu.Lock()
		lim.err = tc.err
		lim.mu.Unlock()
		wantCode(t, ask(limited(desc("user=a"), 1, typev3.RateLimitUnit_SECOND, 0)), tc.code, tc.err.Error())
	}
	wantCode(t, ask(limited(desc("user=a"), 1, typev3.RateLimitUnit_UNKNOWN, 0)), codes.InvalidArgument, "unit UNKNOWN")
	if st, _ := tb.Peek(t0, "rls:api|generic_key=upload"); st.Tracked {
		t.Errorf("upload bucket %+v: a failed request must spend nothing", st)
	}
	if got := s.Stats().Bad; got != 4 {
		t.Errorf("Stats().Bad = %d, want 4", got)
	}

	_, addr = startServer(t, tb, Config{Clock: newClock().Now})
	_, err := dial(t, addr).call(&rlsv3.RateLimitRequest{Domain: "api",
		Descriptors: []*rlcommon.RateLimitDescriptor{limited(desc("user=a"), 1, typev3.RateLimitUnit_SECOND, 0)}})
	wantCode(t, err, codes.InvalidArgument, "no Limiter")
}
