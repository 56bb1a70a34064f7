// Package decide names what the ways in that answer with a verdict (the
// HTTP decision endpoint, the SPOE agent) ask the table through: one
// interface, which *bucket.Table satisfies, so that each of them depends
// on the question it asks rather than on the table, and tests hand them
// fakes.
//
// The line protocol asks another question (protocol.Decider): OK or NO for
// one token, decided in batches, with nothing else to write back.
package decide

import (
	"time"

	"github.com/dthrottle/dthrottle/bucket"
)

// Decider decides a query costing n tokens for tag at now, and says why in
// its verdict: the policy, the tokens left, the wait until the same query
// would be served. It must be safe for concurrent use and must not retain
// tag (or any part of it) after AllowN returns: the bytes belong to the
// caller's buffer.
type Decider interface {
	AllowN(now time.Time, tag []byte, n int) bucket.Verdict
}

var _ Decider = (*bucket.Table)(nil)
