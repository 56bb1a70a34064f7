package topk

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// check holds a sketch to Space-Saving's guarantees against the true
// counts: every key it holds is counted at least as often as it was and
// at most Err more, Err never past the bound, and every key counted more
// than the bound is held.
func check(t *testing.T, s *Sketch, truth map[string]uint64) {
	t.Helper()
	held := map[string]bool{}
	for _, it := range s.Top(s.K()) {
		held[it.Key] = true
		c := truth[it.Key]
		if it.Count < c || it.Count-it.Err > c {
			t.Fatalf("%q: reported %d (error %d), true %d", it.Key, it.Count, it.Err, c)
		}
		if it.Err > s.Bound() {
			t.Fatalf("%q: error %d over the bound %d", it.Key, it.Err, s.Bound())
		}
	}
	for key, c := range truth {
		if c > s.Bound() && !held[key] {
			t.Fatalf("%q counted %d, over the bound %d, not held", key, c, s.Bound())
		}
	}
}

func TestGuaranteesOnRandomStreams(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		s := New(1 + r.IntN(16))
		if seed%2 == 1 {
			s = NewFiltered(1+r.IntN(16), 64)
		}
		truth := map[string]uint64{}
		for range 2000 {
			key := strconv.Itoa(int(r.ExpFloat64() * 8))
			n := uint64(1 + r.IntN(3))
			s.Add([]byte(key), n)
			truth[key] += n
		}
		check(t, s, truth)
		if len(s.Top(100)) > s.K() {
			t.Fatalf("more items than counters")
		}
	}
}

func TestFewKeysAreExact(t *testing.T) {
	s := New(4)
	for i, key := range []string{"a", "b", "a", "c", "a", "b"} {
		s.Add([]byte(key), uint64(i+1))
	}
	got := s.Top(10)
	want := []Item{{Key: "a", Count: 9}, {Key: "b", Count: 8}, {Key: "c", Count: 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if s.Floor() != 0 || s.Total() != 21 {
		t.Fatalf("floor %d total %d, want 0 and 21", s.Floor(), s.Total())
	}
	s.Reset()
	if len(s.Top(10)) != 0 || s.Total() != 0 {
		t.Fatal("not empty after Reset")
	}
}

// TestZipfMillionTags: a Zipf stream over a million tags, the true top 20
// against the reported one. Every true top-20 tag must be reported, in
// the same order where their true counts differ by more than the error.
func TestZipfMillionTags(t *testing.T) {
	const tags, draws, k = 1 << 20, 2_000_000, 256
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, tags-1)
	s := New(k)
	truth := make([]uint64, tags)
	var buf []byte
	for range draws {
		v := z.Uint64()
		truth[v]++
		buf = strconv.AppendUint(buf[:0], v, 10)
		s.Add(buf, 1)
	}
	// The true top 20.
	ids := make([]int, tags)
	for i := range ids {
		ids[i] = i
	}
	slices.SortFunc(ids, func(a, b int) int { return int(truth[b]) - int(truth[a]) })
	got := s.Top(20)
	reported := map[string]Item{}
	for _, it := range got {
		reported[it.Key] = it
	}
	worst := uint64(0)
	for rank, id := range ids[:20] {
		key := strconv.Itoa(id)
		it, ok := reported[key]
		if !ok {
			t.Fatalf("true rank %d (%s, %d draws) not in the reported top 20 (bound %d)", rank+1, key, truth[id], s.Bound())
		}
		if it.Count < truth[id] || it.Count-it.Err > truth[id] {
			t.Fatalf("%s: reported %d±%d, true %d", key, it.Count, it.Err, truth[id])
		}
		worst = max(worst, it.Count-truth[id])
	}
	t.Logf("%d draws over %d tags, %d counters: the true top 20 all reported; worst over-count %d, bound %d (%.3f%% of the draws)",
		draws, tags, k, worst, s.Bound(), 100*float64(s.Bound())/draws)
}

func TestMergeKeepsTheGuarantee(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	truth := map[string]uint64{}
	var lists [][]Item
	var floors []uint64
	for range 3 {
		s := New(8)
		for range 3000 {
			key := fmt.Sprint(int(r.ExpFloat64() * 10))
			s.Add([]byte(key), 1)
			truth[key]++
		}
		lists = append(lists, s.Top(8))
		floors = append(floors, s.Floor())
	}
	for _, it := range Merge(8, lists, floors) {
		if c := truth[it.Key]; it.Count < c || it.Count-it.Err > c {
			t.Fatalf("%q: merged %d (error %d), true %d", it.Key, it.Count, it.Err, c)
		}
	}
	// The heaviest key overall leads the merge.
	best, bestKey := uint64(0), ""
	for k, c := range truth {
		if c > best {
			best, bestKey = c, k
		}
	}
	if m := Merge(1, lists, floors); m[0].Key != bestKey {
		t.Fatalf("merge leads with %v, want %s (%d)", m[0], bestKey, best)
	}
}

func TestAddDoesNotAllocateWhenFull(t *testing.T) {
	s := New(64)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("203.0.113.%03d", i%1000))
	}
	for _, k := range keys {
		s.Add(k, 1)
	}
	i := 0
	if a := testing.AllocsPerRun(1000, func() { s.Add(keys[i%len(keys)], 1); i++ }); a != 0 {
		t.Fatalf("%v allocations per Add", a)
	}
}

func BenchmarkAdd(b *testing.B) {
	s := New(128)
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("198.51.%d.%d", i>>8, i&255))
	}
	r := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(r, 1.1, 1, uint64(len(keys)-1))
	order := make([]int, 4096)
	for i := range order {
		order[i] = int(z.Uint64())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Add(keys[order[i&4095]], 1)
	}
}

// TestAddHashIsAdd: a sketch fed through AddHash, with a hash of the
// caller's, keeps what one fed through Add keeps, and the guarantees.
func TestAddHashIsAdd(t *testing.T) {
	seed := maphash.MakeSeed()
	r := rand.New(rand.NewPCG(5, 6))
	a, b := New(8), New(8)
	truth := map[string]uint64{}
	for range 5000 {
		key := []byte(strconv.Itoa(int(r.ExpFloat64() * 12)))
		a.Add(key, 1)
		b.AddHash(maphash.Bytes(seed, key), key, 1)
		truth[string(key)]++
	}
	check(t, b, truth)
	if a.Total() != b.Total() || a.Floor() != b.Floor() {
		t.Fatalf("Add: total %d floor %d; AddHash: total %d floor %d", a.Total(), a.Floor(), b.Total(), b.Floor())
	}
}

// TestSummaryCut: a summary cut short raises its floor to the heaviest
// key left out.
func TestSummaryCut(t *testing.T) {
	s := New(4)
	for i, key := range []string{"a", "b", "c"} {
		s.Add([]byte(key), uint64(10-i))
	}
	got := s.Summary(2)
	want := Summary{Items: []Item{{Key: "a", Count: 10}, {Key: "b", Count: 9}}, Total: 27, Floor: 8}
	if !slices.Equal(got.Items, want.Items) || got.Total != want.Total || got.Floor != want.Floor {
		t.Fatalf("Summary(2) = %+v, want %+v", got, want)
	}
	if got := s.Summary(10); len(got.Items) != 3 || got.Floor != 0 {
		t.Fatalf("Summary(10) = %+v, want all three, floor 0", got)
	}
	if got := (Summary{Floor: 3}).Cut(0); got.Floor != 3 || len(got.Items) != 0 {
		t.Fatalf("empty Cut(0) = %+v", got)
	}
}

// TestMergeSummariesKeepsTheGuarantee merges the summaries of several
// streams, cut short, and holds the result to the true counts of the
// streams together: listed keys within their error, every other key at
// most the floor.
func TestMergeSummariesKeepsTheGuarantee(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	truth := map[string]uint64{}
	var sums []Summary
	var total uint64
	for i := range 5 {
		s := New(16)
		for range 4000 {
			key := strconv.Itoa(int(r.ExpFloat64() * float64(10+i*5)))
			s.Add([]byte(key), 1)
			truth[key]++
			total++
		}
		sums = append(sums, s.Summary(6))
	}
	m := MergeSummaries(10, sums...)
	if m.Total != total || len(m.Items) != 10 {
		t.Fatalf("merged total %d, %d items; want %d and 10", m.Total, len(m.Items), total)
	}
	held := map[string]bool{}
	for _, it := range m.Items {
		held[it.Key] = true
		if c := truth[it.Key]; it.Count < c || it.Count-it.Err > c {
			t.Fatalf("%q: merged %d (error %d), true %d", it.Key, it.Count, it.Err, c)
		}
	}
	for key, c := range truth {
		if !held[key] && c > m.Floor {
			t.Fatalf("%q counted %d, left out under the floor %d", key, c, m.Floor)
		}
	}
}

func TestSumsSaturate(t *testing.T) {
	s := New(2)
	s.Add([]byte("a"), math.MaxUint64-1)
	s.Add([]byte("a"), 5)
	if it := s.Top(1)[0]; it.Count != math.MaxUint64 || s.Total() != math.MaxUint64 {
		t.Fatalf("count %d total %d, want both saturated", it.Count, s.Total())
	}
	m := Merge(1, [][]Item{{{Key: "a", Count: math.MaxUint64}}, {{Key: "a", Count: 7}}}, []uint64{0, 0})
	if m[0].Count != math.MaxUint64 {
		t.Fatalf("merged count %d, want saturated", m[0].Count)
	}
}

// TestResetDoesNotAllocate: a sketch emptied and filled again with keys
// no longer than before reuses its keys' memory.
func TestResetDoesNotAllocate(t *testing.T) {
	seed := maphash.MakeSeed()
	s := New(16)
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("198.51.100.%03d", i))
	}
	fill := func() {
		for _, k := range keys {
			s.AddHash(maphash.Bytes(seed, k), k, 1)
		}
		s.Reset()
	}
	fill()
	if a := testing.AllocsPerRun(100, fill); a != 0 {
		t.Fatalf("%v allocations per fill and Reset", a)
	}
}

// TestFilteredZipf: a filtered sketch of 32 counters over a Zipf stream
// keeps its guarantees, and its floor stays at most the smallest count it
// holds.
func TestFilteredZipf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	z := rand.NewZipf(r, 1.1, 1, 1<<16)
	s := NewFiltered(32, 512)
	truth := map[string]uint64{}
	var buf []byte
	for range 200000 {
		buf = strconv.AppendUint(buf[:0], z.Uint64(), 10)
		s.Add(buf, 1+uint64(len(buf)%2))
		truth[string(buf)] += 1 + uint64(len(buf)%2)
	}
	check(t, s, truth)
	if top := s.Top(32); s.Floor() > top[len(top)-1].Count || s.Floor() == 0 {
		t.Fatalf("floor %d, smallest count held %d", s.Floor(), top[len(top)-1].Count)
	}
}

func TestFilteredAddDoesNotAllocate(t *testing.T) {
	s := NewFiltered(16, 64)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("203.0.113.%03d", i))
	}
	for _, k := range keys {
		s.Add(k, 1)
	}
	i := 0
	if a := testing.AllocsPerRun(1000, func() { s.Add(keys[i%len(keys)], 1); i++ }); a != 0 {
		t.Fatalf("%v allocations per Add", a)
	}
}

// BenchmarkAddHash is BenchmarkAdd with the key hashed by the caller, on
// a filtered sketch of 32 counters: the cost of counting one refusal on
// the table's side, where most keys are new to the sketch.
func BenchmarkAddHash(b *testing.B) {
	seed := maphash.MakeSeed()
	s := NewFiltered(32, 512)
	keys := make([][]byte, 1<<16)
	hs := make([]uint64, len(keys))
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("198.51.%d.%d", i>>8, i&255))
		hs[i] = maphash.Bytes(seed, keys[i])
	}
	r := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(r, 1.1, 1, uint64(len(keys)-1))
	order := make([]int, 4096)
	for i := range order {
		order[i] = int(z.Uint64())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := order[i&4095]
		s.AddHash(hs[k], keys[k], 1)
	}
}
