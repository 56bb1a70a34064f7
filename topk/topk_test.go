package topk

import (
	"fmt"
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
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		s := New(1 + r.IntN(16))
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
