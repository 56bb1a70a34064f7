// Package topk finds the heaviest keys of a stream in a fixed amount of
// memory: the Space-Saving algorithm (Metwally, Agrawal and El Abbadi,
// 2005) over k counters.
//
// A Sketch of k counters that has counted a stream of total N keeps every
// key whose count exceeds N/k, and reports each key it keeps with a count
// that is never below the key's true count and at most Err above it, Err
// never more than N/k. Its memory is k counters and their keys, whatever
// the number of distinct keys: it does not grow with the stream. Adding a
// key costs a hash, a probe of a small open-addressed index and, when the
// key is new to a full sketch, replacing the smallest counter (O(log k));
// it does not allocate once every counter holds a key as long as the new
// one, Reset included. A caller that has hashed the key already adds it
// with AddHash and the sketch does not hash it again.
//
// A filtered sketch (NewFiltered: Filtered Space-Saving, Homem and
// Carvalho, 2010) adds a small array of counters that a key not held
// counts in, by its hash, until its counter passes the smallest held
// count: only then does it take the smallest counter over. The many
// light keys of a flood, which would each replace the smallest counter,
// then mostly cost a probe and an increment, with the same guarantees.
//
// Sketches merge (Merge, MergeSummaries): the merge of sketches of streams
// A and B holds, with the same guarantee, the heavy keys of A and B
// together, its error the sum of theirs, so a cluster's heaviest keys are
// the merge of its nodes'. A Summary is what travels: a sketch's heaviest
// keys with the stream's total and the most any key left out counted.
package topk

import (
	"bytes"
	"hash/maphash"
	"math"
	"slices"
	"strings"
)

// Item is a key the sketch keeps, with its count: the true count is at
// most Count and at least Count-Err.
type Item struct {
	Key   string
	Count uint64
	Err   uint64
}

// counter is one of the k counters: a key, its count and the count it
// took over when it replaced another key (its error).
type counter struct {
	key   []byte
	hash  uint64 // of key, to find its slot again without hashing it
	count uint64
	err   uint64
	slot  int32 // its place in the index
}

// Sketch is a Space-Saving summary of k counters. The zero value is not
// usable: see New. Not safe for concurrent use: give each writer its own
// and Merge them to read.
type Sketch struct {
	// What adding a key not held reads comes first.
	index []uint64 // open addressing: hash>>32 <<32 | counter number + 1; 0 for empty
	mask  uint64
	min   uint64 // the smallest count held, the heap's root's
	total uint64
	// filter, for a filtered sketch: every key not held has counted at
	// most filter[its hash>>32 & fmask], and fmax is the largest.
	filter []uint64
	fmask  uint64
	fmax   uint64

	cs   []counter
	heap []int32 // counter numbers, a min-heap on count
	pos  []int32 // pos[c] is counter c's place in heap
	seed maphash.Seed
}

// New returns an empty sketch of k counters, k at least 1.
func New(k int) *Sketch {
	k = max(k, 1)
	n := 1
	for n < 2*k {
		n *= 2
	}
	return &Sketch{seed: maphash.MakeSeed(), cs: make([]counter, 0, k), heap: make([]int32, 0, k),
		pos: make([]int32, 0, k), index: make([]uint64, n), mask: uint64(n - 1)}
}

// NewFiltered returns an empty filtered sketch of k counters, k at least
// 1, and at least m filter counters (a power of two, 8 bytes each). More
// filter counters let fewer light keys reach the smallest count and take
// a counter over: m of 4k to 16k suit most streams.
func NewFiltered(k, m int) *Sketch {
	s := New(k)
	n := 1
	for n < m {
		n *= 2
	}
	s.filter, s.fmask = make([]uint64, n), uint64(n-1)
	return s
}

// K is how many counters the sketch has.
func (s *Sketch) K() int { return cap(s.cs) }

// Total is the sum of every count added.
func (s *Sketch) Total() uint64 { return s.total }

// Bound is the most any reported count may exceed the true one, and the
// least count a key must have to be sure to be kept: the total over k.
func (s *Sketch) Bound() uint64 { return s.total / uint64(s.K()) }

// Floor is the most a key the sketch does not hold may have counted: the
// smallest count it holds once full (at most Bound), 0 before; for a
// filtered sketch, the largest filter counter, at most that.
func (s *Sketch) Floor() uint64 {
	if len(s.cs) < cap(s.cs) {
		return 0
	}
	if s.filter != nil {
		return s.fmax
	}
	return s.min
}

// Add counts n more of key. A key is compared by its bytes; the sketch
// copies it and does not retain key.
func (s *Sketch) Add(key []byte, n uint64) { s.AddHash(maphash.Bytes(s.seed, key), key, n) }

// AddHash is Add for a key the caller has hashed already: h must be the
// same for equal keys and spread over its low bits (a maphash is). A
// sketch takes all its keys through Add or all through AddHash with one
// hash function: the same key under two hashes would be two keys.
func (s *Sketch) AddHash(h uint64, key []byte, n uint64) {
	if n == 0 {
		return
	}
	s.total = add(s.total, n)
	slot, c := s.lookup(h, key)
	if c >= 0 {
		s.cs[c].count = add(s.cs[c].count, n)
		if i := int(s.pos[c]); i == 0 {
			s.down(0)
			s.min = s.cs[s.heap[0]].count
		} else {
			s.down(i)
		}
		return
	}
	if len(s.cs) < cap(s.cs) {
		// A counter past the length may hold a key buffer from before
		// Reset: reuse it.
		c = int32(len(s.cs))
		s.cs = s.cs[:c+1]
		m := &s.cs[c]
		m.key = append(m.key[:0], key...)
		m.hash, m.count, m.err, m.slot = h, n, 0, int32(slot)
		s.index[slot] = entry(h, c)
		s.pos = append(s.pos, int32(len(s.heap)))
		s.heap = append(s.heap, c)
		s.up(len(s.heap) - 1)
		s.min = s.cs[s.heap[0]].count
		return
	}
	// Full: the smallest counter takes the new key over, keeping its
	// count as the new key's error. In a filtered sketch, the key counts
	// in its filter counter until that passes the smallest count; it
	// then takes the smallest counter over with that counter as its
	// error, and the key it replaces leaves its count in its own. So no
	// filter counter is above the smallest count, and every key not held
	// counted at most its filter counter.
	err := s.min
	if s.filter != nil {
		f := &s.filter[h>>32&s.fmask]
		if v := add(*f, n); v <= s.min {
			*f = v
			s.fmax = max(s.fmax, v)
			return
		}
		err = *f
	}
	c = s.heap[0]
	m := &s.cs[c]
	if s.filter != nil {
		g := &s.filter[m.hash>>32&s.fmask]
		*g = max(*g, m.count)
		s.fmax = max(s.fmax, *g)
	}
	s.remove(int(m.slot))
	slot, _ = s.lookup(h, key) // the removal may have moved the free slot
	m.key = append(m.key[:0], key...)
	m.hash = h
	m.err = err
	m.count = add(err, n)
	m.slot = int32(slot)
	s.index[slot] = entry(h, c)
	s.down(0)
	s.min = s.cs[s.heap[0]].count
}

// add is a+b, saturating at the largest uint64 rather than wrapping.
func add(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// entry is the index entry of counter c, whose key hashes to h.
func entry(h uint64, c int32) uint64 { return h>>32<<32 | uint64(c+1) }

// lookup returns key's slot in the index and its counter, or the free
// slot where it would go and -1.
func (s *Sketch) lookup(h uint64, key []byte) (int, int32) {
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		e := s.index[i]
		if e == 0 {
			return int(i), -1
		}
		// The hash's high half in the entry spares reading the counters
		// of other keys.
		if e>>32 == h>>32 && bytes.Equal(s.cs[int32(e)-1].key, key) {
			return int(i), int32(e) - 1
		}
	}
}

// remove frees slot i of the index, moving back the entries after it that
// would no longer be found (linear probing's deletion).
func (s *Sketch) remove(i int) {
	s.index[i] = 0
	j := uint64(i)
	for {
		j = (j + 1) & s.mask
		e := s.index[j]
		if e == 0 {
			return
		}
		c := int32(e) - 1
		home := s.cs[c].hash & s.mask
		// Move e back to i if its home is not in (i, j], cyclically.
		if (j > uint64(i) && (home <= uint64(i) || home > j)) || (j < uint64(i) && home <= uint64(i) && home > j) {
			s.index[i] = e
			s.cs[c].slot = int32(i)
			s.index[j] = 0
			i = int(j)
		}
	}
}

// less orders the heap: smaller counts first.
func (s *Sketch) less(a, b int) bool { return s.cs[s.heap[a]].count < s.cs[s.heap[b]].count }

func (s *Sketch) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.pos[s.heap[a]], s.pos[s.heap[b]] = int32(a), int32(b)
}

func (s *Sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch) down(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s.heap) && s.less(l, m) {
			m = l
		}
		if r < len(s.heap) && s.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// Top returns the n keys with the highest counts, highest first (ties by
// key), at most K. It allocates the result.
func (s *Sketch) Top(n int) []Item {
	items := make([]Item, 0, len(s.cs))
	for _, c := range s.cs {
		items = append(items, Item{Key: string(c.key), Count: c.count, Err: c.err})
	}
	SortItems(items)
	return items[:min(n, len(items))]
}

// Reset empties the sketch, keeping its memory.
func (s *Sketch) Reset() {
	clear(s.index)
	for i := range s.cs {
		s.cs[i].key = s.cs[i].key[:0]
	}
	s.cs, s.heap, s.pos, s.total, s.min = s.cs[:0], s.heap[:0], s.pos[:0], 0, 0
	clear(s.filter)
	s.fmax = 0
}

// Merge returns the k heaviest of the items of several summaries (each
// from Top, or received from a peer), their counts and errors summed per
// key. A key a summary does not hold may still have counted up to that
// summary's floor there (Floor; for a list cut short, its smallest
// count), so floors[i] is added to the count and the error of every key
// lists[i] lacks: the merge keeps the guarantee that a key's true count
// is at most Count and at least Count-Err. Sums saturate at the largest
// uint64.
func Merge(k int, lists [][]Item, floors []uint64) []Item {
	items := merge(lists, floors)
	return items[:min(max(k, 0), len(items))]
}

// merge is Merge without the cut: every key of lists, heaviest first.
func merge(lists [][]Item, floors []uint64) []Item {
	sum := map[string]int{} // key → its place in items
	var items []Item
	for _, l := range lists {
		for _, it := range l {
			i, ok := sum[it.Key]
			if !ok {
				i = len(items)
				sum[it.Key] = i
				items = append(items, Item{Key: it.Key})
			}
			items[i].Count = add(items[i].Count, it.Count)
			items[i].Err = add(items[i].Err, it.Err)
		}
	}
	held := make([]bool, len(items))
	for i, l := range lists {
		if floors[i] == 0 {
			continue
		}
		clear(held)
		for _, it := range l {
			held[sum[it.Key]] = true
		}
		for j := range items {
			if !held[j] {
				items[j].Count = add(items[j].Count, floors[i])
				items[j].Err = add(items[j].Err, floors[i])
			}
		}
	}
	SortItems(items)
	return items
}

// Summary is the heaviest keys of a stream and what bounds the others:
// what a sketch reports, cut to a length, and what travels between nodes
// and merges. A key in Items counted at most Count and at least
// Count-Err; a key not in Items counted at most Floor. The zero value is
// the summary of an empty stream.
type Summary struct {
	Items []Item // heaviest first
	Total uint64 // the stream's total
	Floor uint64
}

// Summary returns the sketch's n heaviest keys, its total and its floor,
// raised to the count of the heaviest key left out.
func (s *Sketch) Summary(n int) Summary {
	return Summary{Items: s.Top(s.K()), Total: s.total, Floor: s.Floor()}.Cut(n)
}

// Cut returns the summary's n heaviest items, the floor raised to the
// count of the heaviest item left out (Items must be heaviest first). It
// shares Items' array.
func (s Summary) Cut(n int) Summary {
	n = max(n, 0)
	if len(s.Items) > n {
		s.Floor = max(s.Floor, s.Items[n].Count)
		s.Items = s.Items[:n:n]
	}
	return s
}

// MergeSummaries merges summaries of several streams into the summary of
// the streams together, at most k items (see Merge): totals add, and a
// key none holds counted at most the sum of their floors. It allocates
// the result, sharing nothing with sums.
func MergeSummaries(k int, sums ...Summary) Summary {
	lists := make([][]Item, len(sums))
	floors := make([]uint64, len(sums))
	var m Summary
	for i, s := range sums {
		lists[i], floors[i] = s.Items, s.Floor
		m.Total = add(m.Total, s.Total)
		m.Floor = add(m.Floor, s.Floor)
	}
	m.Items = merge(lists, floors)
	return m.Cut(k)
}

// SortItems orders items by count, highest first, then by key: the order
// of every list this package returns.
func SortItems(items []Item) {
	slices.SortFunc(items, func(a, b Item) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
}
