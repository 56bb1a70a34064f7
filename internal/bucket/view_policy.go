package bucket

import (
	"encoding/binary"
	"math"
	"strconv"
)

// A policyIndex is the policy block in force as a View read it, checked
// whole, under the policy sequence it was read under. The daemon writes
// a new policy set into the other block and changes the sequence, so
// while the sequence stays the same the block does too: decisions under
// that sequence find their policy from the index without reading the
// block's header and checking it again, and where no policy has a
// prefix, without walking the prefixes.
type policyIndex struct {
	seq          uint32
	pols         []byte // the policies, 32 bytes each
	nodes, edges []byte // the prefix trie: 8 bytes a node, 8 an edge
	flat         bool   // the trie's root has no edges: every tag has policy 0
}

// policy finds tag's policy in the block in force under seq: its 32
// bytes and index, or false when the block does not hold together.
func (v *View) policy(seq uint32, tag []byte) (pol []byte, pi int, ok bool) {
	x := v.index.Load()
	if x == nil || x.seq != seq {
		if x = v.readIndex(seq); x == nil {
			return nil, 0, false
		}
	}
	if x.flat {
		return x.pols[:32], 0, true
	}
	le := binary.LittleEndian
	nb, eb := x.nodes, x.edges
	nodes, edges := uint64(len(nb)/8), uint64(len(eb)/8)
	best, node := 0, uint64(0)
	for i := 0; i < len(tag); i++ {
		nd := nb[8*node:]
		first, cnt := uint64(le.Uint32(nd)), uint64(le.Uint16(nd[4:]))
		if cnt == 0 || first+cnt > edges {
			break
		}
		lo, hi := first, first+cnt
		for lo < hi {
			m := (lo + hi) / 2
			if eb[8*m] < tag[i] {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo == first+cnt || eb[8*lo] != tag[i] {
			break
		}
		if node = uint64(le.Uint32(eb[8*lo+4:])); node >= nodes {
			return nil, 0, false
		}
		if p := int(le.Uint16(nb[8*node+6:])); p != 0 {
			best = p
		}
	}
	if best >= len(x.pols)/32 {
		return nil, 0, false
	}
	return x.pols[32*best : 32*best+32], best, true
}

// readIndex reads the policy block in force under seq, or returns nil
// when it does not hold together or seq is no longer the sequence.
func (v *View) readIndex(seq uint32) *policyIndex {
	le := binary.LittleEndian
	off := v.hdr64(hdrPolicyActive)
	if off > uint64(len(v.ro))-16 {
		return nil
	}
	b := v.ro[off:]
	n, nodes, edges := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[8:]))
	size := 16 + 32*n + 8*nodes + 8*edges
	if n == 0 || nodes == 0 || size > policyBlockMax || size > uint64(len(b)) {
		return nil
	}
	x := &policyIndex{seq: seq, pols: b[16 : 16+32*n]}
	x.nodes = b[16+32*n : 16+32*n+8*nodes]
	x.edges = b[16+32*n+8*nodes : size]
	x.flat = le.Uint16(x.nodes[4:]) == 0
	if v.hdr32(hdrPolicySeq) != seq {
		return nil
	}
	v.index.Store(x)
	return x
}

// PolicyOf returns the policy that made decision d, as the block in
// force states it (name, action, burst, rate, dry run; no prefix), for
// the headers of its answer; ok is false once the policies changed since
// (a reload may have given the index to another policy).
func (v *View) PolicyOf(d Decision) (p Policy, ok bool) {
	if d.seq != v.hdr32(hdrPolicySeq) {
		return Policy{}, false
	}
	return v.Policy(d.Policy)
}

// Policy returns policy pi of the block in force as far as the block
// tells it (name, action, burst, rate, dry run; no prefix). ok is false
// while the daemon rewrites the policies, for an index the block does not
// hold, and for a block that does not hold together. A block without
// names, or whose names run past it, gives the default's name, "default",
// and the index for the others.
func (v *View) Policy(pi int) (p Policy, ok bool) {
	le := binary.LittleEndian
	seq := v.hdr32(hdrPolicySeq)
	off := v.hdr64(hdrPolicyActive)
	if seq&1 != 0 || pi < 0 || off > uint64(len(v.ro))-16 {
		return Policy{}, false
	}
	b := v.ro[off:]
	n, nodes, edges := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[8:]))
	names := uint64(le.Uint32(b[12:]))
	size := 16 + 32*n + 8*nodes + 8*edges
	if uint64(pi) >= n || size > policyBlockMax || size > uint64(len(b)) {
		return Policy{}, false
	}
	if size+names > uint64(len(b)) {
		names = 0
	}
	pol := b[16+32*pi:]
	p = Policy{Action: Action(pol[0]), DryRun: pol[1] != 0, Burst: int(le.Uint32(pol[4:])),
		Rate: math.Float64frombits(le.Uint64(pol[24:]))}
	nb := b[size : size+names]
	for i := 0; len(nb) >= 2; i++ {
		k := int(le.Uint16(nb))
		if k > len(nb)-2 {
			break
		}
		if i == pi {
			p.Name = string(nb[2 : 2+k])
			break
		}
		nb = nb[2+k:]
	}
	if p.Name == "" {
		p.Name = "default"
		if pi > 0 {
			p.Name = strconv.Itoa(pi)
		}
	}
	if v.hdr32(hdrPolicySeq) != seq {
		return Policy{}, false
	}
	return p, true
}
