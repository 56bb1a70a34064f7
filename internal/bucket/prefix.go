package bucket

import "sort"

// prefixIndex finds the policy with the longest prefix of a tag in time
// that depends on the tag, never on the number of policies: a byte trie
// walked from the tag's first byte, stopping at the first byte no prefix
// continues with. A tag the default policy takes, with no prefix policy
// sharing its first byte, costs one step.
//
// The trie is flat: node i's children are edges[nodes[i].first :
// nodes[i].first+nodes[i].n], sorted by byte, and the nodes are laid out
// breadth first, so the ones every lookup visits first sit together. It is built once per policy
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
// has none). It builds the trie breadth first from the prefixes in sorted
// order, where the prefixes below a node are a run and the ones below
// each of its children are runs within it: no recursion however long a
// prefix, and memory in proportion to the trie it builds.
func newPrefixIndex(set policySet) *prefixIndex {
	order := make([]int, 0, len(set)-1) // policy indexes, by prefix
	for i := 1; i < len(set); i++ {
		order = append(order, i)
	}
	sort.Slice(order, func(a, b int) bool { return set[order[a]].Prefix < set[order[b]].Prefix })
	prefix := func(k int) string { return set[order[k]].Prefix }

	// Node i of the trie stands for the bytes its prefixes share, depth
	// long: the run [lo, hi) of order.
	type span struct{ lo, hi, depth int }
	spans := []span{{0, len(order), 0}}
	x := &prefixIndex{nodes: []trieNode{{}}}
	for i := 0; i < len(spans); i++ {
		sp := spans[i]
		lo := sp.lo
		if lo < sp.hi && len(prefix(lo)) == sp.depth {
			// The prefix that ends here sorts first in its run.
			x.nodes[i].policy = uint16(order[lo])
			lo++
		}
		x.nodes[i].first = uint32(len(x.edges))
		for lo < sp.hi {
			b := prefix(lo)[sp.depth]
			hi := lo + 1
			for hi < sp.hi && prefix(hi)[sp.depth] == b {
				hi++
			}
			x.edges = append(x.edges, trieEdge{b: b, next: uint32(len(x.nodes))})
			x.nodes = append(x.nodes, trieNode{})
			spans = append(spans, span{lo, hi, sp.depth + 1})
			x.nodes[i].n++
			lo = hi
		}
	}
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
