// Package peer keeps what a node knows of each sender it hears: the
// sender's sequence window, which tells a new datagram from a duplicate, a
// replay or a loss, and its info for logs and the peers view; and tables
// of senders whose size is bounded whatever arrives. The node keeps one
// table of its peers, its relaying part one per stream of relayed
// datagrams, its warm start part one window per answer.
package peer

import (
	"fmt"
	"sort"
	"time"
)

// Info is what a node knows of one peer, for logs and the admin view.
type Info struct {
	Node             uint64    `json:"node"`
	Addr             string    `json:"addr"` // where its last datagram came from
	FirstHeard       time.Time `json:"first_heard"`
	LastHeard        time.Time `json:"last_heard"`
	Packets          uint64    `json:"packets"`    // accepted datagrams
	Hits             uint64    `json:"hits"`       // hits applied from it
	Lost             uint64    `json:"lost"`       // datagrams missing from its sequence, repairs not arrived
	Duplicates       uint64    `json:"duplicates"` // datagrams seen twice (or too old to tell)
	Repaired         uint64    `json:"repaired"`   // datagrams that arrived after this node asked for them again
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
	// Delay, Behind, Missing and Left are the node's membership view
	// (package gossip's members.go).
	Delay   time.Duration `json:"delay_ns"`          // its last datagram's arrival here less its send time (its clock), at least 0
	Behind  time.Duration `json:"behind_ns"`         // Delay plus an interval: how far its hits can be behind when applied here
	Missing bool          `json:"missing,omitempty"` // silent, neither gone nor forgotten: out of this node's share
	Left    bool          `json:"left,omitempty"`    // said goodbye: stopped cleanly
}

// Relay states a peer can have in the peers view (Info.Relay).
const (
	RelayOfSegment = "segment" // a relay of this node's segment
	RelayOfRemote  = "remote"  // a relay of another segment
)

// Max bounds a table of peers, whatever arrives; the peer heard least
// recently makes room for a new one.
const Max = 1024

// ReplayWindow is how many sequence numbers behind the highest one seen a
// datagram may arrive and still be accepted once: a late datagram, or one
// sent again because this node asked for it (repair.go), within it.
const ReplayWindow = 1024

// Peer tracks one sender's sequence numbers, like IPsec's anti-replay
// window: the highest number seen and a bitmap of the ones just below it.
// Info counts what the window sees (Lost, Duplicates, Repaired); the rest
// of it is the owner's to fill in.
type Peer struct {
	Info    Info
	Warned  bool // the owner's: a fingerprint mismatch logged
	highest uint64
	window  bitmap // bit i set: highest-i was seen
	holes   holes  // the numbers missing, as repair asks for them (repair.go)
}

// Accept records seq and reports whether it is new. A jump ahead counts
// the numbers skipped as lost, noticed at at; one of them arriving late
// is accepted and no longer counted lost (and counted repaired if it was
// asked for again). The first number accepted is the one that starts the
// window, unless Info.Packets was set before.
func (p *Peer) Accept(seq uint64, at time.Time) bool {
	if p.Info.Packets == 0 && p.window.empty() {
		p.highest = seq
		p.window.set(0)
		return true
	}
	if seq > p.highest {
		shift := seq - p.highest
		p.window.shift(shift)
		p.window.set(0)
		p.Info.Lost += shift - 1
		p.holes.notice(p.highest+1, seq, at)
		p.highest = seq
		return true
	}
	back := p.highest - seq
	if back >= ReplayWindow || p.window.has(back) {
		p.Info.Duplicates++
		return false
	}
	p.window.set(back)
	if p.Info.Lost > 0 {
		p.Info.Lost--
	}
	if p.holes.filled(seq) {
		p.Info.Repaired++
	}
	return true
}

// Table is a bounded table of peers by node id. Not safe for concurrent
// use: its owner's lock guards it.
type Table map[uint64]*Peer

// For returns the entry for node id, heard from addr at at, making room
// for it if needed: the peer heard least recently goes.
func (t Table) For(id uint64, addr string, at time.Time) (_ *Peer, isNew bool) {
	if p, ok := t[id]; ok {
		return p, false
	}
	if len(t) >= Max {
		var oldest *Peer
		for _, q := range t {
			if oldest == nil || q.Info.LastHeard.Before(oldest.Info.LastHeard) {
				oldest = q
			}
		}
		delete(t, oldest.Info.Node)
	}
	p := &Peer{Info: Info{Node: id, Addr: addr, FirstHeard: at, FingerprintMatch: true}}
	t[id] = p
	return p, true
}

// Sorted returns the peers' info ordered by node id.
func (t Table) Sorted() []Info {
	out := make([]Info, 0, len(t))
	for _, p := range t {
		out = append(out, p.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Name formats a node id as logs and the admin view show it.
func Name(id uint64) string { return fmt.Sprintf("%016x", id) }
