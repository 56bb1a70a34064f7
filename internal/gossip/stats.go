package gossip

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
)

// This file owns a node's counters: what it sent, received, dropped,
// lost and repaired, with its parts' (warm start, relaying) beside them.

// Stats are a node's counters over its life.
type Stats struct {
	PacketsSent, BytesSent         uint64
	PacketsReceived, BytesReceived uint64 // accepted datagrams
	TagsSent, TagsReceived         uint64 // tag entries in reports
	SkippedTags                    uint64 // keys too long for one datagram
	SendErrors                     uint64
	DroppedAuth                    uint64 // no valid MAC under a key
	DroppedMalformed               uint64
	DroppedVersion                 uint64
	DroppedDuplicate               uint64
	DroppedStale                   uint64 // sent before Since, or too long ago
	Own                            uint64 // our own datagrams heard back
	Lost                           uint64 // datagrams missing from peers' sequences, repairs not arrived
	Repair                         RepairStats
	FingerprintMismatch            uint64 // datagrams from peers with other policies
	Warm                           warm.Stats
	Relay                          relay.NodeStats
	LastReport                     time.Time
	LastReportDuration             time.Duration
}

// countSent adds datagrams, bytes and tag entries sent to the counters.
func (n *Node) countSent(packets, bytes uint64, tags int, failed bool) {
	n.mu.Lock()
	n.stats.PacketsSent += packets
	n.stats.BytesSent += bytes
	n.stats.TagsSent += uint64(tags)
	if failed {
		n.stats.SendErrors++
	}
	n.mu.Unlock()
}

// Stats returns the node's counters, its parts' with them.
func (n *Node) Stats() Stats {
	st := n.nodeStats()
	st.Repair.Repaired += n.relay.Repaired()
	st.Warm = n.warm.Stats()
	st.Relay = n.relay.Stats(n.statsTime())
	return st
}

// nodeStats returns the node's own counters, without its parts'.
func (n *Node) nodeStats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.stats
	st.Repair = n.repairStats
	for _, p := range n.peers {
		st.Lost += p.Info.Lost
		st.Repair.Repaired += p.Info.Repaired
	}
	return st
}
