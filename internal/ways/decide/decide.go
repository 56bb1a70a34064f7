// Package decide names what the ways in ask the table, one interface per
// question, each written once here and satisfied by *bucket.Table, so
// that every way depends on the question it asks rather than on the
// table, and tests hand them fakes:
//
//   - Allower: OK or NO for one token (the line protocol), and
//     BatchAllower for pipelined queries decided together;
//   - Decider: a query of some cost with its verdict, the policy, the
//     tokens left and the wait (the HTTP endpoint, the SPOE agent, the
//     rate limit service's spend);
//   - Checker: the same verdict without spending, and the refusal the
//     caller then makes counted (the rate limit service, which checks
//     every descriptor of a request before spending any);
//   - Charger: a cost paid after the response (the HTTP endpoint, the
//     charge socket, the rate limit service);
//   - Limiter: a query under a limit its caller states (the Gubernator
//     API, the HTTP endpoint's and the rate limit service's limits).
//
// Every implementation must be safe for concurrent use and must not
// retain tag (or any part of it) after the call returns: the bytes
// belong to the caller's buffer. now is the time the query was read.
package decide

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// Allower answers one query of one token: true for OK, false for NO.
type Allower interface {
	Allow(now time.Time, tag []byte) bool
}

// BatchAllower is an Allower that also answers several queries at once,
// which may be faster than one at a time (the table then looks up the
// whole batch before deciding).
type BatchAllower interface {
	Allower
	// AllowBatch sets ok[i] to the answer for tags[i], deciding them in
	// order, all at now, exactly as len(tags) calls of Allow would.
	// len(ok) >= len(tags).
	AllowBatch(now time.Time, tags [][]byte, ok []bool)
}

// Decider decides a query costing n tokens for tag at now, and says why in
// its verdict; a refusal is counted as one.
type Decider interface {
	AllowN(now time.Time, tag []byte, n int) bucket.Verdict
}

// Checker gives the verdict a query costing n tokens would get, spending
// and counting nothing (Check), and counts a query its caller refused on
// such a check (Refuse), changing no bucket.
type Checker interface {
	Check(now time.Time, tag []byte, n int) bucket.Verdict
	Refuse(now time.Time, tag []byte)
}

// Charger takes a cost known only after the response (the tokens an
// answer took, the rows a query read) from tag's bucket at now: n tokens,
// whatever is left, into debt if need be, reported to the peers as n
// hits. It refuses nothing and answers nothing.
type Charger interface {
	Charge(now time.Time, tag []byte, n uint32)
}

// Limiter decides a query under the limit its caller states, in place of
// its policy's (bucket.Request): the verdict, with Policy carrying the limit
// applied (lowered to the policy's own where the policy says so), or an
// error when the policy takes no stated limit, the limit is out of range
// (*bucket.LimitError) or the table has no room for another distinct
// limit. A query of 0 hits reads the bucket, spending nothing.
type Limiter interface {
	AllowQuota(now time.Time, tag []byte, r bucket.Request) (bucket.Verdict, error)
}

var (
	_ BatchAllower = (*bucket.Table)(nil)
	_ Decider      = (*bucket.Table)(nil)
	_ Checker      = (*bucket.Table)(nil)
	_ Charger      = (*bucket.Table)(nil)
	_ Limiter      = (*bucket.Table)(nil)
)
