// Package top owns "who is throttled": per policy, the tags with the most
// refusals and the tags with the most hits served, over a sliding window,
// as this node counts them and as the whole cluster does.
//
// A Board takes, every interval, the refusals the table harvested
// (bucket.Table.TakeRefusals) and the hits the node drained for its peers
// (bucket.Table.Drain), and keeps, per policy and count, heavy-hitter
// summaries (package topk) of the last Window in Parts parts. It hands
// out this node's Report for its peers, which internal/gossip/wire's
// Encoder.EncodeTop fits into one datagram, and keeps the latest Report
// of each peer until it expires. View answers the admin endpoint's
// GET /v1/top (api.Top) for the node alone or merged over the
// cluster, every count with its error stated.
//
// Memory is fixed by the Config, whatever the number of tags: at most
// Policies × 2 × Parts summaries of K tags, Policies sketches of K
// counters (and 8K filter counters of 8 bytes), and Nodes peers' reports
// of at most PeerTags tags; each tag costs its key and about 60 bytes.
// DefaultConfig: 32 × 2 × 6 × 256 + 32 × 256 + 128 × 512 = 172,032 tags
// at most, some 14 MB with 20-byte keys, and 512 KiB of filter counters:
// only 32 policies each refusing and serving hundreds of distinct tags
// in every part, and 128 peers doing the same, reach it.
//
// A Feed fills a Board from the table (feed.go): at every gossip report,
// or with gossip off from a loop of its own. Package top is the one home
// of who is throttled; the others only call it: the table counts
// refusals where it decides (into topk sketches, harvested by
// TakeRefusals), internal/gossip/wire encodes a Report, the node carries
// it, the admin endpoint serves the View, the dthrottle command shows it.
// It knows nothing of sockets or of the node.
package top

import (
	"errors"
	"fmt"
	"time"

	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// By is what a list counts: the queries refused, or the hits served.
type By uint8

// The counts a list may be by. Append-only: their numbers are on the
// wire (internal/gossip/wire, MsgTop).
const (
	Refused By = 0
	Served  By = 1
)

// numBy is how many counts there are.
const numBy = 2

// String returns "refused" or "served", as api.Top says it.
func (b By) String() string {
	switch b {
	case Refused:
		return "refused"
	case Served:
		return "served"
	}
	return fmt.Sprintf("by(%d)", b)
}

// List is one policy's heaviest tags by one count over a node's window:
// a tag's true count is at most Count and at least Count-Err, a tag not
// listed counted at most Floor, and Total is every count of the policy.
// Items are heaviest first.
type List struct {
	Policy string
	By     By
	topk.Summary
}

// Report is what a node tells its peers of its heaviest tags: a list per
// policy and count. A sender that could not fit every list (wire's
// Encoder.EncodeTop) says, per count, the most a tag of a list it left
// out counted: LeftOut[Refused] and LeftOut[Served]. A Report's zero
// value is a node with nothing to tell.
type Report struct {
	Lists   []List
	LeftOut [numBy]uint64
}

// Config sizes a Board. Its zero value is not usable: start from
// DefaultConfig.
type Config struct {
	// K is how many tags are kept per policy and count, in each part of
	// the window and in the view: the view's n is at most K.
	K int
	// Policies is how many policies are kept per node. A policy past it
	// is counted nowhere until one of those kept has had nothing in the
	// window for a whole window.
	Policies int
	// Window is how far back the view looks, in Parts parts: the oldest
	// part is forgotten whole, so the view covers between
	// Window-Window/Parts and Window.
	Window time.Duration
	Parts  int
	// Nodes is how many peers' reports are kept; past it, the one heard
	// from longest ago is forgotten. PeerTags caps the tags kept of one
	// report.
	Nodes    int
	PeerTags int
	// Expire is how long a peer's report counts after it arrived: a few
	// times the period at which nodes send their reports.
	Expire time.Duration
}

// DefaultConfig returns the Board's defaults.
func DefaultConfig() Config {
	return Config{
		K:        256,              // the view shows at most 100 tags a policy
		Policies: 32,               // more than most configurations have
		Window:   time.Minute,      // who is refused now, not since start
		Parts:    6,                // forgets 10 s at a time
		Nodes:    128,              // peers whose reports count
		PeerTags: 512,              // a datagram of 1400 bytes holds under 100
		Expire:   15 * time.Second, // three reports sent every 5 s
	}
}

// Validate reports the first field out of its range.
func (c Config) Validate() error {
	switch {
	case c.K < 1 || c.K > 1<<16:
		return fmt.Errorf("top: K must be between 1 and 65536, got %d", c.K)
	case c.Policies < 1 || c.Policies > 1<<12:
		return fmt.Errorf("top: Policies must be between 1 and 4096, got %d", c.Policies)
	case c.Parts < 1 || c.Parts > 1000:
		return fmt.Errorf("top: Parts must be between 1 and 1000, got %d", c.Parts)
	case c.Window < time.Duration(c.Parts)*time.Millisecond:
		return fmt.Errorf("top: Window must be at least a millisecond per part, got %v", c.Window)
	case c.Nodes < 0 || c.Nodes > 1<<16:
		return fmt.Errorf("top: Nodes must be between 0 and 65536, got %d", c.Nodes)
	case c.PeerTags < 0 || c.PeerTags > 1<<20:
		return fmt.Errorf("top: PeerTags must be between 0 and 1048576, got %d", c.PeerTags)
	case c.Expire <= 0:
		return errors.New("top: Expire must be > 0")
	}
	return nil
}
