package gubernator

import (
	"fmt"
	"math"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// This file owns the mapping between one of Gubernator's rate limits and
// the table's stated limits: a RateLimitReq becomes a tag and a
// bucket.Request, and the table's verdict becomes a RateLimitResp. It is
// pure: time is an argument.

// Gubernator's answers to a bad item, word for word (gubernator.go and
// interval.go of v2.13.0), so that clients matching them keep working.
const (
	errEmptyKey       = "field 'unique_key' cannot be empty"
	errEmptyName      = "field 'namespace' cannot be empty"
	errGregorian      = "behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval"
	maxDurationMillis = int64(bucket.MaxQuotaPeriod / time.Millisecond)
	errHits           = "field 'hits' must be 0 or more"
	errAlgorithm      = "field 'algorithm' must be TOKEN_BUCKET (0) or LEAKY_BUCKET (1)"
)

// The answers to what Gubernator accepts and dthrottle does not: each
// names the field and its allowed range.
var (
	errLimit    = fmt.Sprintf("field 'limit' must be from 1 to %d", bucket.MaxQuotaBurst)
	errBurst    = fmt.Sprintf("field 'burst' must be from 0 (the limit) to %d", bucket.MaxQuotaBurst)
	errDuration = fmt.Sprintf("field 'duration' must be from 1 to %d (milliseconds)", maxDurationMillis)
)

// appendKey appends r's key to b: Gubernator's hash key, name + "_" +
// unique_key, which is the tag the table decides, matched by the
// [[policy]] prefixes as any tag is.
func appendKey(b []byte, r *guber.RateLimitReq) []byte {
	b = append(b, r.Name...)
	b = append(b, '_')
	return append(b, r.UniqueKey...)
}

// toRequest maps r to the table's stated limit at now, or returns the
// error its answer carries. Which fields are checked, and in what order,
// follows Gubernator: unique_key, then name, then the limit itself.
func toRequest(now time.Time, r *guber.RateLimitReq) (bucket.Request, string) {
	switch {
	case r.UniqueKey == "":
		return bucket.Request{}, errEmptyKey
	case r.Name == "":
		return bucket.Request{}, errEmptyName
	case r.Hits < 0:
		return bucket.Request{}, errHits
	case r.Limit < 1 || r.Limit > bucket.MaxQuotaBurst:
		return bucket.Request{}, errLimit
	}
	var (
		period   time.Duration
		calendar bucket.Calendar
	)
	if guber.HasBehavior(r.Behavior, guber.Behavior_DURATION_IS_GREGORIAN) {
		if r.Duration < guber.GregorianMinutes || r.Duration > guber.GregorianYears {
			return bucket.Request{}, errGregorian
		}
		// Gubernator's GregorianMinutes (0) to GregorianYears (5) are
		// bucket.Minute (1) to bucket.Year (6).
		calendar = bucket.Calendar(r.Duration-guber.GregorianMinutes) + bucket.Minute
	} else {
		if r.Duration < 1 || r.Duration > maxDurationMillis {
			return bucket.Request{}, errDuration
		}
		period = time.Duration(r.Duration) * time.Millisecond
	}
	var q bucket.Quota
	switch r.Algorithm {
	case guber.Algorithm_TOKEN_BUCKET:
		q = bucket.Quota{Algorithm: bucket.Window, Burst: int(r.Limit), Period: period, Calendar: calendar}
	case guber.Algorithm_LEAKY_BUCKET:
		burst := r.Burst
		if burst == 0 {
			burst = r.Limit
		}
		if burst < 1 || burst > bucket.MaxQuotaBurst {
			return bucket.Request{}, errBurst
		}
		if calendar != bucket.None {
			period = calendarLength(now, calendar)
		}
		q = bucket.Quota{Algorithm: bucket.Leaky, Burst: int(burst), Rate: float64(r.Limit) / period.Seconds()}
	default:
		return bucket.Request{}, errAlgorithm
	}
	return bucket.Request{
		Quota: q,
		// More hits than any burst are refused whatever their number.
		Hits:  int(min(r.Hits, bucket.MaxQuotaBurst+1)),
		Reset: guber.HasBehavior(r.Behavior, guber.Behavior_RESET_REMAINING),
		Drain: guber.HasBehavior(r.Behavior, guber.Behavior_DRAIN_OVER_LIMIT),
	}, ""
}

// calendarLength is the length of the calendar unit c that holds now, in
// UTC: what a LEAKY_BUCKET limit with DURATION_IS_GREGORIAN earns its
// limit over (a month of 28 to 31 days, a year of 365 or 366).
func calendarLength(now time.Time, c bucket.Calendar) time.Duration {
	now = now.UTC()
	y, m, _ := now.Date()
	switch c {
	case bucket.Minute:
		return time.Minute
	case bucket.Hour:
		return time.Hour
	case bucket.Day:
		return 24 * time.Hour
	case bucket.Week:
		return 7 * 24 * time.Hour
	case bucket.Month:
		start := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start.AddDate(0, 1, 0).Sub(start)
	}
	start := time.Date(y, time.January, 1, 0, 0, 0, 0, time.UTC)
	return start.AddDate(1, 0, 0).Sub(start)
}

// toResponse is the answer to r, asked as req at now, from the table's
// verdict v.
//
//   - status: UNDER_LIMIT when served, OVER_LIMIT when not.
//   - limit: r's limit, or the lower one the tag's policy applied
//     (quota = "lower").
//   - remaining: the whole tokens left after the query, never below 0
//     (the bucket itself may be in debt from peers' hits).
//   - reset_time: as Gubernator computes it, in Unix milliseconds. A
//     TOKEN_BUCKET: when its hits are all back, v.Full from now: the
//     window's end, later when peers' hits left it in debt (now, for a
//     window nothing was spent in). A LEAKY_BUCKET: now plus the
//     tokens missing from the limit times the milliseconds one token
//     takes, truncated as Gubernator truncates it.
//
// A tag whose policy keeps no bucket (action "allow" or "deny") is
// answered with its whole limit left, or none.
func toResponse(now time.Time, r *guber.RateLimitReq, req bucket.Request, v bucket.Verdict) *guber.RateLimitResp {
	resp := &guber.RateLimitResp{Status: guber.Status_UNDER_LIMIT, Limit: r.Limit}
	if !v.Allowed {
		resp.Status = guber.Status_OVER_LIMIT
	}
	ms := now.UnixMilli()
	if v.Policy.Action != bucket.Limit {
		if v.Allowed {
			resp.Remaining = resp.Limit
		}
		resp.ResetTime = ms
		return resp
	}
	q := req.Quota
	resp.Remaining = max(0, int64(math.Floor(v.Tokens)))
	if q.Algorithm == bucket.Window {
		if v.Policy.Burst > 0 && v.Policy.Burst < q.Burst {
			resp.Limit = int64(v.Policy.Burst)
		}
		resp.ResetTime = ms + int64((v.Full+time.Millisecond-1)/time.Millisecond)
		return resp
	}
	// Leaky: the limit is earned over duration, at q.Rate a second.
	length := float64(r.Limit) / q.Rate // seconds
	if v.Policy.Rate > 0 && v.Policy.Rate < q.Rate {
		resp.Limit = max(1, int64(math.Round(v.Policy.Rate*length)))
	}
	perToken := int64(length * 1000 / float64(resp.Limit)) // Gubernator's int64(rate)
	resp.ResetTime = ms + max(0, resp.Limit-resp.Remaining)*perToken
	return resp
}
