package daemon

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
)

// This file owns warm start from peers: the table's side of a snapshot
// answer (Export) and of a merge (Merge), which the gossip node calls.
// Every node answers its peers' requests; gossip.warm_start decides
// whether this one asks on start.

// warmExport hands the gossip node one shard of the table at a time, in
// the reported frame: without this node's unreported hits, which the
// asker counts from this node's next report.
func warmExport(t *bucket.Table) func(now time.Time, part int, dst []gossip.Level, keys []byte) ([]gossip.Level, []byte, bool) {
	return func(now time.Time, part int, dst []gossip.Level, keys []byte) ([]gossip.Level, []byte, bool) {
		if part >= t.Shards() {
			return dst, keys, false
		}
		dst, keys = t.ReportedShard(now, part, dst, keys)
		return dst, keys, part+1 < t.Shards()
	}
}

// warmMerge lowers the table's buckets to the levels a peer answered.
func warmMerge(t *bucket.Table) func(now time.Time, levels []gossip.Level) int {
	return func(now time.Time, levels []gossip.Level) int { return t.Merge(now, 0, levels) }
}

// WarmStats are the gossip node's warm start counters; zero when gossip
// is off.
func (d *Daemon) WarmStats() warm.Stats {
	if d.gossip == nil {
		return warm.Stats{}
	}
	return d.gossip.node.WarmStats()
}
