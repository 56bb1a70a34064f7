package gubernator

import (
	"math"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/protobuf/proto"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// t0 is the instant the tests decide at: 2026-02-10 12:00:30.250 UTC, in
// a month of 28 days and a year of 365.
var t0 = time.Date(2026, 2, 10, 12, 0, 30, 250e6, time.UTC)

// limitReq is a valid rate limit with the fields the tests change.
func limitReq(set func(r *guber.RateLimitReq)) *guber.RateLimitReq {
	r := &guber.RateLimitReq{Name: "requests_per_sec", UniqueKey: "account:1", Hits: 1, Limit: 10, Duration: 60000}
	if set != nil {
		set(r)
	}
	return r
}

func TestToRequest(t *testing.T) {
	leaky := guber.Algorithm_LEAKY_BUCKET
	for _, tc := range []struct {
		name    string
		set     func(r *guber.RateLimitReq)
		want    bucket.Request
		wantErr string
	}{
		{"token bucket: window of duration", nil,
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: 1}, ""},
		{"token bucket ignores burst", func(r *guber.RateLimitReq) { r.Burst = 99 },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: 1}, ""},
		{"leaky: limit over duration, burst = limit", func(r *guber.RateLimitReq) { r.Algorithm = leaky },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Leaky, Burst: 10, Rate: 10.0 / 60}, Hits: 1}, ""},
		{"leaky: burst of its own", func(r *guber.RateLimitReq) { r.Algorithm, r.Burst, r.Duration = leaky, 25, 1000 },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Leaky, Burst: 25, Rate: 10}, Hits: 1}, ""},
		{"hits 0 reads", func(r *guber.RateLimitReq) { r.Hits = 0 },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}}, ""},
		{"hits 7", func(r *guber.RateLimitReq) { r.Hits = 7 },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: 7}, ""},
		{"hits past any burst", func(r *guber.RateLimitReq) { r.Hits = math.MaxInt64 },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: bucket.MaxQuotaBurst + 1}, ""},
		{"RESET_REMAINING", func(r *guber.RateLimitReq) { r.Behavior = guber.Behavior_RESET_REMAINING },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: 1, Reset: true}, ""},
		{"DRAIN_OVER_LIMIT", func(r *guber.RateLimitReq) { r.Behavior = guber.Behavior_DRAIN_OVER_LIMIT },
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: 1, Drain: true}, ""},
		{"GLOBAL, NO_BATCHING and MULTI_REGION change nothing", func(r *guber.RateLimitReq) {
			r.Behavior = guber.Behavior_GLOBAL | guber.Behavior_NO_BATCHING | guber.Behavior_MULTI_REGION
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Period: time.Minute}, Hits: 1}, ""},
		{"gregorian minutes", func(r *guber.RateLimitReq) {
			r.Behavior, r.Duration = guber.Behavior_DURATION_IS_GREGORIAN, guber.GregorianMinutes
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Calendar: bucket.Minute}, Hits: 1}, ""},
		{"gregorian weeks", func(r *guber.RateLimitReq) {
			r.Behavior, r.Duration = guber.Behavior_DURATION_IS_GREGORIAN, guber.GregorianWeeks
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Calendar: bucket.Week}, Hits: 1}, ""},
		{"gregorian years, with reset and drain", func(r *guber.RateLimitReq) {
			r.Behavior = guber.Behavior_DURATION_IS_GREGORIAN | guber.Behavior_RESET_REMAINING | guber.Behavior_DRAIN_OVER_LIMIT
			r.Duration = guber.GregorianYears
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 10, Calendar: bucket.Year}, Hits: 1, Reset: true, Drain: true}, ""},
		{"leaky gregorian hours: the limit an hour", func(r *guber.RateLimitReq) {
			r.Algorithm, r.Behavior, r.Duration, r.Limit = leaky, guber.Behavior_DURATION_IS_GREGORIAN, guber.GregorianHours, 3600
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Leaky, Burst: 3600, Rate: 1}, Hits: 1}, ""},
		{"leaky gregorian months: February 2026 has 28 days", func(r *guber.RateLimitReq) {
			r.Algorithm, r.Behavior, r.Duration, r.Limit = leaky, guber.Behavior_DURATION_IS_GREGORIAN, guber.GregorianMonths, 28*24
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Leaky, Burst: 28 * 24, Rate: 1.0 / 3600}, Hits: 1}, ""},
		{"leaky gregorian years: 2026 has 365 days", func(r *guber.RateLimitReq) {
			r.Algorithm, r.Behavior, r.Duration, r.Limit = leaky, guber.Behavior_DURATION_IS_GREGORIAN, guber.GregorianYears, 365
		}, bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Leaky, Burst: 365, Rate: 1.0 / 86400}, Hits: 1}, ""},

		{"empty unique_key first", func(r *guber.RateLimitReq) { r.UniqueKey, r.Name = "", "" }, bucket.Request{}, errEmptyKey},
		{"empty name", func(r *guber.RateLimitReq) { r.Name = "" }, bucket.Request{}, "field 'namespace' cannot be empty"},
		{"negative hits", func(r *guber.RateLimitReq) { r.Hits = -1 }, bucket.Request{}, "field 'hits' must be 0 or more"},
		{"limit 0", func(r *guber.RateLimitReq) { r.Limit = 0 }, bucket.Request{}, "field 'limit' must be from 1 to 1073741824"},
		{"limit past the largest burst", func(r *guber.RateLimitReq) { r.Limit = bucket.MaxQuotaBurst + 1 }, bucket.Request{}, errLimit},
		{"duration 0", func(r *guber.RateLimitReq) { r.Duration = 0 }, bucket.Request{}, "field 'duration' must be from 1 to 31622400000 (milliseconds)"},
		{"duration past a year", func(r *guber.RateLimitReq) { r.Duration = maxDurationMillis + 1 }, bucket.Request{}, errDuration},
		{"gregorian 6", func(r *guber.RateLimitReq) { r.Behavior, r.Duration = guber.Behavior_DURATION_IS_GREGORIAN, 6 }, bucket.Request{},
			"behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval"},
		{"gregorian -1", func(r *guber.RateLimitReq) { r.Behavior, r.Duration = guber.Behavior_DURATION_IS_GREGORIAN, -1 }, bucket.Request{}, errGregorian},
		{"leaky negative burst", func(r *guber.RateLimitReq) { r.Algorithm, r.Burst = leaky, -1 }, bucket.Request{},
			"field 'burst' must be from 0 (the limit) to 1073741824"},
		{"leaky burst too large", func(r *guber.RateLimitReq) { r.Algorithm, r.Burst = leaky, bucket.MaxQuotaBurst+1 }, bucket.Request{}, errBurst},
		{"algorithm 2", func(r *guber.RateLimitReq) { r.Algorithm = 2 }, bucket.Request{},
			"field 'algorithm' must be TOKEN_BUCKET (0) or LEAKY_BUCKET (1)"},
	} {
		got, err := toRequest(t0, limitReq(tc.set))
		if err != tc.wantErr || !sameRequest(got, tc.want) {
			t.Errorf("%s: toRequest = %+v, %q\nwant %+v, %q", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// sameRequest compares requests, rates within a part in 1e12.
func sameRequest(a, b bucket.Request) bool {
	ar, br := a.Quota.Rate, b.Quota.Rate
	a.Quota.Rate, b.Quota.Rate = 0, 0
	return a == b && math.Abs(ar-br) <= 1e-12*math.Max(math.Abs(ar), math.Abs(br))
}

func TestAppendKey(t *testing.T) {
	got := appendKey([]byte("old"), limitReq(nil))
	if string(got) != "oldrequests_per_sec_account:1" {
		t.Errorf("appendKey = %q", got)
	}
}

func TestToResponse(t *testing.T) {
	ms := t0.UnixMilli()
	limitPolicy := bucket.Policy{Name: "default", Action: bucket.Limit, Rate: 10.0 / 60, Burst: 10}
	window := func(set func(r *guber.RateLimitReq)) (*guber.RateLimitReq, bucket.Request) {
		r := limitReq(set)
		q, _ := toRequest(t0, r)
		return r, q
	}
	leaky := func(r *guber.RateLimitReq) { r.Algorithm = guber.Algorithm_LEAKY_BUCKET }
	for _, tc := range []struct {
		name string
		set  func(r *guber.RateLimitReq)
		v    bucket.Verdict
		want *guber.RateLimitResp
	}{
		{"window served: reset when the window ends", nil,
			bucket.Verdict{Allowed: true, Policy: limitPolicy, Tokens: 9, Full: 29750 * time.Millisecond},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 10, Remaining: 9, ResetTime: ms + 29750}},
		{"window: a part of a millisecond rounds up", nil,
			bucket.Verdict{Allowed: true, Policy: limitPolicy, Tokens: 9, Full: time.Millisecond + 1},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 10, Remaining: 9, ResetTime: ms + 2}},
		{"window refused in debt: remaining 0", nil,
			bucket.Verdict{Allowed: false, Policy: limitPolicy, Tokens: -3, Wait: time.Second, Full: time.Second},
			&guber.RateLimitResp{Status: guber.Status_OVER_LIMIT, Limit: 10, Remaining: 0, ResetTime: ms + 1000}},
		{"window untouched: full now", nil,
			bucket.Verdict{Allowed: true, Policy: limitPolicy, Tokens: 10},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 10, Remaining: 10, ResetTime: ms}},
		{"window lowered by the policy", nil,
			bucket.Verdict{Allowed: true, Policy: bucket.Policy{Action: bucket.Limit, Burst: 4}, Tokens: 3, Full: time.Second},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 4, Remaining: 3, ResetTime: ms + 1000}},
		{"leaky: whole tokens, reset as Gubernator's", leaky,
			bucket.Verdict{Allowed: true, Policy: limitPolicy, Tokens: 6.9},
			// 6 left of 10, a token each 6000 ms: 4 tokens, 24000 ms.
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 10, Remaining: 6, ResetTime: ms + 24000}},
		{"leaky refused in debt", leaky,
			bucket.Verdict{Allowed: false, Policy: limitPolicy, Tokens: -2.5, Wait: time.Minute},
			&guber.RateLimitResp{Status: guber.Status_OVER_LIMIT, Limit: 10, Remaining: 0, ResetTime: ms + 60000}},
		{"leaky burst over limit: never before now", func(r *guber.RateLimitReq) { leaky(r); r.Burst = 20 },
			bucket.Verdict{Allowed: true, Policy: limitPolicy, Tokens: 15},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 10, Remaining: 15, ResetTime: ms}},
		{"leaky lowered by the policy: 5 a minute", leaky,
			bucket.Verdict{Allowed: true, Policy: bucket.Policy{Action: bucket.Limit, Rate: 5.0 / 60, Burst: 10}, Tokens: 4},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 5, Remaining: 4, ResetTime: ms + 12000}},
		{"allow policy: the whole limit", nil,
			bucket.Verdict{Allowed: true, Policy: bucket.Policy{Action: bucket.Allow}},
			&guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: 10, Remaining: 10, ResetTime: ms}},
		{"deny policy: nothing", nil,
			bucket.Verdict{Allowed: false, Policy: bucket.Policy{Action: bucket.Deny}},
			&guber.RateLimitResp{Status: guber.Status_OVER_LIMIT, Limit: 10, Remaining: 0, ResetTime: ms}},
	} {
		r, q := window(tc.set)
		got := toResponse(t0, r, q, tc.v)
		if got.Status != tc.want.Status || got.Limit != tc.want.Limit || got.Remaining != tc.want.Remaining ||
			got.ResetTime != tc.want.ResetTime || got.Error != "" || len(got.Metadata) != 0 {
			t.Errorf("%s: toResponse = status %v limit %d remaining %d reset %+d error %q metadata %v\nwant status %v limit %d remaining %d reset %+d",
				tc.name, got.Status, got.Limit, got.Remaining, got.ResetTime-ms, got.Error, got.Metadata,
				tc.want.Status, tc.want.Limit, tc.want.Remaining, tc.want.ResetTime-ms)
		}
	}
}

func TestCalendarLength(t *testing.T) {
	for _, tc := range []struct {
		now  time.Time
		c    bucket.Calendar
		want time.Duration
	}{
		{t0, bucket.Minute, time.Minute},
		{t0, bucket.Hour, time.Hour},
		{t0, bucket.Day, 24 * time.Hour},
		{t0, bucket.Week, 7 * 24 * time.Hour},
		{t0, bucket.Month, 28 * 24 * time.Hour},
		{time.Date(2028, 2, 29, 23, 0, 0, 0, time.UTC), bucket.Month, 29 * 24 * time.Hour},
		{time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), bucket.Month, 31 * 24 * time.Hour},
		// In UTC whatever now's zone: 2026-12-31 20:00 -05:00 is 2027 in UTC.
		{time.Date(2026, 12, 31, 20, 0, 0, 0, time.FixedZone("EST", -5*3600)), bucket.Month, 31 * 24 * time.Hour},
		{t0, bucket.Year, 365 * 24 * time.Hour},
		{time.Date(2028, 6, 1, 0, 0, 0, 0, time.UTC), bucket.Year, 366 * 24 * time.Hour},
	} {
		if got := calendarLength(tc.now, tc.c); got != tc.want {
			t.Errorf("calendarLength(%v, %d) = %v, want %v", tc.now, tc.c, got, tc.want)
		}
	}
}

// TestAnswerSize: an answer to MaxBatch rate limits with the largest
// values takes at most 24 bytes a rate limit, which the docs state
// (what a client that reads nothing keeps queued).
func TestAnswerSize(t *testing.T) {
	r := &guber.GetRateLimitsResp{}
	for range MaxBatch {
		r.Responses = append(r.Responses, &guber.RateLimitResp{Status: guber.Status_OVER_LIMIT,
			Limit: bucket.MaxQuotaBurst, Remaining: bucket.MaxQuotaBurst, ResetTime: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()})
	}
	if n := proto.Size(r); n > 24*MaxBatch {
		t.Errorf("an answer to %d rate limits is %d bytes, over the 24 a rate limit the docs state", MaxBatch, n)
	}
}
