package bucket

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestGarbageCostsNoMoreThanWorstCase writes garbage over the state file
// as a caller may (every record's counts at their maximum with every
// dirty bit set, huge key lengths, tat at INT64_MIN, zeroed records,
// random words anywhere), and then drains, harvests the refusals and
// exports, as the daemon does every interval. Whatever the garbage, they
// allocate no more than the table's own worst case, every tracked tag
// hit and refused within one interval, does; they take at most one hit
// per tracked tag, keyed by its own key, and no tag's hits past its
// policy's cap; and the tags, asked again, find their own records, so
// that nothing is evicted and the table holds what it held.
func TestGarbageCostsNoMoreThanWorstCase(t *testing.T) {
	const n = 20000
	tb, err := New(Config{Default: Policy{Rate: 1, Burst: 1}, MaxTags: 2 * n, MaxTagBytes: 256, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	tags := make([][]byte, n)
	own := make(map[string]bool, n)
	for i := range tags {
		tags[i] = fmt.Appendf(nil, "203.0.%d.%d", i>>8, i&255)
		own[string(tags[i])] = true
	}
	// hitAndRefuse asks every tag twice at second sec: served, then
	// refused.
	hitAndRefuse := func(sec float64) {
		for _, tag := range tags {
			tb.Allow(at(sec), tag)
			tb.Allow(at(sec), tag)
		}
	}
	type took struct {
		bytes            uint64
		hits             []Hit
		refused, levels  int
		strange, tooMany string
	}
	// interval drains, harvests the refusals and exports at second sec, as
	// the daemon does, and returns what that allocated and took.
	interval := func(sec float64) took {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var k took
		k.hits = tb.Drain(nil)
		rs, _ := tb.TakeRefusals(nil)
		tb.Export(at(sec), func(ls []Level) error {
			for _, l := range ls {
				if k.levels++; !own[string(l.Key)] && k.strange == "" {
					k.strange = fmt.Sprintf("exported %.40q", l.Key)
				}
			}
			return nil
		})
		runtime.ReadMemStats(&after)
		k.bytes = after.TotalAlloc - before.TotalAlloc
		for _, h := range k.hits {
			if !own[h.Key] && k.strange == "" {
				k.strange = fmt.Sprintf("drained %.40q", h.Key)
			}
			if h.Count > 1+1+1 && k.tooMany == "" { // burst, a second at 1/s, one in hand
				k.tooMany = fmt.Sprintf("%d hits of %.40q", h.Count, h.Key)
			}
		}
		for _, r := range rs {
			for _, it := range r.Items {
				if k.refused++; !own[it.Key] && k.strange == "" {
					k.strange = fmt.Sprintf("refusals of %.40q", it.Key)
				}
			}
		}
		return k
	}

	hitAndRefuse(1)
	interval(1) // the buffers and sketches a first interval makes
	hitAndRefuse(2)
	worst := interval(2)
	if len(worst.hits) != n || worst.refused == 0 || worst.levels != n {
		t.Fatalf("the worst case drained %d hits, harvested %d refused keys, exported %d levels; want %d, some, %d",
			len(worst.hits), worst.refused, worst.levels, n, n)
	}
	t.Logf("every one of %d tags hit and refused: %d bytes allocated (%.0f a tag)", n, worst.bytes, float64(worst.bytes)/n)

	rng := rand.New(rand.NewPCG(1, 2))
	for i, g := range garbageKinds {
		sec := float64(3 + 2*i)
		hitAndRefuse(sec) // every tag below its burst, exported but for the garbage
		g.write(tb, rng)
		got := interval(sec)
		t.Logf("%s: %d bytes, %d hits, %d refused keys, %d levels", g.name, got.bytes, len(got.hits), got.refused, got.levels)
		// The same work allocates the same: 1% for the runtime's own.
		if got.bytes > worst.bytes+worst.bytes/100 {
			t.Errorf("%s: drain, harvest and export allocated %d bytes, more than the %d of every tag hit and refused",
				g.name, got.bytes, worst.bytes)
		}
		if len(got.hits) > n || got.strange != "" || got.tooMany != "" {
			t.Errorf("%s: %d hits of %d tags; %s; %s", g.name, len(got.hits), n, got.strange, got.tooMany)
		}
		ev := tb.Stats().Evictions
		hitAndRefuse(sec + 1)
		interval(sec + 1)
		if st := tb.Stats(); st.Evictions != ev || st.Tags != n {
			t.Errorf("%s: asking the tags again evicted %d and left %d tracked, want none and %d",
				g.name, st.Evictions-ev, st.Tags, n)
		}
	}
}

// garbage is one kind of garbage a caller may write into a table's
// state file.
type garbage struct {
	name  string
	write func(tb *Table, rng *rand.Rand)
}

// garbageKinds are the kinds the tests write: each record's own fields
// across every record, then stretches of the file whatever they hold.
var garbageKinds = []garbage{
	{"counts at their maximum, every dirty bit set", func(tb *Table, _ *rand.Rand) {
		eachRecord(tb, func(r record) { binary.LittleEndian.PutUint64(r[recUnreported:], math.MaxUint64) })
		allDirty(tb)
	}},
	{"key lengths of 65537 and more", func(tb *Table, rng *rand.Rand) {
		lens := []uint64{maxKeyLen, 1 << 16, 1<<21 - 1, math.MaxUint32, math.MaxUint64}
		eachRecord(tb, func(r record) {
			binary.LittleEndian.PutUint64(r[recUnreported:], math.MaxUint64)
			binary.PutUvarint(r[recKey:], lens[rng.IntN(len(lens))])
		})
		allDirty(tb)
	}},
	{"tat at INT64_MIN", func(tb *Table, _ *rand.Rand) {
		eachRecord(tb, func(r record) {
			binary.LittleEndian.PutUint64(r[0:], 1<<63)
			binary.LittleEndian.PutUint64(r[recUnreported:], math.MaxUint64)
		})
		allDirty(tb)
	}},
	{"the records zeroed", func(tb *Table, _ *rand.Rand) {
		clear(tb.reg.records[chunkSize:tb.reg.next.Load()])
		allDirty(tb)
	}},
	{"random words over the whole file", func(tb *Table, rng *rand.Rand) {
		w := words(tb.reg.rw)
		for range len(w) / 16 {
			w[rng.IntN(len(w))] = rng.Uint64()
		}
		allDirty(tb)
	}},
}

// eachRecord calls f with every record the table's index holds.
func eachRecord(tb *Table, f func(record)) {
	for i := range tb.shards {
		s := &tb.shards[i]
		for _, e := range s.index.slots {
			if e != 0 {
				f(s.arena.rec(uint32(e)))
			}
		}
	}
}

// allDirty sets every bit of the dirty bitmap.
func allDirty(tb *Table) {
	for i := range tb.reg.dirty {
		tb.reg.dirty[i] = math.MaxUint64
	}
}

// TestKeyIn: a record's key is read back only while its length fits the
// record, and ownKey takes it only while it hashes to the record's slot.
func TestKeyIn(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 1}, 100)
	key := []byte("203.0.113.7")
	tb.Allow(at(0), key)
	h, s := tb.shardFor(string(key))
	_, ref := s.index.lookup(&s.arena, h, key)
	size := s.arena.chunkOf(ref).size
	r := s.arena.rec(ref)
	for _, tc := range []struct {
		name  string
		len   uint64
		want  int // the key's length read back; -1 none
		owned bool
	}{
		{"its own length", uint64(len(key)), len(key), true},
		{"shorter", uint64(len(key) - 1), len(key) - 1, false},
		{"to the record's end", uint64(int(size) - recKey - 1), int(size) - recKey - 1, false},
		{"past the record's end", uint64(int(size) - recKey), -1, false},
		{"the longest key", maxKeyLen, -1, false},
		{"unterminated", math.MaxUint64, -1, false},
	} {
		binary.PutUvarint(r[recKey:], tc.len)
		if tc.len < 0x80 {
			r[recKey] = byte(tc.len)
		}
		got := r.keyIn(size)
		if tc.want < 0 && got != nil || tc.want >= 0 && len(got) != tc.want {
			t.Errorf("%s: keyIn read %d bytes, want %d", tc.name, len(got), tc.want)
		}
		k, kh, ok := s.ownKey(nil, ref, size)
		if ok != tc.owned || ok && (string(k) != string(key) || kh != h) {
			t.Errorf("%s: ownKey %q %v, want owned %v", tc.name, k, ok, tc.owned)
		}
	}
	r[recKey] = byte(len(key))
	if _, _, ok := s.ownKey(nil, ref+1, size); ok {
		t.Error("ownKey took a key at a reference no slot names")
	}
	// Back to its own length, the tag finds its record; garbled, lookup
	// gives the key back to it.
	binary.PutUvarint(r[recKey:], maxKeyLen)
	if _, got := s.index.lookup(&s.arena, h, key); got != ref {
		t.Fatalf("lookup of a tag whose record's key was garbled: %d, want its record %d", got, ref)
	}
	if !r.is(key) {
		t.Fatal("lookup found the garbled record but did not give it its key back")
	}
}

// TestGarbledFragmentTwins garbles the records of two tags whose hashes
// share a shard and a slot fragment: each tag asked again takes one of
// the two records back, and neither takes a new one. (Before, the first
// tag could take the second's record, and the second then found the
// first's key, another tag's, and took a new record beside the garbled
// one: one tag in some fifty thousand pairs, seen as one tracked tag too
// many in TestGarbageCostsNoMoreThanWorstCase.)
func TestGarbledFragmentTwins(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 5}, 100)
	// The birthday bound: some 2^16 tags for a pair of one 32-bit
	// fragment; a few million make a pair all but certain.
	type place struct {
		shard *shard
		frag  uint32
	}
	seen := make(map[place]int, 1<<20)
	var a, b []byte
	for i := range 4 << 20 {
		key := fmt.Appendf(nil, "198.51.%d.%d", i>>8, i&255)
		h, s := tb.shardFor(string(key))
		p := place{s, uint32(h)}
		if j, ok := seen[p]; ok {
			a, b = fmt.Appendf(nil, "198.51.%d.%d", j>>8, j&255), key
			break
		}
		seen[p] = i
	}
	if a == nil {
		t.Fatal("no two tags of one fragment among 4M")
	}
	clear(seen)
	tb.Allow(at(0), a)
	tb.Allow(at(0), b)
	h, s := tb.shardFor(string(a))
	_, refA := s.index.lookup(&s.arena, h, a)
	hb, _ := tb.shardFor(string(b))
	_, refB := s.index.lookup(&s.arena, hb, b)
	if refA == 0 || refB == 0 || refA == refB {
		t.Fatalf("records %d and %d", refA, refB)
	}
	for _, ref := range []uint32{refA, refB} {
		binary.PutUvarint(s.arena.rec(ref)[recKey:], maxKeyLen)
	}
	tb.Allow(at(0), a)
	tb.Allow(at(0), b)
	if st := tb.Stats(); st.Tags != 2 {
		t.Errorf("%d tags tracked after the two asked again, want 2", st.Tags)
	}
	_, gotA := s.index.lookup(&s.arena, h, a)
	_, gotB := s.index.lookup(&s.arena, hb, b)
	if gotA == gotB || (gotA != refA && gotA != refB) || (gotB != refA && gotB != refB) {
		t.Errorf("records %d and %d after, were %d and %d", gotA, gotB, refA, refB)
	}
}
