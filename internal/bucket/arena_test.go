package bucket

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

func TestSizeClass(t *testing.T) {
	cases := []struct{ n, class, size int }{
		{1, 1, 8}, {8, 1, 8}, {9, 2, 16}, {32, 4, 32}, {33, 5, 40},
		{512, 64, 512}, {513, 65, 1024}, {1024, 65, 1024}, {1025, 66, 2048},
		{recordSize(65537), numClasses - 1, 131072},
	}
	for _, c := range cases {
		if class, size := sizeClass(c.n); class != c.class || size != c.size {
			t.Errorf("sizeClass(%d) = %d, %d; want %d, %d", c.n, class, size, c.class, c.size)
		}
	}
	// A 13-byte tag, about an IPv4 address, takes one 32-byte record.
	if _, size := sizeClass(recordSize(13)); size != 32 {
		t.Errorf("a 13-byte key takes %d bytes, want 32", size)
	}
}

func TestArenaReusesFreedRecords(t *testing.T) {
	a := testArena(t)
	keys := map[uint32]string{}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("key-%d", i)
		keys[a.newRecord([]byte(k), int64(i), 3)] = k
	}
	grown := a.bytes
	for ref := range keys {
		a.rec(ref).kill()
		a.release(ref)
	}
	clear(keys)
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("key-%d", 1000+i) // same lengths, same classes
		ref := a.newRecord([]byte(k), 7, 2)
		if _, dup := keys[ref]; dup {
			t.Fatalf("record %d handed out twice", ref)
		}
		keys[ref] = k
	}
	if a.bytes != grown {
		t.Fatalf("arena grew from %d to %d bytes though every record was freed first", grown, a.bytes)
	}
	for ref, k := range keys {
		r := a.rec(ref)
		if string(a.keyOf(ref)) != k || r.tat() != 7 || r.policy() != 2 || r.unreported() != 0 {
			t.Fatalf("record %d: key %q tat %d policy %d, want %q 7 2", ref, a.keyOf(ref), r.tat(), r.policy(), k)
		}
	}
}

func TestArenaLongKeys(t *testing.T) {
	a := testArena(t)
	for _, n := range []int{127, 128, 300, chunkSize, 65537} {
		key := make([]byte, n)
		for i := range key {
			key[i] = byte(i * 7)
		}
		ref := a.newRecord(key, 1, 0)
		if r := a.rec(ref); !r.is(key) || string(a.keyOf(ref)) != string(key) {
			t.Fatalf("key of %d bytes: stored as %d bytes", n, len(a.keyOf(ref)))
		}
		if a.rec(ref).is(key[:n-1]) {
			t.Fatalf("key of %d bytes matches its prefix", n)
		}
	}
}

// TestIndexAgainstMap runs random inserts and deletes on one shard's
// index and arena, checking every key a map says is there, and none
// other, can be found: deletions that shift entries back must not lose
// any.
func TestIndexAgainstMap(t *testing.T) {
	var s shard
	tb := newTestTable(t, Policy{Rate: 1, Burst: 1}, 1)
	s.init(0, tb.reg, 1<<26, 1, tb.seed, *tb.policies.Load(), new(atomic.Int64))
	model := map[string]bool{}
	rng := rand.New(rand.NewPCG(3, 4))
	hash := func(k string) uint64 { return hashString(tb.seed, k) }
	for step := 0; step < 20000; step++ {
		k := fmt.Sprintf("k%d", rng.IntN(3000))
		h := hash(k)
		pos, ref := s.index.lookup(&s.arena, h, []byte(k))
		if (ref != 0) != model[k] {
			t.Fatalf("step %d: %q found=%v, model says %v", step, k, ref != 0, model[k])
		}
		if ref == 0 && rng.IntN(3) > 0 {
			if s.index.full() {
				s.index.grow()
				pos, _ = s.index.lookup(&s.arena, h, []byte(k))
			}
			s.index.put(pos, h, s.arena.newRecord([]byte(k), 0, 0))
			model[k] = true
		} else if ref != 0 {
			s.arena.rec(ref).kill()
			s.removeAt(pos)
			delete(model, k)
		}
		if s.index.count != len(model) {
			t.Fatalf("step %d: index counts %d, model %d", step, s.index.count, len(model))
		}
	}
	for k := range model {
		if _, ref := s.index.lookup(&s.arena, hash(k), []byte(k)); ref == 0 {
			t.Fatalf("%q lost", k)
		}
	}
}

// TestArenaBoundedUnderChurn floods a capped table with distinct random
// tags: the records of evicted tags are reused, so the arena stays about
// the size of a full table. (BenchmarkFlood does the same with ten
// million tags.)
func TestArenaBoundedUnderChurn(t *testing.T) {
	const maxTags, flood = 2500, 50000
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, maxTags)
	perTag := floodTable(tb, flood, 1)
	st := tb.Stats()
	if st.Tags > maxTags || st.Evictions < flood-maxTags {
		t.Fatalf("after %d tags: %+v, want at most %d tracked", flood, st, maxTags)
	}
	// Tags of 8 to 18 bytes take records of 32 or 40 bytes. With reuse
	// the arena holds the records of a full table, free
	// records left over as the mix of lengths drifts (the tags' numbers
	// grow longer), and the unused end of each shard's last chunk.
	// Without reuse: some 36 bytes per tag of the flood, 720 per tag of
	// capacity here.
	if perTag > 64 {
		t.Fatalf("arena holds %.1f bytes per tag of capacity after the flood, want at most 64", perTag)
	}
}

// floodTable asks tb about n distinct random tags of 8 to 20 bytes, one
// query each, and returns the arena's bytes per tag of capacity.
func floodTable(tb *Table, n int, seed uint64) float64 {
	rng := rand.New(rand.NewPCG(seed, 99))
	tag := make([]byte, 0, 32)
	capacity, bytes := 0, 0
	for i := 0; i < n; i++ {
		// Random hex of 0 to 11 digits, then the distinct i.
		tag = fmt.Appendf(tag[:0], "%x.%d", rng.Uint64()>>(20+4*rng.IntN(11)), i)
		for len(tag) < 8 {
			tag = append(tag, '.')
		}
		tb.Allow(at(float64(i)/1e6), tag)
	}
	for i := range tb.shards {
		capacity += tb.shards[i].capacity
		bytes += tb.shards[i].arena.bytes
	}
	return float64(bytes) / float64(capacity)
}

// TestRecordIs checks the key comparison at every length up to 20 and
// a difference at every position.
func TestRecordIs(t *testing.T) {
	a := testArena(t)
	for n := 1; n <= 20; n++ {
		key := []byte("abcdefghijklmnopqrst"[:n])
		r := a.rec(a.newRecord(key, 0, 0))
		if !r.is(key) {
			t.Fatalf("%q is not itself", key)
		}
		if r.is(key[:n-1]) || r.is(append(key[:n:n], 'x')) {
			t.Fatalf("%q matches a key of another length", key)
		}
		for i := range key {
			other := append([]byte(nil), key...)
			other[i] ^= 1
			if r.is(other) {
				t.Fatalf("%q matches %q", key, other)
			}
		}
	}
}

// testArena returns an arena in a private region of its own.
func testArena(t *testing.T) *arena {
	reg, err := newRegion(false, 1, 1<<16, 256, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.unmap)
	a := new(arena)
	a.init(reg)
	return a
}

// keyOf is the key record ref holds, as far as its chunk's size allows.
func (a *arena) keyOf(ref uint32) []byte { return a.rec(ref).keyIn(a.chunkOf(ref).size) }
