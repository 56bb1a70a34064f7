package top_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/top"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// checkView holds one policy of a view to its stated error against the
// true counts: every tag listed counted at most Count and at least
// Count-Error, every tag not listed at most Bound, and the total is
// exact, or, when some node left lists out (partial), at most the true
// one. It returns the policy.
func checkView(t *testing.T, v api.Top, policy string, truth map[string]uint64, partial bool) api.TopPolicy {
	t.Helper()
	i := slices.IndexFunc(v.Policies, func(p api.TopPolicy) bool { return p.Policy == policy })
	var p api.TopPolicy // a policy not in the view has a total and a bound of 0
	if i >= 0 {
		p = v.Policies[i]
	}
	var total uint64
	for _, c := range truth {
		total += c
	}
	if p.Total != total && (!partial || p.Total > total) {
		t.Fatalf("%s: total %d, want %d", policy, p.Total, total)
	}
	listed := map[string]bool{}
	for _, tg := range p.Tags {
		listed[tg.Tag] = true
		if c := truth[tg.Tag]; tg.Count < c || tg.Count-tg.Error > c {
			t.Fatalf("%s: %s listed at %d (error %d), true %d", policy, tg.Tag, tg.Count, tg.Error, c)
		}
	}
	for tag, c := range truth {
		if !listed[tag] && c > p.Bound {
			t.Fatalf("%s: %s counted %d, left out under the bound %d", policy, tag, c, p.Bound)
		}
	}
	return p
}

// TestZipfThroughTheTable: a million tags queried with Zipf's law over a
// minute, through the table's refusal path, harvested every second into
// a board. The view's top 20 holds every true count within its stated
// error, and every tag left out under the stated bound; the true
// heaviest are the ones listed.
func TestZipfThroughTheTable(t *testing.T) {
	const tags, queries, seconds = 1 << 20, 2_000_000, 50
	tb, err := bucket.New(bucket.Config{
		Default:     bucket.Policy{Rate: 1e-6, Burst: 1}, // each tag served once, then refused
		MaxTags:     tags,
		MaxTagBytes: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := top.New(top.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	keys := make([][]byte, tags)
	for i := range keys {
		keys[i] = []byte("198.51." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&255))
	}
	truth := make([]uint32, tags)
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, tags-1)
	var (
		refs     []bucket.Refusals
		hits     []bucket.Hit
		served   uint64
		untraced uint64
	)
	now := t0
	for s := range seconds {
		now = t0.Add(time.Duration(s+1) * time.Second)
		for range queries / seconds {
			v := z.Uint64()
			if !tb.Allow(now, keys[v]) {
				truth[v]++
			}
		}
		var u uint64
		refs, u = tb.TakeRefusals(refs[:0])
		untraced += u
		b.AddRefused(now, refs)
		hits = tb.Drain(hits[:0])
		for _, h := range hits {
			served += uint64(h.Count)
		}
		b.AddServed(now, hits, tb.PolicyName)
	}
	if untraced != 0 {
		t.Fatalf("%d refusals untracked", untraced)
	}
	want := map[string]uint64{}
	for i, c := range truth {
		if c > 0 {
			want[string(keys[i])] = uint64(c)
		}
	}
	v := b.View("refused", "node", "", 20, now)
	p := checkView(t, v, "default", want, false)

	// The true top 20 against the reported one.
	ids := make([]int, tags)
	for i := range ids {
		ids[i] = i
	}
	slices.SortFunc(ids, func(a, b int) int { return int(truth[b]) - int(truth[a]) })
	reported := map[string]bool{}
	worst := uint64(0)
	for _, tg := range p.Tags {
		reported[tg.Tag] = true
		worst = max(worst, tg.Error)
	}
	missed := 0
	for rank, id := range ids[:20] {
		if !reported[string(keys[id])] {
			missed++
			t.Errorf("true rank %d (%s, refused %d) not in the reported top 20 (bound %d)", rank+1, keys[id], truth[id], p.Bound)
		}
	}
	t.Logf("%d queries over %d tags, %d shards: %d refused; the true top 20 %d missed; worst error %d, bound %d (%.3f%% of the refusals), window %.0f s",
		queries, tags, tb.Shards(), p.Total, missed, worst, p.Bound, 100*float64(p.Bound)/float64(p.Total), v.WindowSeconds)

	// The served side: every tag served once, counted under its policy.
	sv := b.View("served", "node", "", 20, now)
	if len(sv.Policies) != 1 || sv.Policies[0].Total != served {
		t.Fatalf("served: %+v, want default with %d hits", sv.Policies, served)
	}
}
