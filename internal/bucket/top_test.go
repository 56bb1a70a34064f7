package bucket

import (
	"fmt"
	"testing"

	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// refusalsOf harvests tb and returns the refusals by policy name.
func refusalsOf(t *testing.T, tb *Table) (map[string]Refusals, uint64) {
	t.Helper()
	list, untracked := tb.TakeRefusals(nil)
	out := map[string]Refusals{}
	for _, r := range list {
		if _, ok := out[r.Policy]; ok {
			t.Fatalf("policy %q harvested twice", r.Policy)
		}
		out[r.Policy] = r
	}
	return out, untracked
}

// counts returns a summary's items as key=count.
func counts(items []topk.Item) map[string]uint64 {
	m := map[string]uint64{}
	for _, it := range items {
		m[it.Key] = it.Count
	}
	return m
}

// TestRefusalsCounted: every way a query is refused (Allow, AllowBatch,
// AllowN over the burst and under it, a dry run that would refuse) counts
// the key under its policy, served queries count nothing, and a harvest
// empties the sketches.
func TestRefusalsCounted(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 1000,
		Policy{Name: "api", Prefix: "api:", Rate: 0.001, Burst: 2},
		Policy{Name: "try", Prefix: "try:", Rate: 0.001, Burst: 1, DryRun: true},
		Policy{Name: "ops", Prefix: "ops:", Action: Deny})
	now := at(0)
	for range 4 {
		tb.Allow(now, []byte("a")) // served once, refused 3 times
	}
	ok := make([]bool, 3)
	tb.AllowBatch(now, [][]byte{[]byte("a"), []byte("b"), []byte("b")}, ok) // a refused, b served then refused
	tb.AllowN(now, []byte("api:x"), 3)                                      // over the burst: refused
	tb.AllowN(now, []byte("api:x"), 2)                                      // served
	tb.AllowN(now, []byte("api:x"), 1)                                      // refused
	for range 3 {
		if !tb.Allow(now, []byte("try:z")) { // served; the last two would be refused
			t.Fatal("the dry run refused")
		}
	}
	tb.Allow(now, []byte("ops:q")) // deny: no bucket, not counted

	got, untracked := refusalsOf(t, tb)
	want := map[string]map[string]uint64{
		"default": {"a": 4, "b": 1},
		"api":     {"api:x": 2},
		"try":     {"try:z": 2},
	}
	if len(got) != len(want) || untracked != 0 {
		t.Fatalf("harvested %v (untracked %d), want policies %v", got, untracked, want)
	}
	for name, keys := range want {
		r := got[name]
		c := counts(r.Items)
		var total uint64
		for k, n := range keys {
			total += n
			if c[k] != n {
				t.Errorf("%s: %s refused %d times, want %d", name, k, c[k], n)
			}
		}
		if r.Total != total || r.Floor != 0 || len(r.Items) != len(keys) {
			t.Errorf("%s: %+v, want total %d, floor 0, %d keys", name, r, total, len(keys))
		}
	}
	if got, _ := refusalsOf(t, tb); len(got) != 0 {
		t.Fatalf("a second harvest found %v: the first did not empty the sketches", got)
	}
}

// TestRefusalsBound fills a sketch past its counters: every key is still
// within its stated error, and one left out under the floor.
func TestRefusalsBound(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 10000)
	truth := map[string]uint64{}
	now := at(0)
	for i := range 5000 {
		key := fmt.Sprintf("k%d", i%(50+i%300))
		if !tb.Allow(now, []byte(key)) {
			truth[key]++
		}
	}
	got, _ := refusalsOf(t, tb)
	r := got["default"]
	var total uint64
	for _, n := range truth {
		total += n
	}
	if r.Total != total || r.Floor == 0 {
		t.Fatalf("total %d, want %d; floor %d (0: the sketches never filled, the test proves nothing)", r.Total, total, r.Floor)
	}
	held := map[string]bool{}
	for _, it := range r.Items {
		held[it.Key] = true
		if c := truth[it.Key]; it.Count < c || it.Count-it.Err > c {
			t.Fatalf("%s: %d (error %d), true %d", it.Key, it.Count, it.Err, c)
		}
	}
	for k, c := range truth {
		if !held[k] && c > r.Floor {
			t.Fatalf("%s refused %d times, left out under the floor %d", k, c, r.Floor)
		}
	}
}

// TestRefusalsPastTheCap: policies past the 16th to refuse in a shard
// within one interval are counted as untracked, and the next interval
// starts afresh.
func TestRefusalsPastTheCap(t *testing.T) {
	var ps []Policy
	for i := range refusalPolicies + 4 {
		ps = append(ps, Policy{Name: fmt.Sprint("p", i), Prefix: fmt.Sprintf("p%02d:", i), Rate: 0.001, Burst: 1})
	}
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 1000, ps...) // one shard
	refuseAll := func() {
		for _, p := range ps {
			tb.Allow(at(0), []byte(p.Prefix+"x"))
			tb.Allow(at(0), []byte(p.Prefix+"x"))
		}
	}
	refuseAll()
	got, untracked := refusalsOf(t, tb)
	if len(got) != refusalPolicies || untracked != 4 {
		t.Fatalf("%d policies harvested, %d untracked; want %d and 4", len(got), untracked, refusalPolicies)
	}
	tb.Allow(at(0), []byte("p19:x"))
	if got, untracked := refusalsOf(t, tb); len(got) != 1 || got["p19"].Total != 1 || untracked != 0 {
		t.Fatalf("next interval: %v, %d untracked; want p19 once", got, untracked)
	}
}

// TestRefusalsAcrossReload: refusals counted before a reload that
// reorders the policies stay under their names, those after it count
// under the same names, and a removed policy's are harvested under its
// old name.
func TestRefusalsAcrossReload(t *testing.T) {
	cfg := Config{Default: Policy{Rate: 0.001, Burst: 1}, MaxTags: 100, MaxTagBytes: 256, Policies: []Policy{
		{Name: "a", Prefix: "a:", Rate: 0.001, Burst: 1},
		{Name: "bb", Prefix: "bb:", Rate: 0.001, Burst: 1},
		{Name: "gone", Prefix: "g:", Rate: 0.001, Burst: 1},
	}}
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"a:1", "a:1", "bb:1", "bb:1", "g:1", "g:1"} {
		tb.Allow(at(0), []byte(tag))
	}
	// "a" now has the longest prefix: the order of the policies changes.
	cfg.Policies = []Policy{{Name: "a", Prefix: "aaaa:", Rate: 0.001, Burst: 1}, {Name: "bb", Prefix: "bb:", Rate: 0.001, Burst: 1}}
	if err := tb.Reconfigure(at(0), cfg); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"aaaa:1", "aaaa:1", "bb:1", "g:1"} {
		tb.Allow(at(0), []byte(tag))
	}
	got, _ := refusalsOf(t, tb)
	for name, want := range map[string]map[string]uint64{
		"a":       {"a:1": 1, "aaaa:1": 1},
		"bb":      {"bb:1": 2},
		"gone":    {"g:1": 1},
		"default": {"g:1": 1},
	} {
		c := counts(got[name].Items)
		if fmt.Sprint(c) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", name, c, want)
		}
	}
	if tb.PolicyName("aaaa:x") != "a" || tb.PolicyName("g:1") != "default" || tb.PolicyName("bb:") != "bb" {
		t.Errorf("PolicyName: %q %q %q", tb.PolicyName("aaaa:x"), tb.PolicyName("g:1"), tb.PolicyName("bb:"))
	}
}

// TestRefusalDoesNotAllocate: once a policy's sketch holds keys as long
// as the ones refused, a refusal allocates nothing, harvest after harvest.
func TestRefusalDoesNotAllocate(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 10000)
	tags := benchTags(200)
	now := at(0)
	for _, tag := range tags {
		tb.Allow(now, tag)
		tb.Allow(now, tag)
	}
	i := 0
	if a := testing.AllocsPerRun(1000, func() { tb.Allow(now, tags[i%len(tags)]); i++ }); a != 0 {
		t.Fatalf("%v allocations per refusal", a)
	}
	tb.TakeRefusals(nil)
	if a := testing.AllocsPerRun(1000, func() { tb.Allow(now, tags[i%len(tags)]); i++ }); a != 0 {
		t.Fatalf("%v allocations per refusal after a harvest", a)
	}
}

// TestRefusalsExact: a record's refusals are counted exactly in the
// record until the harvest, and a heavy key refused after thousands of
// light ones is still listed within its stated error; refusals of a
// record forgotten before the harvest count as untracked.
func TestRefusalsExact(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 1000) // one shard
	for range 1000 {
		tb.Allow(at(0), []byte("heavy"))
	}
	for range 5 {
		tb.Allow(at(0), []byte("gone"))
	}
	tb.Forget(tb.Key([]byte("gone")))
	got, untracked := refusalsOf(t, tb)
	r := got["default"]
	if untracked != 4 || r.Total != 999 || len(r.Items) != 1 || r.Items[0] != (topk.Item{Key: "heavy", Count: 999}) {
		t.Fatalf("%+v, %d untracked; want heavy refused exactly 999 times, gone's 4 untracked", r, untracked)
	}

	// Many light keys, more than a shard's sketch holds, then a heavy one.
	big := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 100000)
	truth := map[string]uint64{}
	refuse := func(key string) {
		if !big.Allow(at(0), []byte(key)) {
			truth[key]++
		}
	}
	for i := range 8192 * len(big.shards) {
		refuse(fmt.Sprint("light", i))
		refuse(fmt.Sprint("light", i))
	}
	for range 500 {
		refuse("late")
	}
	got, _ = refusalsOf(t, big)
	r = got["default"]
	var total uint64
	for _, n := range truth {
		total += n
	}
	if r.Total != total {
		t.Fatalf("total %d, want %d", r.Total, total)
	}
	held := map[string]bool{}
	for _, it := range r.Items {
		held[it.Key] = true
		if c := truth[it.Key]; it.Count < c || it.Count-it.Err > c {
			t.Fatalf("%s: %d (error %d), true %d", it.Key, it.Count, it.Err, c)
		}
	}
	if !held["late"] {
		t.Fatalf("the heavy key refused after the table filled is not listed: %+v", r.Items[:min(5, len(r.Items))])
	}
	for k, c := range truth {
		if !held[k] && c > r.Floor {
			t.Fatalf("%s refused %d times, left out under the floor %d", k, c, r.Floor)
		}
	}
}

// TestRefusalsSpilled: more records refused in one interval than a
// shard lists (records evicted and their places taken by new keys, each
// refused in turn) are found through the dirty bitmap instead, and every
// refusal is either harvested or counted as untracked (its record gone).
func TestRefusalsSpilled(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 500) // one shard, room for 500
	refusals := uint64(0)
	for i := range 3000 {
		key := []byte(fmt.Sprint("k", i))
		for range 3 {
			if !tb.Allow(at(0), key) {
				refusals++
			}
		}
	}
	if s := &tb.shards[0]; !s.spilled && len(s.refusedRefs) <= max(s.capacity, 1024) {
		t.Fatalf("the shard listed %d records and did not spill: the test no longer overflows the list", len(s.refusedRefs))
	}
	got, untracked := refusalsOf(t, tb)
	r := got["default"]
	if r.Total+untracked != refusals || r.Total == 0 {
		t.Fatalf("harvested %d and %d untracked, want %d refusals in all", r.Total, untracked, refusals)
	}
	// The last keys, still tracked, are counted exactly.
	for _, it := range r.Items {
		if it.Err == 0 && it.Count != 2 {
			t.Fatalf("%s: counted %d, refused twice", it.Key, it.Count)
		}
	}
	if got, _ := refusalsOf(t, tb); len(got) != 0 {
		t.Fatalf("a second harvest found %+v", got)
	}
}
