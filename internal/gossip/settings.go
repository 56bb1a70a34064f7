package gossip

import (
	"fmt"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/limits"
)

// This file owns a node's settings: kept once, in Node.cfg, checked
// against the wire format's limits, changed by Update on a reload, and
// handed to each encoder when it encodes.

// configure sets e's settings (datagram size, key, fingerprint) to the
// node's current ones, which Config and Update keep in one place.
func (n *Node) configure(e *wire.Encoder) {
	n.mu.Lock()
	e.MaxPacket, e.Key, e.Fingerprint = n.cfg.MaxPacket, n.cfg.Key, n.cfg.Fingerprint
	n.mu.Unlock()
}

// checkMaxPacket checks a datagram size against the wire format's limits.
func checkMaxPacket(size int) error {
	if size < wire.MinPacket || size > wire.MaxPacket {
		return fmt.Errorf("gossip: max packet must be between %d and %d, got %d", wire.MinPacket, wire.MaxPacket, size)
	}
	return nil
}

// Update is what a reload may change on a running node.
type Update struct {
	Interval    time.Duration
	MaxPacket   int
	Key         []byte
	Fingerprint uint64
}

// Update applies new settings from the next report on, keeping the node's
// id and sequence numbers, so peers see the same node carry on.
func (n *Node) Update(u Update) error {
	if u.Interval <= 0 {
		return fmt.Errorf("gossip: interval must be > 0, got %v", u.Interval)
	}
	if err := checkMaxPacket(u.MaxPacket); err != nil {
		return err
	}
	n.mu.Lock()
	n.cfg.Interval, n.cfg.MaxPacket, n.cfg.Key, n.cfg.Fingerprint = u.Interval, u.MaxPacket, u.Key, u.Fingerprint
	n.cfg.SilentAfter = silentAfter(u.Interval)
	silent := n.cfg.SilentAfter
	n.mu.Unlock()
	if d := n.cfg.Discovery; d != nil {
		d.SilentAfter(silent)
	}
	n.relay.SetEvery(u.Interval, silentAfter(u.Interval))
	select {
	case <-n.retick: // replace an update the loop has not taken yet
	default:
	}
	n.retick <- u.Interval
	return nil
}

// SilentAfter is how long a peer may go unheard before it is called
// silent, by default: three intervals, and at least one second more than
// one.
func SilentAfter(interval time.Duration) time.Duration { return silentAfter(interval) }

func silentAfter(interval time.Duration) time.Duration { return limits.SilentAfter(interval) }
