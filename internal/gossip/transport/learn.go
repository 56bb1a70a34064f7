package transport

import (
	"net/netip"
	"slices"
	"time"
)

// This file owns the peers a unicast transport learns: the methods
// through which package gossip's node, as its Discovery, tells it whom to
// learn, and how each peer it sends to was found.

// How a peer was found, as UnicastTransport.Found and package gossip's
// PeerInfo.Found say.
const (
	FoundConfigured = "configured" // an address in gossip.peers
	FoundResolved   = "resolved"   // an address a name in gossip.peers resolved to
	FoundLearned    = "learned"    // heard from, or told of by a peer, and sent to since
	FoundMulticast  = "multicast"  // heard on the multicast group
)

// learning is what a unicast transport learned. Guarded by the
// transport's resolveMu.
type learning struct {
	max     int           // most peers learned; 0 learns none
	silent  time.Duration // a learned peer unheard for this long is dropped
	peers   map[netip.AddrPort]*learned
	self    map[netip.AddrPort]bool // our own addresses, heard back
	version uint64                  // changes whenever the addresses sent to do
	stats   DiscoveryStats
}

// learned is one peer learned.
type learned struct {
	since time.Time // when learned, or last heard
	heard bool      // heard from itself, not only told of
}

// DiscoveryStats count what a unicast transport learned. The zero value
// counts nothing.
type DiscoveryStats struct {
	Learned   int    // peers learned and sent to now
	Added     uint64 // peers learned over the transport's life
	Forgotten uint64 // learned peers dropped, unheard for the silence timeout
	Refused   uint64 // peers not learned because max_peers were
}

// sorted returns the learned addresses in order, so Send's order is
// stable.
func (l *learning) sorted() []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(l.peers))
	for a := range l.peers {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return out
}

// SetLearning sets how many peers the transport learns (0: none, and the
// ones learned are dropped). A reload calls it. How long a learned peer
// may stay unheard is the node's to say (SilentAfter).
func (t *UnicastTransport) SetLearning(max int) {
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	t.learn.max = max
	if t.learn.peers == nil {
		t.learn.peers = map[netip.AddrPort]*learned{}
		t.learn.self = map[netip.AddrPort]bool{}
	}
	if len(t.learn.peers) > max {
		for _, a := range t.learn.sorted()[max:] {
			delete(t.learn.peers, a)
			t.learn.stats.Forgotten++
		}
		t.publish()
	}
}

// Heard learns addr, or keeps it, after an authenticated report from it.
func (t *UnicastTransport) Heard(addr string, now time.Time) { t.note(addr, now, true) }

// Told learns addr, named by a peer as one it sends to. It is dropped
// after the silence timeout unless heard from itself meanwhile.
func (t *UnicastTransport) Told(addr string, now time.Time) { t.note(addr, now, false) }

func (t *UnicastTransport) note(addr string, now time.Time, heard bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
		return
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	t.prune(now)
	if t.learn.max == 0 || t.learn.self[ap] || t.configured(ap) != "" {
		return
	}
	if l := t.learn.peers[ap]; l != nil {
		if heard {
			l.since, l.heard = now, true
		}
		return
	}
	if len(t.learn.peers) >= t.learn.max {
		t.learn.stats.Refused++
		return
	}
	t.learn.peers[ap] = &learned{since: now, heard: heard}
	t.learn.stats.Added++
	t.log.Info("gossip: peer learned", "peer", ap.String(), "heard", heard)
	t.publish()
}

// Self stops sending to addr: it is this transport's own.
func (t *UnicastTransport) Self(addr string) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	if t.learn.self == nil || t.learn.self[ap] || len(t.learn.self) >= 16 {
		return
	}
	t.learn.self[ap] = true
	if t.learn.peers[ap] != nil {
		delete(t.learn.peers, ap)
	}
	t.publish()
}

// prune drops the learned peers unheard for the silence timeout. Called
// with resolveMu held.
func (t *UnicastTransport) prune(now time.Time) {
	dropped := false
	for a, l := range t.learn.peers {
		if now.Sub(l.since) > t.learn.silent {
			delete(t.learn.peers, a)
			t.learn.stats.Forgotten++
			dropped = true
			t.log.Info("gossip: learned peer forgotten, silent", "peer", a.String())
		}
	}
	if dropped {
		t.publish()
	}
}

// Advert drops the learned peers silent at now, and returns the addresses
// sent to that peers may learn: configured, resolved, and learned and
// heard from; and their version.
func (t *UnicastTransport) Advert(now time.Time) ([]string, uint64) {
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	t.prune(now)
	var out []string
	for _, p := range t.peers {
		for _, a := range p.addrs {
			out = append(out, a.String())
		}
	}
	for _, a := range t.learn.sorted() {
		if t.learn.peers[a].heard {
			out = append(out, a.String())
		}
	}
	return out, t.learn.version
}

// Found says how addr ("ip:port", a Packet's From) came to be sent to:
// FoundConfigured, FoundResolved, FoundLearned, or "" when it is not.
func (t *UnicastTransport) Found(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ""
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	if f := t.configured(ap); f != "" {
		return f
	}
	if t.learn.peers[ap] != nil {
		return FoundLearned
	}
	return ""
}

// configured says whether ap is a configured peer's address, and how.
// Called with resolveMu held.
func (t *UnicastTransport) configured(ap netip.AddrPort) string {
	for _, p := range t.peers {
		if slices.Contains(p.addrs, ap) {
			if _, err := netip.ParseAddr(p.host); err == nil {
				return FoundConfigured
			}
			return FoundResolved
		}
	}
	return ""
}

// DiscoveryStats returns what the transport learned.
func (t *UnicastTransport) DiscoveryStats() DiscoveryStats {
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	st := t.learn.stats
	st.Learned = len(t.learn.peers)
	return st
}

// SilentAfter sets how long a learned peer may stay unheard: the node's
// silence timeout, which the node gives it.
func (t *UnicastTransport) SilentAfter(d time.Duration) {
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	t.learn.silent = d
}
