package gossip

import (
	"log/slog"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// This file owns what the node's parts may ask of it (warm.Host and
// relay.Host): who it is, its settings now, sending in its own sequence,
// its counters, its table.

// host is a node as its parts see it.
type host struct{ n *Node }

var (
	_ warm.Host  = host{}
	_ relay.Host = host{}
)

func (h host) ID() uint64                      { return h.n.id }
func (h host) Configure(e *wire.Encoder)       { h.n.configure(e) }
func (h host) Transport() transport.Transport  { return h.n.transport }
func (h host) Logger() *slog.Logger            { return h.n.log }
func (h host) SilentAfter() time.Duration      { return h.n.silentAfter() }
func (h host) Apply(now time.Time, hits []Hit) { h.n.cfg.Apply(now, hits) }
func (h host) Kick()                           { h.n.kickLoop() }

func (h host) Interval() time.Duration {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.n.cfg.Interval
}

// Lock and Unlock are warm start's lock, which relaying takes before its
// own when an aggregate brings this node's hits back.
func (h host) Lock()   { h.n.warm.Lock() }
func (h host) Unlock() { h.n.warm.Unlock() }

// Known says a relay's aggregate brought hits of this node's back.
func (h host) Known(hits []Hit) { h.n.warm.Known(hits, false) }

// Request sends a snapshot request in the node's own sequence, under the
// report's lock, so no report goes between it and sent.
func (h host) Request(now time.Time, sent func(error)) {
	n := h.n
	n.reportMu.Lock()
	defer n.reportMu.Unlock()
	n.configure(&n.enc)
	sent(n.enc.EncodeRequest(now, n.sendOwn(now)))
}

// SendOwn sends hits as datagrams of type t in the node's own sequence.
// Called from the report, which holds reportMu.
func (h host) SendOwn(now time.Time, t wire.MsgType, hits []Hit) (packets, bytes uint64, err error) {
	return relay.Encode(&h.n.enc, now, t, hits, h.n.sendOwn(now))
}

// Keep keeps pkt, sent at now in stream s (to the relay to, for
// wire.StreamToRelay), for repair.
func (h host) Keep(now time.Time, s wire.Stream, to uint64, pkt []byte) {
	h.n.sent.keep(streamKey{stream: s, to: to}, pkt, now)
}

func (h host) SendTo(pkt []byte, addr string) error {
	u, ok := h.n.transport.(transport.Unicaster)
	if !ok {
		return transport.ErrNoUnicast
	}
	return u.SendTo(pkt, addr)
}

func (h host) CanReply() bool {
	_, ok := h.n.transport.(transport.Unicaster)
	return ok
}

// Heard notes an answer's sender as a peer heard, as a report would.
func (h host) Heard(node uint64, p transport.Packet) {
	n := h.n
	n.mu.Lock()
	pr, _ := n.peers.For(node, p.From, p.At)
	pr.Info.Addr, pr.Info.LastHeard, pr.Info.Silent = p.From, p.At, false
	n.mu.Unlock()
}

func (h host) SendFailed() {
	h.n.mu.Lock()
	h.n.stats.SendErrors++
	h.n.mu.Unlock()
}

func (h host) CountSent(packets, bytes uint64, tags int, failed bool) {
	h.n.countSent(packets, bytes, tags, failed)
}

func (h host) CountReceived(bytes, tags int) {
	h.n.mu.Lock()
	h.n.stats.PacketsReceived++
	h.n.stats.BytesReceived += uint64(bytes)
	h.n.stats.TagsReceived += uint64(tags)
	h.n.mu.Unlock()
}

func (h host) CountDuplicate() {
	h.n.mu.Lock()
	h.n.stats.DroppedDuplicate++
	h.n.mu.Unlock()
}
