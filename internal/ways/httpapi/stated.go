package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/rlheader"
)

// A query may state the limit it is decided under, in place of its tag's
// policy (docs/http-endpoint.md, "A limit stated per request"):
//
//	limit=<n>&per=<duration>[&burst=<n>]  a leaky bucket of rate n/per,
//	                                      burst the burst given or n
//	rate=<tokens per second>&burst=<n>    a leaky bucket, as [limit] says it
//	algorithm=window&limit=<n>&per=<d>    n hits per fixed window of per
//
// algorithm=leaky is the default. per is a Go duration ("1m", "24h").

// Errors of parseStated, each answered 400 with its text.
var (
	errBadLimit     = errors.New("limit must be an integer from 1 to " + strconv.Itoa(bucket.MaxQuotaBurst))
	errBadBurst     = errors.New("burst must be an integer from 1 to " + strconv.Itoa(bucket.MaxQuotaBurst))
	errBadPer       = errors.New("per must be a duration from " + bucket.MinQuotaPeriod.String() + " to " + bucket.MaxQuotaPeriod.String() + ", such as 1m or 24h")
	errBadRate      = errors.New("rate must be a number of tokens per second above 0")
	errBadAlgorithm = errors.New("algorithm must be leaky or window")
	errLimitPer     = errors.New("limit and per go together: give both, or rate with burst")
	errRateBurst    = errors.New("rate needs burst: give rate with burst, or limit with per")
	errBurstAlone   = errors.New("burst goes with rate, or with limit and per")
	errRateAndLimit = errors.New("give limit with per, or rate with burst, not both")
	errWindowBurst  = errors.New("burst does not go with algorithm=window: limit is the hits a window serves")
	errWindowRate   = errors.New("algorithm=window takes limit and per, not rate")
	errAlgorithm    = errors.New("algorithm needs a stated limit: limit with per")
)

// parseStated reads the limit a query states, from its parameters as
// written; stated is false when it states none (no limit, per, rate,
// burst or algorithm). It allocates nothing for a valid limit.
func parseStated(p *params) (q bucket.Quota, stated bool, err error) {
	if !p.has[pLimit] && !p.has[pPer] && !p.has[pRate] && !p.has[pBurst] && !p.has[pAlgorithm] {
		return q, false, nil
	}
	window := false
	if p.has[pAlgorithm] {
		switch p.v[pAlgorithm] {
		case "leaky":
		case "window":
			window = true
		default:
			return q, true, errBadAlgorithm
		}
	}
	if p.has[pRate] {
		switch {
		case window:
			return q, true, errWindowRate
		case p.has[pLimit] || p.has[pPer]:
			return q, true, errRateAndLimit
		case !p.has[pBurst]:
			return q, true, errRateBurst
		}
		r, err := strconv.ParseFloat(p.v[pRate], 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return q, true, errBadRate
		}
		q.Rate = r
		if q.Burst, err = quotaInt(p.v[pBurst], errBadBurst); err != nil {
			return q, true, err
		}
		return q, true, q.Check()
	}
	switch {
	case !p.has[pLimit] && !p.has[pPer] && p.has[pBurst]:
		return q, true, errBurstAlone
	case !p.has[pLimit] && !p.has[pPer]:
		return q, true, errAlgorithm
	case !p.has[pLimit] || !p.has[pPer]:
		return q, true, errLimitPer
	}
	limit, err := quotaInt(p.v[pLimit], errBadLimit)
	if err != nil {
		return q, true, err
	}
	per, err := time.ParseDuration(p.v[pPer])
	if err != nil || per < bucket.MinQuotaPeriod || per > bucket.MaxQuotaPeriod {
		return q, true, errBadPer
	}
	if window {
		if p.has[pBurst] {
			return q, true, errWindowBurst
		}
		return bucket.Quota{Algorithm: bucket.Window, Burst: limit, Period: per}, true, nil
	}
	q.Rate, q.Burst = float64(limit)/per.Seconds(), limit
	if p.has[pBurst] {
		if q.Burst, err = quotaInt(p.v[pBurst], errBadBurst); err != nil {
			return q, true, err
		}
	}
	return q, true, q.Check() // the table's own range: a burst refilling within 73 years
}

// quotaInt reads a stated burst or limit: an integer from 1 to
// bucket.MaxQuotaBurst, else bad.
func quotaInt(s string, bad error) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > bucket.MaxQuotaBurst {
		return 0, bad
	}
	return n, nil
}

// errNoLimiter answers a stated limit on a server given no Limiter.
var errNoLimiter = errors.New("this endpoint takes no stated limit")

// allowStated decides a query under the limit it states.
func (s *Server) allowStated(tag []byte, r bucket.Request) (bucket.Verdict, error) {
	if s.limit == nil {
		return bucket.Verdict{}, errNoLimiter
	}
	return s.limit.AllowQuota(s.now(), tag, r)
}

// failStated answers a stated limit the table would not decide under:
// 403 when the tag's policy takes none (quotas = "none"), 503 with
// Retry-After when the table holds as many distinct limits as it may,
// 400 for a limit out of range (the table's *bucket.LimitError) or
// anything else.
func (s *Server) failStated(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, bucket.ErrLimitForbidden):
		s.fail(w, http.StatusForbidden, "forbidden: the tag's policy takes no stated limit (quotas = \"none\")")
	case errors.Is(err, bucket.ErrTooManyLimits):
		s.busy.Add(1)
		h := w.Header()
		h["Content-Type"] = textPlain
		h[rlheader.FieldRetryAfter] = retryBusy
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(busyBody)
	default:
		s.fail(w, http.StatusBadRequest, err.Error())
	}
}

var (
	retryBusy = []string{"1"}
	busyBody  = []byte("too many distinct stated limits in use: try again, or state one already in use\n")
)
