// Package decide names what the ways in ask the table through: an
// interface per question, Decider for a query with its verdict (the HTTP
// decision endpoint, the SPOE agent) and Charger for a cost paid after
// the response (the HTTP endpoint, the charge socket, the rate limit
// service), which *bucket.Table satisfies, so that each of them depends
// on the question it asks rather than on the table, and tests hand them
// fakes.
//
// The line protocol asks another question (protocol.Decider): OK or NO for
// one token, decided in batches, with nothing else to write back.
package decide

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// Decider decides a query costing n tokens for tag at now, and says why in
// its verdict: the policy, the tokens left, the wait until the same query
// would be served. It must be safe for concurrent use and must not retain
// tag (or any part of it) after AllowN returns: the bytes belong to the
// caller's buffer.
type Decider interface {
	AllowN(now time.Time, tag []byte, n int) bucket.Verdict
}

// Charger takes a cost known only after the response (the tokens an
// answer took, the rows a query read) from tag's bucket at now: n tokens,
// whatever is left, into debt if need be, reported to the peers as n
// hits. It refuses nothing and answers nothing. It must be safe for
// concurrent use and must not retain tag after Charge returns.
type Charger interface {
	Charge(now time.Time, tag []byte, n uint32)
}

var (
	_ Decider = (*bucket.Table)(nil)
	_ Charger = (*bucket.Table)(nil)
)
