package rls

import (
	"errors"
	"fmt"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// A descriptor may carry a limit of its own (RateLimitDescriptor.limit:
// requests_per_unit per unit, times unit_multiplier), which Envoy sends
// when a route states it, and which envoyproxy/ratelimit applies in place
// of its configuration's. The service decides such a descriptor under
// that limit rather than its tag's policy (bucket.Request), as fixed
// windows: requests_per_unit hits per window of unit x unit_multiplier,
// aligned to the Unix epoch (so every node agrees on them, and a minute's
// window is the calendar minute, in UTC), MONTH and YEAR to the calendar.
// That is what envoyproxy/ratelimit does with the same limit, so a
// descriptor moved from it to dthrottled is allowed the same requests in
// the same windows, and DurationUntilReset says when its window ends
// (docs/integrations/envoy.md, "A descriptor's own limit").

// unitLength is the length of each unit a descriptor's limit is stated in;
// MONTH and YEAR follow the calendar instead.
var unitLength = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
}

// quotaOf is the limit a descriptor states, or an error saying why it
// is none. It allocates only for an error.
func quotaOf(l *rlcommon.RateLimitDescriptor_RateLimitOverride) (bucket.Quota, error) {
	n, unit, mult := l.GetRequestsPerUnit(), l.GetUnit(), uint32(1)
	if m := l.GetUnitMultiplier(); m != nil {
		mult = m.GetValue()
	}
	q := bucket.Quota{Algorithm: bucket.Window, Burst: int(n)}
	switch {
	case n < 1 || n > bucket.MaxQuotaBurst:
		return q, fmt.Errorf("requests_per_unit %d: must be from 1 to %d", n, bucket.MaxQuotaBurst)
	case mult < 1:
		return q, fmt.Errorf("unit_multiplier %d: must be at least 1", mult)
	case unit == typev3.RateLimitUnit_MONTH || unit == typev3.RateLimitUnit_YEAR:
		if mult != 1 {
			return q, fmt.Errorf("unit_multiplier %d: a %v window follows the calendar, and takes none", mult, unit)
		}
		q.Calendar = bucket.Month
		if unit == typev3.RateLimitUnit_YEAR {
			q.Calendar = bucket.Year
		}
		return q, nil
	}
	d, ok := unitLength[unit]
	if !ok {
		return q, fmt.Errorf("unit %v: must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", unit)
	}
	if uint64(mult) > uint64(bucket.MaxQuotaPeriod/d) {
		return q, fmt.Errorf("%d x %v: a window must be at most %v", mult, unit, bucket.MaxQuotaPeriod)
	}
	q.Period = d * time.Duration(mult)
	return q, nil
}

// errNoLimiter refuses a stated limit on a server given no Limiter.
var errNoLimiter = errors.New("this service takes no stated limit")

// checkStated checks a descriptor that states its limit: the table reads
// its bucket under that limit (a request of 0 hits, spending nothing),
// and the descriptor would be served when the bucket holds its cost (one
// token for a cost of 0), or when its policy is a dry run. An error is
// the table's refusal of the limit itself, which fails the request.
func (s *Server) checkStated(now time.Time, tag []byte, it *item) (outcome, bucket.Verdict, error) {
	if s.limiter == nil {
		return refuse, bucket.Verdict{}, errNoLimiter
	}
	v, err := s.limiter.AllowQuota(now, tag, bucket.Request{Quota: it.quota, Need: cost(it)})
	if err != nil {
		return refuse, v, err
	}
	if v.Policy.Action != bucket.Limit { // allow or deny: no bucket to read
		if v.Allowed {
			return pass, v, nil
		}
		return refuse, v, nil
	}
	if v.Policy.DryRun || v.Tokens >= float64(max(cost(it), 1)) {
		return pass, v, nil
	}
	return refuse, v, nil
}

// spendStated takes a descriptor's cost under the limit it states. A
// table that refuses the limit now (it had room for it at the check, and
// has none since) refuses the descriptor, as a bucket spent since the
// check does.
func (s *Server) spendStated(now time.Time, tag []byte, it *item) bucket.Verdict {
	v, err := s.limiter.AllowQuota(now, tag, bucket.Request{Quota: it.quota, Hits: cost(it)})
	if err != nil {
		return bucket.Verdict{}
	}
	return v
}

// statedError is the gRPC status of a stated limit the table would not
// decide under: PERMISSION_DENIED when the tag's policy takes none
// (quotas = "none"), RESOURCE_EXHAUSTED when the table holds as many
// distinct limits as it may, INVALID_ARGUMENT otherwise.
func statedError(i int, err error) error {
	code := codes.InvalidArgument
	switch {
	case errors.Is(err, bucket.ErrLimitForbidden):
		code = codes.PermissionDenied
	case errors.Is(err, bucket.ErrTooManyLimits):
		code = codes.ResourceExhausted
	}
	return status.Errorf(code, "rls: descriptors[%d].limit: %v", i, err)
}
