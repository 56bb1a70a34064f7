package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// owner is the design where each tag has an owner (a hash over the
// nodes): a node sends its hits of a tag to the owner only; the owner,
// whose bucket then counts every node's hits, sends the tags below half
// their burst, with their level (as a snapshot answer), back to the nodes
// that reported them, which take the lower bucket.
type owner struct {
	s         *sim
	reporters []map[string]map[int]bool // per node: who reported which owned tag since its last report
	byOwner   map[int][]bucket.Hit
}

func newOwner(s *sim) design {
	o := &owner{s: s, reporters: make([]map[string]map[int]bool, len(s.nodes)), byOwner: map[int][]bucket.Hit{}}
	for i := range o.reporters {
		o.reporters[i] = map[string]map[int]bool{}
	}
	return o
}

// ownerOf is the node that owns key: FNV-1a over the nodes.
func ownerOf(key string, nodes int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int(h % uint64(nodes))
}

func (o *owner) fail() {}

// report sends the drained hits to each tag's owner (its own tags stay
// here: its bucket already counts them), and, for the tags it owns that
// were served or reported since its last report, the levels of those below
// half their burst to the nodes that reported them.
func (o *owner) report(self int, now time.Time) {
	s, n := o.s, o.s.nodes[self]
	clear(o.byOwner)
	for _, h := range s.drain(self) {
		ow := ownerOf(h.Key, len(s.nodes))
		if ow == self {
			if o.reporters[self][h.Key] == nil {
				o.reporters[self][h.Key] = map[int]bool{}
			}
			continue
		}
		o.byOwner[ow] = append(o.byOwner[ow], h)
	}
	for _, ow := range slices.Sorted(maps.Keys(o.byOwner)) {
		s.send(self, ow, kindReport, o.byOwner[ow])
	}
	updates := map[int][]wire.Level{}
	for _, key := range slices.Sorted(maps.Keys(o.reporters[self])) {
		st, err := n.table.Peek(now, key)
		if err == nil && st.Tokens < float64(s.cfg.Burst)/2 {
			for to := range o.reporters[self][key] {
				updates[to] = append(updates[to], wire.Level{Key: []byte(key), Tokens: st.Tokens})
			}
		}
	}
	clear(o.reporters[self])
	for _, to := range slices.Sorted(maps.Keys(updates)) {
		gl := updates[to]
		for len(gl) > 0 {
			size := 0
			packed, _, _ := n.enc.EncodeSnapshot(now, uint64(to)+1, gl, true, func(pkt []byte) error {
				size = len(pkt)
				return nil
			})
			if packed == 0 {
				break
			}
			n.sentBytes += size
			n.sentN++
			d := &datagram{kind: kindLevels, from: self, to: to, bytes: size, levels: make([]bucket.Level, packed)}
			for k := range packed {
				d.levels[k] = gl[k]
			}
			s.sending = append(s.sending, d)
			gl = gl[packed:]
		}
	}
}

func (o *owner) receive(j int, d *datagram, now time.Time) {
	n := o.s.nodes[j]
	if len(d.levels) > 0 {
		n.table.Merge(now, 0, d.levels)
		n.remote += len(d.levels)
	}
	if len(d.hits) > 0 {
		apply(n, now, d.hits)
		for _, h := range d.hits {
			r := o.reporters[j][h.Key]
			if r == nil {
				r = map[int]bool{}
				o.reporters[j][h.Key] = r
			}
			r[d.from] = true
		}
	}
}
