package config

import (
	"cmp"
	"fmt"
	"strconv"
	"time"

	"github.com/BurntSushi/toml"
)

// A limiting policy's bucket is written in one of two ways: rate (tokens
// per second) with burst, or limit per period, as people state quotas
// ("1000 a day": limit = 1000, per = "24h"), where the rate is limit/per
// and the burst, unless given, the limit. This file checks both ways with
// one rule and turns either into the table's rate and burst.

// What callers may state with a query for a policy's tags (Limit.Quotas,
// Policy.Quotas).
const (
	QuotasAny   = "any"   // any limit a caller states
	QuotasLower = "lower" // a stated rate or burst above the policy's is lowered to it
	QuotasNone  = "none"  // a stated limit is refused
)

// The bounds of limit and per; limit's upper bound is the burst's.
const (
	minPer = time.Millisecond
	maxPer = 366 * 24 * time.Hour
	// maxRefill bounds the time a bucket takes to refill from empty,
	// burst over rate: just under the table's own bound (73 years).
	maxRefill = 73 * 365 * 24 * time.Hour
)

// Bucket returns the default policy's rate (tokens per second) and burst,
// whichever way the file gives them.
func (l Limit) Bucket() (rate float64, burst int) {
	return bucketOf(l.Rate, l.Burst, l.Limit, l.Per.Duration)
}

// Bucket returns the policy's rate (tokens per second) and burst,
// whichever way the file gives them.
func (p Policy) Bucket() (rate float64, burst int) {
	return bucketOf(p.Rate, p.Burst, p.Limit, p.Per.Duration)
}

func bucketOf(rate float64, burst, limit int, per time.Duration) (float64, int) {
	if limit == 0 || per <= 0 {
		return rate, burst
	}
	return float64(limit) / per.Seconds(), cmp.Or(burst, limit)
}

// statedPer drops [limit]'s default rate, and its default burst, when the
// file gives its rate as limit with per and sets no rate (no burst): the
// defaults are for the rate form.
func (c *Config) statedPer(md toml.MetaData) {
	if !md.IsDefined("limit", "limit") && !md.IsDefined("limit", "per") || md.IsDefined("limit", "rate") {
		return
	}
	c.Limit.Rate = 0
	if !md.IsDefined("limit", "burst") {
		c.Limit.Burst = 0
	}
}

// checkBucket checks a limiting policy's rate and burst, written as rate
// or as limit with per: exactly one of the two ways, each value in its
// range, and a burst that refills within maxRefill. at names a key of the
// policy's table.
func checkBucket(at func(field string) keyRef, rate float64, burst, limit int, per time.Duration) *Error {
	if limit == 0 && per == 0 {
		if e := floatRange(at("rate"), rate); e != nil {
			return e
		}
		if e := intRange(at("burst"), burst); e != nil {
			return e
		}
		return checkRefill(at, rate, burst)
	}
	if rate != 0 {
		return bad(at("rate"), strconv.FormatFloat(rate, 'g', -1, 64),
			fmt.Sprintf("set either %s, or %s with %s, not both", at("rate").label, at("limit").label, at("per").label))
	}
	if limit == 0 {
		return bad(at("limit"), "0", fmt.Sprintf("must be set with %s: the requests allowed per period", at("per").label))
	}
	if e := intRange(at("limit"), limit); e != nil {
		return e
	}
	if per == 0 {
		return bad(at("per"), `"0s"`, fmt.Sprintf("must be set with %s: the period it is counted over, such as \"24h\"", at("limit").label))
	}
	if e := durationRange(at("per"), per); e != nil {
		return e
	}
	if burst != 0 {
		if e := intRange(at("burst"), burst); e != nil {
			return e
		}
	}
	r, b := bucketOf(rate, burst, limit, per)
	return checkRefill(at, r, b)
}

// checkRefill refuses a burst that takes longer than maxRefill to refill
// at rate: the table could not hold its debt.
func checkRefill(at func(field string) keyRef, rate float64, burst int) *Error {
	if float64(burst)/rate*float64(time.Second) < float64(maxRefill) {
		return nil
	}
	return bad(at("burst"), strconv.Itoa(burst), "must refill within 73 years at "+strconv.FormatFloat(rate, 'g', 5, 64)+" tokens per second: lower it or raise the rate")
}
