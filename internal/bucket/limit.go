package bucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Limits a caller states with its query, in place of its policy's (the
// Gubernator API's per-request limits, the HTTP endpoint's query
// parameters, an Envoy descriptor's limit override). A tag decided under
// a stated limit keeps that limit in its record, so its hits from peers,
// the warm start and the state file all apply it; a query stating
// another limit for the same tag changes it at once, keeping the tokens
// spent. The distinct limits in use are interned in a bounded registry
// (quota.go): however many limits callers send, the table holds at most
// MaxQuotas of them.

// Algorithm is how a stated limit's bucket fills.
type Algorithm uint8

const (
	// Leaky is the table's own bucket: Rate tokens a second, up to Burst,
	// earned continuously (Gubernator's LEAKY_BUCKET).
	Leaky Algorithm = iota
	// Window serves Burst hits per window of Period and gives them all
	// back when the window ends (Gubernator's TOKEN_BUCKET). Windows are
	// aligned to multiples of Period since the Unix epoch, or to the
	// calendar with Calendar, so every node agrees on them without a
	// message.
	Window
)

// String returns the algorithm's name.
func (a Algorithm) String() string {
	switch a {
	case Leaky:
		return "leaky"
	case Window:
		return "window"
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// Calendar is the calendar unit a Window quota's windows follow
// (Gubernator's DURATION_IS_GREGORIAN); None aligns them to Period.
type Calendar uint8

// The calendar units, in Gubernator's order of GregorianDuration.
const (
	None Calendar = iota
	Minute
	Hour
	Day
	Week // starting on Sunday
	Month
	Year
)

// Quota is a limit a caller states. The zero Quota is not valid.
type Quota struct {
	Algorithm Algorithm
	// Burst is the bucket's capacity (Leaky), or the hits a window
	// serves (Window).
	Burst int
	// Rate is the tokens earned a second (Leaky only).
	Rate float64
	// Period is a window's length (Window without a Calendar).
	Period time.Duration
	// Calendar aligns a Window quota's windows to the calendar, in UTC.
	Calendar Calendar
}

// Request is a query under a stated limit.
type Request struct {
	Quota Quota
	// Hits is the tokens the query takes; 0 reads the bucket, spending
	// and counting nothing.
	Hits int
	// Need is, for a read (Hits 0), the tokens the verdict's Allowed and
	// Wait ask about: 1 when below 1.
	Need int
	// Reset refills the bucket before deciding (Gubernator's
	// RESET_REMAINING).
	Reset bool
	// Drain makes a refusal take what the bucket still holds, so that it
	// is empty after it (Gubernator's DRAIN_OVER_LIMIT).
	Drain bool
}

// The stated limits' bounds. A limit outside them is refused with a
// *LimitError naming the field.
const (
	// MaxQuotas is the most distinct stated limits the table holds at
	// once; a query stating one more while all are in use is refused
	// with ErrTooManyLimits.
	MaxQuotas = 16384
	// MaxQuotaBurst is the largest burst, or hits per window, a caller
	// may state.
	MaxQuotaBurst = 1 << 30
	// MinQuotaPeriod and MaxQuotaPeriod bound a window's length.
	MinQuotaPeriod = time.Millisecond
	MaxQuotaPeriod = 366 * 24 * time.Hour
)

// ErrTooManyLimits refuses a stated limit the table has no room for: all
// MaxQuotas limits are in use by tracked tags.
var ErrTooManyLimits = errors.New("bucket: too many distinct stated limits in use")

// ErrLimitForbidden refuses a stated limit for a tag whose policy takes
// none (Policy.Quotas is QuotaNone).
var ErrLimitForbidden = errors.New("bucket: the tag's policy takes no stated limit")

// LimitError is a stated quota out of range.
type LimitError struct {
	Field string // "burst", "rate", "period", "calendar" or "algorithm"
	Value string
	Want  string // the allowed range
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("bucket: stated %s %s: must be %s", e.Field, e.Value, e.Want)
}

// Check returns a *LimitError when l is out of range.
func (l Quota) Check() error {
	if l.Burst < 1 || l.Burst > MaxQuotaBurst {
		return &LimitError{"burst", fmt.Sprint(l.Burst), fmt.Sprintf("from 1 to %d", MaxQuotaBurst)}
	}
	switch l.Algorithm {
	case Leaky:
		if !(l.Rate > 0) || math.IsInf(l.Rate, 0) || float64(l.Burst)/l.Rate*float64(time.Second) >= maxAhead {
			return &LimitError{"rate", fmt.Sprint(l.Rate), "above 0 and high enough that the burst refills within 73 years"}
		}
	case Window:
		if l.Calendar > Year {
			return &LimitError{"calendar", fmt.Sprint(uint8(l.Calendar)), "from 0 (none) to 6 (year)"}
		}
		if l.Calendar == None && (l.Period < MinQuotaPeriod || l.Period > MaxQuotaPeriod) {
			return &LimitError{"period", l.Period.String(), fmt.Sprintf("from %v to %v", MinQuotaPeriod, MaxQuotaPeriod)}
		}
		if int64(l.Burst) > int64(l.window()) {
			return &LimitError{"burst", fmt.Sprint(l.Burst), fmt.Sprintf("at most one a nanosecond of the window (%d)", int64(l.window()))}
		}
	default:
		return &LimitError{"algorithm", fmt.Sprint(uint8(l.Algorithm)), "0 (leaky) or 1 (window)"}
	}
	return nil
}

// QuotaRule says what a policy lets callers state for its tags.
type QuotaRule uint8

const (
	// QuotaAny takes any limit a caller states (the default).
	QuotaAny QuotaRule = iota
	// QuotaLower takes a stated limit only as far as it is below the
	// policy's own: a higher rate or burst is lowered to the policy's.
	QuotaLower
	// QuotaNone refuses stated limits (ErrLimitForbidden).
	QuotaNone
)

// String returns the configuration's name for s.
func (s QuotaRule) String() string {
	switch s {
	case QuotaAny:
		return "any"
	case QuotaLower:
		return "lower"
	case QuotaNone:
		return "none"
	}
	return fmt.Sprintf("quota(%d)", s)
}
