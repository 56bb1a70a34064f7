package gossip

import (
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns the exchange of heaviest tags (package top, wire type
// 9): at every report the node sends its peers the report Config.Top
// gives, in one datagram of its own sequence, and hands each peer's to
// Config.HeardTop, so that any node can answer for the whole cluster.

// sendTop gives Config.Top the hits the report drained and sends the
// heaviest tags it answers to every peer, when there is something to tell
// or something was told at the report before (so that peers drop a list
// that emptied at once). Called with reportMu held, after the report,
// outside warm start's lock.
func (n *Node) sendTop(now time.Time, drained []Hit) {
	if n.cfg.Top == nil {
		return
	}
	r := n.cfg.Top(now, drained)
	if len(r.Lists) == 0 && !n.toldTop {
		return
	}
	n.toldTop = len(r.Lists) > 0
	var packets, bytes uint64
	_, err := n.enc.EncodeTop(now, r, func(pkt []byte) error {
		if err := n.sendOwn(now)(pkt); err != nil {
			return err
		}
		packets++
		bytes += uint64(len(pkt))
		return nil
	})
	n.countSent(packets, bytes, 0, err != nil)
	if err != nil {
		n.log.Debug("heaviest tags not sent", "err", err)
	}
}

// receiveTop hands a peer's heaviest tags, accepted in its sequence, to
// Config.HeardTop.
func (n *Node) receiveTop(msg wire.Message, p transport.Packet) {
	if n.cfg.HeardTop != nil && msg.Top != nil {
		n.cfg.HeardTop(msg.Node, p.At, *msg.Top)
	}
}
