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
// one.
//
// Sketches merge (Merge): the merge of sketches of streams A and B holds,
// with the same guarantee, the heavy keys of A and B together, its error
// the sum of theirs, so a cluster's heaviest keys are the merge of its
// nodes'.
package topk

import (
	"bytes"
	"hash/maphash"
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
	count uint64
	err   uint64
	slot  int32 // its place in the index
}

// Sketch is a Space-Saving summary of k counters. The zero value is not
// usable: see New. Not safe for concurrent use: give each writer its own
// and Merge them to read.
type Sketch struct {
	seed  maphash.Seed
	heap  []int32 // counter numbers, a min-heap on count
	pos   []int32 // pos[c] is counter c's place in heap
	cs    []counter
	index []int32 // open addressing: counter number + 1, 0 for empty
	mask  uint64
	total uint64
}

// New returns an empty sketch of k counters, k at least 1.
func New(k int) *Sketch {
	k = max(k, 1)
	n := 1
	for n < 2*k {
		n *= 2
	}
	return &Sketch{seed: maphash.MakeSeed(), cs: make([]counter, 0, k), heap: make([]int32, 0, k),
		pos: make([]int32, 0, k), index: make([]int32, n), mask: uint64(n - 1)}
}

// K is how many counters the sketch has.
func (s *Sketch) K() int { return cap(s.cs) }

// Total is the sum of every count added.
func (s *Sketch) Total() uint64 { return s.total }

// Bound is the most any reported count may exceed the true one, and the
// least count a key must have to be sure to be kept: the total over k.
func (s *Sketch) Bound() uint64 { return s.total / uint64(s.K()) }

// Floor is the most a key the sketch does not hold may have counted: the
// smallest count it holds once full (at most Bound), 0 before.
func (s *Sketch) Floor() uint64 {
	if len(s.cs) < cap(s.cs) {
		return 0
	}
	return s.cs[s.heap[0]].count
}

// Add counts n more of key. A key is compared by its bytes; the sketch
// copies it and does not retain key.
func (s *Sketch) Add(key []byte, n uint64) {
	if n == 0 {
		return
	}
	s.total += n
	h := maphash.Bytes(s.seed, key)
	slot, c := s.lookup(h, key)
	if c >= 0 {
		s.cs[c].count += n
		s.down(int(s.pos[c]))
		return
	}
	if len(s.cs) < cap(s.cs) {
		c = int32(len(s.cs))
		s.cs = append(s.cs, counter{key: append([]byte(nil), key...), count: n, slot: int32(slot)})
		s.index[slot] = c + 1
		s.pos = append(s.pos, int32(len(s.heap)))
		s.heap = append(s.heap, c)
		s.up(len(s.heap) - 1)
		return
	}
	// Full: the smallest counter takes the new key over, keeping its
	// count as the new key's error.
	c = s.heap[0]
	m := &s.cs[c]
	s.remove(int(m.slot))
	slot, _ = s.lookup(h, key) // the removal may have moved the free slot
	m.key = append(m.key[:0], key...)
	m.err = m.count
	m.count += n
	m.slot = int32(slot)
	s.index[slot] = c + 1
	s.down(0)
}

// lookup returns key's slot in the index and its counter, or the free
// slot where it would go and -1.
func (s *Sketch) lookup(h uint64, key []byte) (int, int32) {
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		e := s.index[i]
		if e == 0 {
			return int(i), -1
		}
		if bytes.Equal(s.cs[e-1].key, key) {
			return int(i), e - 1
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
		home := maphash.Bytes(s.seed, s.cs[e-1].key) & s.mask
		// Move e back to i if its home is not in (i, j], cyclically.
		if (j > uint64(i) && (home <= uint64(i) || home > j)) || (j < uint64(i) && home <= uint64(i) && home > j) {
			s.index[i] = e
			s.cs[e-1].slot = int32(i)
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
	sortItems(items)
	return items[:min(n, len(items))]
}

// Reset empties the sketch, keeping its memory.
func (s *Sketch) Reset() {
	clear(s.index)
	for i := range s.cs {
		s.cs[i].key = s.cs[i].key[:0]
	}
	s.cs, s.heap, s.pos, s.total = s.cs[:0], s.heap[:0], s.pos[:0], 0
}

// Merge returns the k heaviest of the items of several summaries (each
// from Top, or received from a peer), their counts and errors summed per
// key. A key a summary does not hold may still have counted up to that
// summary's floor there (Floor; for a list cut short, its smallest
// count), so floors[i] is added to the count and the error of every key
// lists[i] lacks: the merge keeps the guarantee that a key's true count
// is at most Count and at least Count-Err.
func Merge(k int, lists [][]Item, floors []uint64) []Item {
	sum := map[string]*Item{}
	var keys []string
	for _, l := range lists {
		for _, it := range l {
			m := sum[it.Key]
			if m == nil {
				m = &Item{Key: it.Key}
				sum[it.Key] = m
				keys = append(keys, it.Key)
			}
			m.Count += it.Count
			m.Err += it.Err
		}
	}
	for i, l := range lists {
		held := make(map[string]bool, len(l))
		for _, it := range l {
			held[it.Key] = true
		}
		for _, key := range keys {
			if !held[key] {
				sum[key].Count += floors[i]
				sum[key].Err += floors[i]
			}
		}
	}
	items := make([]Item, 0, len(keys))
	for _, key := range keys {
		items = append(items, *sum[key])
	}
	sortItems(items)
	return items[:min(k, len(items))]
}

// sortItems orders items by count, highest first, then by key.
func sortItems(items []Item) {
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
