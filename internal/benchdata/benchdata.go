// Package benchdata makes the data the benchmarks of several packages
// share, so that their figures are over the same tags.
package benchdata

import (
	"fmt"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// Tags is how many distinct tags Hits makes: a million, the scale the
// reports' benchmarks are stated at.
const Tags = 1000000

// Hits is Tags distinct IPv4 tags in 10.0.0.0/8, 8 to 14 bytes long, with
// small counts (1 to 300), as a report of a busy interval would carry.
func Hits() []bucket.Hit {
	hits := make([]bucket.Hit, Tags)
	for i := range hits {
		n := i + 1<<20 // from 10.16.0.0, so the second octet has 2 digits
		hits[i] = bucket.Hit{Key: fmt.Sprintf("10.%d.%d.%d", n>>16, n>>8&0xff, n&0xff), Count: uint32(i%300 + 1)}
	}
	return hits
}
