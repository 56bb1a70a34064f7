package gossip

import (
	"sort"
	"time"
)

// PeerInfo is what a node knows of one peer, for logs and the admin view.
type PeerInfo struct {
	Node             uint64    `json:"node"`
	Addr             string    `json:"addr"` // where its last datagram came from
	FirstHeard       time.Time `json:"first_heard"`
	LastHeard        time.Time `json:"last_heard"`
	Packets          uint64    `json:"packets"`    // accepted datagrams
	Hits             uint64    `json:"hits"`       // hits applied from it
	Lost             uint64    `json:"lost"`       // datagrams missing from its sequence
	Duplicates       uint64    `json:"duplicates"` // datagrams seen twice (or too old to tell)
	FingerprintMatch bool      `json:"fingerprint_match"`
	Silent           bool      `json:"silent"` // not heard for the silence timeout
	// Relayed says the peer reports through relays when it hears one, so
	// its silence is expected and not logged.
	Relayed bool `json:"relayed,omitempty"`
	// Relay is RelayOfSegment for a relay of this node's segment,
	// RelayOfRemote for one of another segment, empty for a node.
	Relay string `json:"relay,omitempty"`
	// Found says how this node came to send to the peer:
	// transport.FoundConfigured, FoundResolved, FoundLearned or
	// FoundMulticast. The node leaves it empty; the daemon, which knows
	// the transports, fills it in.
	Found string `json:"found,omitempty"`
}

// replayWindow is how many sequence numbers behind the highest one seen a
// datagram may arrive and still be accepted once.
const replayWindow = 64

// peer tracks one sender's sequence numbers, like IPsec's anti-replay
// window: the highest number seen and a bitmap of the ones just below it.
type peer struct {
	info    PeerInfo
	highest uint64
	window  uint64 // bit i set: highest-i was seen
	warned  bool   // fingerprint mismatch logged
}

// accept records seq and reports whether it is new. A jump ahead counts
// the numbers skipped as lost; one of them arriving late is accepted and
// no longer counted lost.
func (p *peer) accept(seq uint64) bool {
	if p.info.Packets == 0 && p.window == 0 {
		p.highest, p.window = seq, 1
		return true
	}
	if seq > p.highest {
		shift := seq - p.highest
		if shift >= replayWindow {
			p.window = 0
		} else {
			p.window <<= shift
		}
		p.window |= 1
		p.info.Lost += shift - 1
		p.highest = seq
		return true
	}
	back := p.highest - seq
	if back >= replayWindow || p.window&(1<<back) != 0 {
		p.info.Duplicates++
		return false
	}
	p.window |= 1 << back
	if p.info.Lost > 0 {
		p.info.Lost--
	}
	return true
}

// sortedPeers returns the peers' info ordered by node id.
func sortedPeers(peers map[uint64]*peer) []PeerInfo {
	out := make([]PeerInfo, 0, len(peers))
	for _, p := range peers {
		out = append(out, p.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
