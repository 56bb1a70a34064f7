// Package rlheader writes a decision as the header fields a client is
// told it by: RateLimit-Policy and RateLimit, as
// draft-ietf-httpapi-ratelimit-headers-10 defines them (each a list of
// items, the policy's name as a structured-field string with
// parameters), and Retry-After on a refusal. The HTTP decision endpoint
// sets them on its answers, the SPOE agent hands their values to HAProxy,
// and the rate limit service for Envoy has Envoy add them to its
// responses, so every way in states a verdict alike.
//
// The functions append to a caller's buffer and allocate nothing.
package rlheader

import (
	"math"
	"strconv"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// The header fields' names, as the draft spells them, and the one that
// says what a dry run decided. The HTTP decision endpoint sets them in
// its header map as written here, not canonicalised ("Ratelimit"), so
// they go out as the draft spells them; field names are case-insensitive
// either way.
const (
	FieldPolicy     = "RateLimit-Policy"
	FieldRateLimit  = "RateLimit"
	FieldRetryAfter = "Retry-After"
	FieldDryRun     = "DThrottle-Dry-Run"
)

// AppendPolicy appends the RateLimit-Policy item of a limit policy:
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

// AppendRateLimit appends the RateLimit item of a verdict:
// `"name";r=<remaining>;t=<seconds>`, remaining the whole tokens left in
// the bucket (0 in debt), and t the seconds until the bucket is full
// again, rounded up.
func AppendRateLimit(b []byte, v bucket.Verdict) []byte {
	b = appendSFString(b, v.Policy.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(math.Floor(v.Tokens), 0)), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, CeilSeconds(v.Full), 10)
}

// RetryAfter is the Retry-After value of a refusal: the whole seconds,
// rounded up and at least 1, until the same request would be served. ok
// is false for a served request, and for a cost above the policy's burst,
// which is never served.
func RetryAfter(v bucket.Verdict) (seconds int64, ok bool) {
	if v.Allowed || v.Wait >= time.Duration(math.MaxInt64) {
		return 0, false
	}
	return max(CeilSeconds(v.Wait), 1), true
}

// CeilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
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
