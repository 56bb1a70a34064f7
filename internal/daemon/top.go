package daemon

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/top"
)

// servedEvery is how many feeds of the board go between two drains of
// the table when gossip is off (top.Feed.Start); a variable so that tests
// may drain at every feed.
var servedEvery = top.DefaultDrainEvery

// newTop returns who is throttled, fed from table, whose peers report
// every interval (0: gossip is off): a peer's report counts until it is
// as old as a peer may go unheard before it is called silent (at the
// interval the daemon started with: a reload that changes it leaves the
// expiry as it was).
func newTop(table *bucket.Table, interval time.Duration, now func() time.Time) (*top.Feed, error) {
	cfg := top.DefaultConfig()
	if interval > 0 {
		cfg.Expire = gossip.SilentAfter(interval)
	}
	return top.NewFeed(table, cfg, now, servedEvery)
}
