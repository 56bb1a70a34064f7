package bucket

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"testing"
)

// step is one operation on a table at a fixed instant.
type step struct {
	at     float64 // seconds after t0
	op     string  // "allow", "spend", "tokens", "drain"
	tag    string
	hits   uint32  // spend
	want   bool    // allow
	tokens float64 // tokens: the bucket level
	report string  // drain: the hits as "tag=n,..." sorted by tag
}

func runSteps(t *testing.T, tb *Table, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := at(s.at)
		switch s.op {
		case "allow":
			if got := tb.Allow(now, []byte(s.tag)); got != s.want {
				t.Fatalf("step %d (t=%v allow %q): got %v, want %v", i, s.at, s.tag, got, s.want)
			}
		case "spend":
			tb.Spend(now, s.tag, s.hits)
		case "tokens":
			st, err := tb.Peek(now, s.tag)
			if err != nil {
				t.Fatalf("step %d (t=%v peek %q): %v", i, s.at, s.tag, err)
			}
			if math.Abs(st.Tokens-s.tokens) > 1e-9 {
				t.Fatalf("step %d (t=%v tokens %q): got %v, want %v", i, s.at, s.tag, st.Tokens, s.tokens)
			}
		case "drain":
			if got := formatHits(tb.Drain(nil)); got != s.report {
				t.Fatalf("step %d (t=%v drain): got %q, want %q", i, s.at, got, s.report)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
	}
}

func formatHits(hits []Hit) string {
	parts := make([]string, len(hits))
	for i, h := range hits {
		parts[i] = fmt.Sprintf("%s=%d", h.Key, h.Count)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func TestBucketSteps(t *testing.T) {
	pol := Policy{Rate: 2, Burst: 3}
	tests := []struct {
		name  string
		steps []step
	}{
		{"burst then refill at rate", []step{
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "a", want: false},
			{at: 0, op: "allow", tag: "b", want: true},
			{at: 0.25, op: "tokens", tag: "a", tokens: 0.5},
			{at: 0.25, op: "allow", tag: "a", want: false},
			{at: 0.5, op: "allow", tag: "a", want: true},
			{at: 0.5, op: "allow", tag: "a", want: false},
		}},
		{"refill capped at burst", []step{
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 100, op: "tokens", tag: "a", tokens: 3},
			{at: 100, op: "allow", tag: "a", want: true},
			{at: 100, op: "allow", tag: "a", want: true},
			{at: 100, op: "allow", tag: "a", want: true},
			{at: 100, op: "allow", tag: "a", want: false},
		}},
		{"refused query changes nothing", []step{
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0.1, op: "allow", tag: "a", want: false},
			{at: 0.2, op: "allow", tag: "a", want: false},
			{at: 0.3, op: "allow", tag: "a", want: false},
			{at: 0.4, op: "allow", tag: "a", want: false},
			{at: 0.5, op: "tokens", tag: "a", tokens: 1},
			{at: 0.5, op: "drain", report: "a=3"},
		}},
		{"remote hits go into debt", []step{
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "spend", tag: "a", hits: 7},
			{at: 0, op: "tokens", tag: "a", tokens: -5},
			{at: 2.5, op: "tokens", tag: "a", tokens: 0},
			{at: 2.5, op: "allow", tag: "a", want: false},
			{at: 3, op: "allow", tag: "a", want: true},
			{at: 3, op: "drain", report: "a=2"},
		}},
		{"remote hits on an unseen tag start from a full bucket", []step{
			{at: 0, op: "spend", tag: "x", hits: 2},
			{at: 0, op: "tokens", tag: "x", tokens: 1},
			{at: 0, op: "allow", tag: "x", want: true},
			{at: 0, op: "allow", tag: "x", want: false},
			{at: 0, op: "drain", report: "x=1"},
		}},
		{"clock stepping back refunds nothing", []step{
			{at: 10, op: "allow", tag: "a", want: true},
			{at: 10, op: "allow", tag: "a", want: true},
			{at: 10, op: "allow", tag: "a", want: true},
			{at: 5, op: "allow", tag: "a", want: false},
			{at: 5, op: "tokens", tag: "a", tokens: 0},
			{at: 10.25, op: "allow", tag: "a", want: false},
			{at: 10.5, op: "allow", tag: "a", want: true},
			// Back again: the table's clock stays at 10.5, so a second
			// step back neither refills nor costs the tag its next token.
			{at: 1, op: "tokens", tag: "a", tokens: 0},
			{at: 11, op: "allow", tag: "a", want: true},
		}},
		{"drain reports each hit once", []step{
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "b", want: true},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "spend", tag: "c", hits: 5},
			{at: 0, op: "drain", report: "a=2,b=1"},
			{at: 0, op: "drain", report: ""},
			{at: 1, op: "allow", tag: "b", want: true},
			{at: 1, op: "drain", report: "b=1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, newTestTable(t, pol, 100), tt.steps)
		})
	}
}

func TestPolicies(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 2}, 100,
		Policy{Name: "login", Prefix: "login:", Rate: 1, Burst: 1},
		Policy{Name: "login-admin", Prefix: "login:admin", Rate: 1, Burst: 3},
		Policy{Name: "office", Prefix: "10.0.", Action: Allow},
		Policy{Name: "banned", Prefix: "bad:", Action: Deny},
	)
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "login:bob", want: true},
		{at: 0, op: "allow", tag: "login:bob", want: false},
		{at: 0, op: "allow", tag: "login:admin1", want: true},
		{at: 0, op: "allow", tag: "login:admin1", want: true},
		{at: 0, op: "allow", tag: "login:admin1", want: true},
		{at: 0, op: "allow", tag: "login:admin1", want: false},
		{at: 0, op: "allow", tag: "other", want: true},
		{at: 0, op: "allow", tag: "other", want: true},
		{at: 0, op: "allow", tag: "other", want: false},
		{at: 0, op: "allow", tag: "10.0.0.1", want: true},
		{at: 0, op: "allow", tag: "10.0.0.1", want: true},
		{at: 0, op: "allow", tag: "10.0.0.1", want: true},
		{at: 0, op: "allow", tag: "bad:x", want: false},
		{at: 0, op: "spend", tag: "10.0.0.1", hits: 100},
		{at: 0, op: "allow", tag: "10.0.0.1", want: true},
		{at: 0, op: "drain", report: "login:admin1=3,login:bob=1,other=2"},
	})
	if got := tb.Stats().Tags; got != 3 {
		t.Errorf("allow and deny policies keep no state: %d tags tracked, want 3", got)
	}
	st, err := tb.Peek(at(0), "login:admin1")
	if err != nil || st.Policy.Name != "login-admin" {
		t.Errorf("policy of login:admin1: got %q (%v), want login-admin", st.Policy.Name, err)
	}
}

func TestEmptyTagNotAccounted(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 1}, 10)
	for i := 0; i < 5; i++ {
		if !tb.Allow(at(0), nil) {
			t.Fatal("empty tag refused")
		}
	}
	if st := tb.Stats(); st.Tags != 0 {
		t.Fatalf("empty tag tracked: %+v", st)
	}
	if hits := tb.Drain(nil); len(hits) != 0 {
		t.Fatalf("empty tag reported: %v", hits)
	}
}

func TestLongTagsKeyedByDigest(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 1}, 10, Policy{Prefix: "api:", Rate: 1, Burst: 2})
	long1 := "api:" + strings.Repeat("x", 1000) + "1"
	long2 := "api:" + strings.Repeat("x", 1000) + "2"
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: long1, want: true},
		{at: 0, op: "allow", tag: long1, want: true},
		{at: 0, op: "allow", tag: long1, want: false},
		{at: 0, op: "allow", tag: long2, want: true},
	})
	hits := tb.Drain(nil)
	if len(hits) != 2 {
		t.Fatalf("got %d reported keys, want 2", len(hits))
	}
	for _, h := range hits {
		if len(h.Key) != 257 || !strings.HasPrefix(h.Key, "api:xxx") {
			t.Errorf("digest key %q: length %d, want 257 with the tag's prefix", h.Key[:16], len(h.Key))
		}
		if h.Key != tb.Key([]byte(long1)) && h.Key != tb.Key([]byte(long2)) {
			t.Errorf("reported key is not Key(tag)")
		}
	}
	// A peer applying the reported key spends the same bucket.
	peer := newTestTable(t, Policy{Rate: 1, Burst: 1}, 10, Policy{Prefix: "api:", Rate: 1, Burst: 2})
	peer.Spend(at(0), tb.Key([]byte(long2)), 2)
	if peer.Allow(at(0), []byte(long2)) {
		t.Error("peer served a long tag whose bucket a report had spent")
	}
	// Exactly max bytes is kept verbatim.
	exact := strings.Repeat("e", 256)
	if tb.Key([]byte(exact)) != exact {
		t.Error("a tag of exactly MaxTagBytes was digested")
	}
}

func TestIdleEntriesForgotten(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 10, Burst: 5}, 1000)
	for i := 0; i < 100; i++ {
		tb.Allow(at(0), []byte(fmt.Sprintf("old%d", i)))
	}
	tb.Drain(nil)
	// 1 s later every old bucket is full again and reported: each insert
	// sweeps two slots, so 100 new tags forget all 100 old ones.
	for i := 0; i < 100; i++ {
		tb.Allow(at(1), []byte(fmt.Sprintf("new%d", i)))
	}
	if got := tb.Stats(); got.Tags != 100 || got.Evictions != 0 {
		t.Fatalf("got %+v, want 100 tags and no evictions", got)
	}
	if _, err := tb.Peek(at(1), "old7"); err != ErrUnknownTag {
		t.Fatalf("full idle tag still tracked: %v", err)
	}
	// Entries with unreported hits are kept even when full again.
	tb.Allow(at(2), []byte("z"))
	for i := 0; i < 300; i++ {
		tb.Allow(at(100), []byte(fmt.Sprintf("late%d", i)))
	}
	if _, err := tb.Peek(at(100), "z"); err != nil {
		t.Fatalf("entry with an unreported hit forgotten: %v", err)
	}
}

func TestEvictionOrder(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, 4)
	spend := func(tag string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if !tb.Allow(at(0), []byte(tag)) {
				t.Fatalf("%s refused at query %d", tag, i+1)
			}
		}
	}
	tracked := func(tag string) bool {
		_, err := tb.Peek(at(0), tag)
		return err == nil
	}
	spend("one", 1)   // lacks 1 token
	spend("five", 5)  // lacks 5
	spend("eight", 8) // lacks 8
	tb.Spend(at(0), "debt", 15)
	tb.Drain(nil)

	// Harm is the extra queries an eviction would admit: the tokens the
	// entry lacks plus its unreported hits. Debt goes last of all.
	steps := []struct {
		insert string
		victim string
	}{
		{"fresh", "one"},    // one: 1; five: 5; eight: 8; debt
		{"second", "fresh"}, // fresh: 1 short + 1 unreported = 2
		{"third", "second"},
	}
	for i, s := range steps {
		spend(s.insert, 1)
		if tracked(s.victim) {
			t.Fatalf("step %d: inserting %q kept %q, want it evicted", i, s.insert, s.victim)
		}
	}
	// Make "third" costly (lacks 7, 7 unreported): "five" goes next.
	spend("third", 6)
	spend("fourth", 1)
	if tracked("five") || !tracked("third") {
		t.Fatalf("inserting fourth: want five evicted and third kept")
	}
	// Put every entry in debt: the least indebted goes (harm counted the
	// same way), so "fourth" (11 short + 1 unreported) and not "debt" (25).
	tb.Spend(at(0), "eight", 10)  // 18 short
	tb.Spend(at(0), "third", 10)  // 17 short + 7 unreported
	tb.Spend(at(0), "fourth", 10) // 11 short + 1 unreported
	spend("fifth", 1)
	if tracked("fourth") || !tracked("debt") || !tracked("fifth") {
		t.Fatalf("inserting fifth among debts: want fourth evicted, debt and fifth kept")
	}
	st := tb.Stats()
	if st.Evictions != 5 || st.Tags != 4 {
		t.Fatalf("stats %+v, want 5 evictions and 4 tags", st)
	}
	// fresh, second and fourth each took an unreported hit with them.
	if st.EvictedHits != 3 {
		t.Fatalf("evicted hits %d, want 3", st.EvictedHits)
	}
	if got := formatHits(tb.Drain(nil)); got != "fifth=1,third=7" {
		t.Fatalf("drain after evictions: %q", got)
	}
}

func TestMaxTagsIsHard(t *testing.T) {
	const max = 5000
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, max)
	for i := 0; i < 50000; i++ {
		tb.Allow(at(0), []byte(fmt.Sprintf("flood-%d", i)))
		if i%997 == 0 {
			tb.Drain(nil)
		}
	}
	st := tb.Stats()
	if st.Tags > max {
		t.Fatalf("%d tags tracked, cap is %d", st.Tags, max)
	}
	if st.Evictions < 50000-max {
		t.Fatalf("%d evictions, want at least %d", st.Evictions, 50000-max)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{Default: Policy{Rate: 1, Burst: 1}, MaxTags: 1, MaxTagBytes: 64}
	bad := map[string]func(c *Config){
		"zero rate":      func(c *Config) { c.Default.Rate = 0 },
		"NaN rate":       func(c *Config) { c.Default.Rate = math.NaN() },
		"zero burst":     func(c *Config) { c.Default.Burst = 0 },
		"no max tags":    func(c *Config) { c.MaxTags = 0 },
		"tiny tag bytes": func(c *Config) { c.MaxTagBytes = 10 },
		"overflow":       func(c *Config) { c.Default.Rate = 1e-9; c.Default.Burst = 1e9 },
		"empty prefix":   func(c *Config) { c.Policies = []Policy{{Rate: 1, Burst: 1}} },
		"same prefix twice": func(c *Config) {
			c.Policies = []Policy{{Prefix: "a", Rate: 1, Burst: 1}, {Prefix: "a", Action: Allow}}
		},
	}
	if _, err := New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range bad {
		c := good
		mutate(&c)
		if _, err := New(c); err == nil || !strings.HasPrefix(err.Error(), "bucket: ") {
			t.Errorf("%s: got %v, want a bucket: error", name, err)
		}
	}
}

// TestConcurrentCountsExact checks that concurrent queries never serve a
// token twice: over any number of goroutines a tag gets exactly burst OKs
// at one instant, and every served hit is drained exactly once.
func TestConcurrentCountsExact(t *testing.T) {
	const burst, tags, workers = 50, 200, 8
	tb := newTestTable(t, Policy{Rate: 1, Burst: burst}, 100000)
	var served [tags]int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	drained := map[string]uint64{}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			hits := tb.Drain(nil)
			mu.Lock()
			for _, h := range hits {
				drained[h.Key] += uint64(h.Count)
			}
			mu.Unlock()
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for round := 0; round < burst*2; round++ {
				for i := 0; i < tags; i++ {
					if tb.Allow(at(0), []byte(fmt.Sprintf("t%d", i))) {
						mu.Lock()
						served[i]++
						mu.Unlock()
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	for _, h := range tb.Drain(nil) {
		drained[h.Key] += uint64(h.Count)
	}
	for i, n := range served {
		tag := fmt.Sprintf("t%d", i)
		if n != burst || drained[tag] != burst {
			t.Fatalf("%s: served %d, drained %d, want %d each", tag, n, drained[tag], burst)
		}
	}
}

// TestDrainVisitsOnlyHitTags checks the mechanism that makes Drain cost
// follow the tags with hits: only they are listed for it, whatever the
// size of the table, evictions and forgetting included.
func TestDrainVisitsOnlyHitTags(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, 50000)
	listed := func() int {
		n := 0
		for i := range tb.shards {
			for _, c := range tb.shards[i].arena.chunks {
				for w, live := range c.live {
					n += bits.OnesCount64(tb.reg.dirty[c.ref>>6+uint32(w)] & live)
				}
			}
		}
		return n
	}
	for i := 0; i < 100000; i++ {
		tb.Allow(at(float64(i%3)), []byte(fmt.Sprintf("k%d", i)))
	}
	if got, want := listed(), tb.Stats().Tags; got != want {
		t.Fatalf("%d entries listed for drain, want %d (every tracked tag has a hit)", got, want)
	}
	tb.Drain(nil)
	if got := listed(); got != 0 {
		t.Fatalf("%d entries listed after drain", got)
	}
	tb.Allow(at(3), []byte("k99999"))
	tb.Allow(at(3), []byte("k99999"))
	tb.Spend(at(3), "k99998", 4)
	if got := listed(); got != 1 {
		t.Fatalf("%d entries listed, want 1", got)
	}
	if got := formatHits(tb.Drain(nil)); got != "k99999=2" {
		t.Fatalf("drain: %q", got)
	}
}

func TestFingerprint(t *testing.T) {
	a := newTestTable(t, Policy{Rate: 1, Burst: 10}, 10,
		Policy{Name: "x", Prefix: "login:", Rate: 0.2, Burst: 5}, Policy{Prefix: "10.", Action: Allow},
		Policy{Prefix: "11.", Action: Deny})
	sameReordered := newTestTable(t, Policy{Rate: 1, Burst: 10}, 99,
		Policy{Prefix: "11.", Action: Deny}, Policy{Prefix: "10.", Action: Allow, Rate: 7},
		Policy{Name: "y", Prefix: "login:", Rate: 0.2, Burst: 5})
	if a.Fingerprint() != sameReordered.Fingerprint() {
		t.Error("same policies in another order or with other names: fingerprints differ")
	}
	for name, other := range map[string]*Table{
		"rate":   newTestTable(t, Policy{Rate: 1, Burst: 10}, 10, Policy{Prefix: "login:", Rate: 0.3, Burst: 5}, Policy{Prefix: "10.", Action: Allow}, Policy{Prefix: "11.", Action: Deny}),
		"burst":  newTestTable(t, Policy{Rate: 1, Burst: 11}, 10, Policy{Prefix: "login:", Rate: 0.2, Burst: 5}, Policy{Prefix: "10.", Action: Allow}, Policy{Prefix: "11.", Action: Deny}),
		"action": newTestTable(t, Policy{Rate: 1, Burst: 10}, 10, Policy{Prefix: "login:", Rate: 0.2, Burst: 5}, Policy{Prefix: "10.", Action: Deny}, Policy{Prefix: "11.", Action: Deny}),
		"prefix": newTestTable(t, Policy{Rate: 1, Burst: 10}, 10, Policy{Prefix: "login", Rate: 0.2, Burst: 5}, Policy{Prefix: "10.", Action: Allow}, Policy{Prefix: "11.", Action: Deny}),
	} {
		if other.Fingerprint() == a.Fingerprint() {
			t.Errorf("different %s, same fingerprint", name)
		}
	}
}
