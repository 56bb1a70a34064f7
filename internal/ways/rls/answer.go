package rls

import (
	"math"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/rlheader"
)

// answer is the response to r, decided: the overall code, a status per
// descriptor in the request's order, and the header fields for Envoy to
// add to its response. It counts what it answers.
func (s *Server) answer(r *request, refused bool) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.items))}
	if refused {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		s.overLimit.Add(1)
	} else {
		s.ok.Add(1)
	}
	var nOK, nOver, nCharged uint64
	for i := range r.items {
		it := &r.items[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		switch it.outcome {
		case refuse:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			nOver++
		case charged:
			nCharged++
		default:
			nOK++
		}
		if it.bucket() {
			st.CurrentLimit = currentLimit(it.v.Policy)
			st.LimitRemaining = uint32(min(max(math.Floor(it.v.Tokens), 0), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(it.v.Full)
		}
		resp.Statuses[i] = st
	}
	s.descOK.Add(nOK)
	s.descOver.Add(nOver)
	s.charge.Add(nCharged)
	resp.ResponseHeadersToAdd = headers(r, refused)
	return resp
}

// bucket reports whether the item's answer describes a bucket: a
// descriptor decided under a limit policy.
func (it *item) bucket() bool {
	return (it.outcome == pass || it.outcome == refuse) && it.v.Policy.Action == bucket.Limit
}

// headers are the header fields the HTTP decision endpoint would send
// for r's descriptors, as lists of one item per descriptor under a limit
// policy: RateLimit-Policy (each policy once) and RateLimit, in the
// request's order; Retry-After on a refusal, the longest wait of the
// refused descriptors, or none when one of them can never be served;
// DThrottle-Dry-Run when a descriptor is under a dry-run policy.
func headers(r *request, refused bool) []*corev3.HeaderValue {
	policies, limits := r.policies[:0], r.limits[:0]
	defer func() { r.policies, r.limits = policies, limits }()
	var retry int64
	retryOK, dry, wouldRefuse := refused, false, false
	for i := range r.items {
		it := &r.items[i]
		if it.outcome == refuse {
			sec, ok := rlheader.RetryAfter(it.v)
			retry, retryOK = max(retry, sec), retryOK && ok && it.bucket() // a deny policy never serves
		}
		if it.outcome == pass || it.outcome == refuse {
			dry = dry || it.v.Policy.DryRun
			wouldRefuse = wouldRefuse || it.v.WouldRefuse
		}
		if !it.bucket() {
			continue
		}
		if !listed(r, i) {
			if len(policies) > 0 {
				policies = append(policies, ", "...)
			}
			policies = rlheader.AppendPolicy(policies, it.v.Policy)
		}
		if len(limits) > 0 {
			limits = append(limits, ", "...)
		}
		limits = rlheader.AppendRateLimit(limits, it.v)
	}
	var hs []*corev3.HeaderValue
	if len(limits) > 0 {
		hs = append(hs,
			&corev3.HeaderValue{Key: rlheader.FieldPolicy, Value: string(policies)},
			&corev3.HeaderValue{Key: rlheader.FieldRateLimit, Value: string(limits)})
	}
	if retryOK {
		hs = append(hs, &corev3.HeaderValue{Key: rlheader.FieldRetryAfter, Value: strconv.FormatInt(retry, 10)})
	}
	if dry {
		v := "served"
		if wouldRefuse {
			v = "refused"
		}
		hs = append(hs, &corev3.HeaderValue{Key: rlheader.FieldDryRun, Value: v})
	}
	return hs
}

// listed reports whether an item before r.items[i] describes a bucket of
// the same policy, whose RateLimit-Policy item is already written.
func listed(r *request, i int) bool {
	for j := range i {
		if it := &r.items[j]; it.bucket() && it.v.Policy.Name == r.items[i].v.Policy.Name {
			return true
		}
	}
	return false
}

// units are the units a limit is stated in, shortest first.
var units = [...]struct {
	seconds float64
	unit    rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{1, rlsv3.RateLimitResponse_RateLimit_SECOND},
	{60, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{3600, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{86400, rlsv3.RateLimitResponse_RateLimit_DAY},
}

// currentLimit states policy p's rate as a whole number of requests per
// unit of time (limitUnit).
func currentLimit(p bucket.Policy) *rlsv3.RateLimitResponse_RateLimit {
	n, unit, days := limitUnit(p.Rate)
	l := &rlsv3.RateLimitResponse_RateLimit{Name: p.Name, RequestsPerUnit: n, Unit: unit}
	if days > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(days)
	}
	return l
}

// limitUnit states rate (tokens per second) as n requests per unit: in
// the shortest of second, minute, hour and day in which it is a whole
// number (0.05 is 3 per minute, 1/3 is 20 per minute); when it is none,
// in the shortest in which it is at least 50, so that rounding it is off
// by at most 1% (0.3333 is 1200 per hour). A rate under 50 a day that is no
// whole number a day is stated per several days, days > 1 (the unit
// multiplier): the fewest in which it is a whole number or at least 50
// (10.5 a day is 21 per 2 days; 0.000001 a second, 0.0864 a day, is 50
// per 579 days). n saturates at 2^32-1.
func limitUnit(rate float64) (n uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, days uint32) {
	for _, u := range units {
		if x := rate * u.seconds; whole(x) {
			return count(x), u.unit, 1
		}
	}
	for _, u := range units {
		if x := rate * u.seconds; x >= 50 {
			return count(x), u.unit, 1
		}
	}
	perDay := rate * 86400
	for days = 2; days < maxDays; days++ {
		if x := perDay * float64(days); whole(x) || x >= 50 {
			break
		}
	}
	return count(perDay * float64(days)), rlsv3.RateLimitResponse_RateLimit_DAY, days
}

// maxDays bounds the days a limit is stated per: about 2,900 years.
const maxDays = 1 << 20

// whole reports whether x is a whole number from 1, within rounding.
func whole(x float64) bool { return x >= 1 && math.Abs(x-math.Round(x)) <= 1e-9*x }

// count is x rounded to a whole number from 1 to 2^32-1.
func count(x float64) uint32 {
	return uint32(min(max(math.Round(x), 1), math.MaxUint32))
}
