package bucket

import "sort"

// prefixIndex finds the policy with the longest prefix of a tag in time
// that depends on the tag, never on the number of policies: a byte trie
// walked from the tag's first byte, stopping at the first byte no prefix
// continues with. A tag the default policy takes, with no prefix policy
// sharing its first byte, costs one step.
//
// The trie is flat: node i's children are edges[nodes[i].first :
// nodes[i].first+nodes[i].n], sorted by byte. It is built once per policy
// set and only read after, so it is safe for concurrent use.
type prefixIndex struct {
	nodes []trieNode
	edges []trieEdge
}

type trieNode struct {
	first  uint32 // index of the first child edge
	n      uint16 // child edges
	policy uint16 // the policy whose prefix ends here; 0 for none
}

type trieEdge struct {
	b    byte
	next uint32 // child node
}

// newPrefixIndex indexes the prefixes of set[1:] (set[0], the default,
// has none).
func newPrefixIndex(set policySet) *prefixIndex {
	// Build a pointer trie, then lay it out flat, children in byte order.
	type node struct {
		policy int
		kids   map[byte]*node
	}
	root := &node{}
	for i := 1; i < len(set); i++ {
		n := root
		for _, b := range []byte(set[i].Prefix) {
			next := n.kids[b]
			if next == nil {
				if n.kids == nil {
					n.kids = map[byte]*node{}
				}
				next = &node{}
				n.kids[b] = next
			}
			n = next
		}
		n.policy = i
	}
	x := &prefixIndex{}
	var place func(n *node) uint32
	place = func(n *node) uint32 {
		id := uint32(len(x.nodes))
		x.nodes = append(x.nodes, trieNode{policy: uint16(n.policy)})
		keys := make([]byte, 0, len(n.kids))
		for b := range n.kids {
			keys = append(keys, b)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		first := uint32(len(x.edges))
		x.nodes[id].first, x.nodes[id].n = first, uint16(len(keys))
		for _, b := range keys {
			x.edges = append(x.edges, trieEdge{b: b})
		}
		for i, b := range keys {
			x.edges[first+uint32(i)].next = place(n.kids[b])
		}
		return id
	}
	place(root)
	return x
}

// lookup returns the policy of the longest prefix of tag in the index, or
// 0 when none is.
func lookup[T string | []byte](x *prefixIndex, tag T) int {
	best, n := 0, &x.nodes[0]
	for i := 0; i < len(tag) && n.n > 0; i++ {
		edges := x.edges[n.first : n.first+uint32(n.n)]
		b := tag[i]
		lo, hi := 0, len(edges)
		for lo < hi { // the first edge with a byte >= b
			m := int(uint(lo+hi) >> 1)
			if edges[m].b < b {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo == len(edges) || edges[lo].b != b {
			break
		}
		n = &x.nodes[edges[lo].next]
		if n.policy != 0 {
			best = int(n.policy)
		}
	}
	return best
}
