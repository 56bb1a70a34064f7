package harness

import (
	"math"
	"math/big"
	"time"
)

// This file owns the ideal the cluster tests compare a load with: what
// one leaky bucket (docs/design.md, Semantics) would have served of the
// very queries the load asked, at the instants it asked them.

// idealBucket is one tag's bucket of burst b and rate r, full at start,
// kept exactly: as the instant it is full again (the theoretical arrival
// time of GCRA) in rational nanoseconds, so no rounding ever turns a
// decision at the edge of a token. Its zero value is not usable; it is
// not safe for concurrent use.
type idealBucket struct {
	start     time.Time
	period    *big.Rat // nanoseconds a token takes to come back: 1e9/r
	tolerance *big.Rat // how far past now full may be while a token is left: (b-1) periods
	full      *big.Rat // nanoseconds after start when the bucket is full again
}

// NewIdealBucket is a full bucket of burst b and rate r at start.
func NewIdealBucket(start time.Time, b int, r float64) *idealBucket {
	if b < 1 || !(r > 0) || math.IsInf(r, 1) {
		panic("tests: an ideal bucket needs burst >= 1 and a finite rate > 0")
	}
	period := new(big.Rat).Quo(big.NewRat(int64(time.Second), 1), new(big.Rat).SetFloat64(r))
	return &idealBucket{
		start:     start,
		period:    period,
		tolerance: new(big.Rat).Mul(big.NewRat(int64(b-1), 1), period),
		full:      new(big.Rat),
	}
}

// Allow reports whether the bucket serves a query at now, and spends a
// token if it does. tokens = b - (full - now)/period, at most b, so a
// token is left when full - now <= (b-1) periods. A now before an earlier
// one refunds nothing: it only finds the bucket emptier.
func (b *idealBucket) Allow(now time.Time) bool {
	t := new(big.Rat).SetInt64(int64(now.Sub(b.start)))
	ahead := new(big.Rat).Sub(b.full, t)
	if ahead.Cmp(b.tolerance) > 0 {
		return false
	}
	if ahead.Sign() < 0 {
		b.full.Set(t)
	}
	b.full.Add(b.full, b.period)
	return true
}

// versusIdeal is what a load was served against what one bucket would
// have served of the same queries (its ideal): over the whole run, and at
// the worst instants of it.
type versusIdeal struct {
	Queries       int // asked: answered OK or NO, or not at all
	Unanswered    int // of them, not at all
	Served, Ideal int // over the whole run
	// The lowest and highest served - ideal over the run's prefixes (from
	// the load's start to each query), and when, after the start. Both
	// start at 0, before the first query.
	Low, High     int
	LowAt, HighAt time.Duration
}

// Over is how many more than its ideal the load was served over the
// whole run, under how many fewer; one of the two is 0.
func (v versusIdeal) Over() int  { return max(v.Served-v.Ideal, 0) }
func (v versusIdeal) Under() int { return max(v.Ideal-v.Served, 0) }

// VersusIdeal replays every query l asked through one bucket of policy c,
// full when the load started, and counts what each served. A query that
// was not answered counts as not served: the ideal still decides it, since
// a client asked it. Call it once the load is over.
func (l *Load) VersusIdeal(c NodeConfig) versusIdeal {
	b := NewIdealBucket(l.Start, c.Burst, c.Rate)
	v := versusIdeal{Queries: len(l.queries)}
	for _, q := range l.queries {
		if b.Allow(q.at) {
			v.Ideal++
		}
		switch q.answer {
		case answerOK:
			v.Served++
		case noAnswer:
			v.Unanswered++
		}
		at := q.at.Sub(l.Start)
		if d := v.Served - v.Ideal; d < v.Low {
			v.Low, v.LowAt = d, at
		} else if d > v.High {
			v.High, v.HighAt = d, at
		}
	}
	return v
}
