package gossip

import (
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns the node's parts as the node sees them: warm start
// (package warm) and relaying (package relay), each driven through a small
// interface. The parts reach back to the node through host (host.go).

// warmPart is warm start as the node drives it. Its lock is the one every
// change of what peers know of the table holds: a report's drain and send,
// a relay's aggregate, a peer's hits applied while this node answers it.
type warmPart interface {
	sync.Locker
	Known(hits []Hit, toAll bool)        // with the lock held
	Theirs(from uint64, hits []Hit) bool // with the lock held
	ReceiveRequest(msg wire.Message, p transport.Packet)
	ReceiveAnswer(msg wire.Message, p transport.Packet)
	Warm(now time.Time) error
	Pace(now time.Time) bool
	Stats() warm.Stats
}

// relayPart is relaying as the node drives it.
type relayPart interface {
	Send(now time.Time, hits []Hit) (sent, relayed bool, err error) // with warm start's lock held
	Forward(now time.Time) error                                    // with warm start's lock held
	ReceiveAggregate(msg wire.Message, p transport.Packet)
	ReceiveRelayed(msg wire.Message, p transport.Packet)
	Check(now time.Time)
	MarkPeers(out []PeerInfo) []PeerInfo
	Stats(now time.Time) relay.NodeStats
	Set(cfg relay.Config)
	SetEvery(every, silent time.Duration)
	Final()
	Link() transport.Transport
	// Holes asks, through ask, for what is missing from the streams
	// relayed to this node (repair.go); Heard says whether addr is one
	// they come from.
	Holes(now time.Time, hold time.Duration, ask func(t transport.Transport, to uint64, addr string, s wire.Stream, seqs []uint64))
	Heard(addr string) bool
	Repaired() uint64
}

var (
	_ warmPart  = (*warm.Warm)(nil)
	_ relayPart = (*relay.Part)(nil)
)
