package httpapi

import (
	"math"
	"strconv"
	"time"

	"github.com/dthrottle/dthrottle/bucket"
)

// The header fields of an answer. RateLimit-Policy and RateLimit follow
// draft-ietf-httpapi-ratelimit-headers-10: each a list of one item, the
// policy's name as a structured-field string, with parameters.
// They are set in the header map as written here, not canonicalised
// ("Ratelimit"), so they go out as the draft spells them; field names are
// case-insensitive either way.
const (
	hdrPolicy     = "RateLimit-Policy"
	hdrRateLimit  = "RateLimit"
	hdrRetryAfter = "Retry-After"
	hdrDryRun     = "DThrottle-Dry-Run"
)

// AppendPolicy appends the RateLimit-Policy value of a limit policy:
// `"name";q=<burst>;w=<seconds>`, its quota the bucket's burst and its
// window the time the bucket takes to refill from empty (Policy.Refill),
// rounded up to a whole second.
func AppendPolicy(b []byte, p bucket.Policy) []byte {
	b = appendSFString(b, p.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(p.Burst), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, ceilSeconds(p.Refill().Seconds()), 10)
}

// AppendRateLimit appends the RateLimit value of a verdict:
// `"name";r=<remaining>;t=<seconds>`, remaining the whole tokens left in
// the bucket (0 in debt), and t the seconds until the bucket is full
// again, rounded up.
func AppendRateLimit(b []byte, v bucket.Verdict) []byte {
	b = appendSFString(b, v.Policy.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(math.Floor(v.Tokens), 0)), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilDuration(v.Full), 10)
}

// RetryAfter is the Retry-After value of a refusal: the whole seconds,
// rounded up and at least 1, until the same request would be served. ok
// is false for a served request, and for a cost above the policy's burst,
// which is never served.
func RetryAfter(v bucket.Verdict) (seconds int64, ok bool) {
	if v.Allowed || v.Wait >= time.Duration(math.MaxInt64) {
		return 0, false
	}
	return max(ceilDuration(v.Wait), 1), true
}

// appendSFString appends s as a structured-field string (RFC 9651):
// quoted, with '"' and '\' escaped. Bytes outside printable ASCII, which
// such a string cannot hold, become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ceilDuration is d in whole seconds, rounded up.
func ceilDuration(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// ceilSeconds is s rounded up to a whole second, at least 1 and at most
// the largest int64.
func ceilSeconds(s float64) int64 {
	c := math.Ceil(s)
	switch {
	case !(c >= 1):
		return 1
	case c >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(c)
}
