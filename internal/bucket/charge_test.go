package bucket

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"testing"
)

// chargeStep is one operation at a fixed instant: a charge, a query, a
// look at the bucket or a drain.
type chargeStep struct {
	at     float64 // seconds after t0
	op     string  // "charge", "allow", "tokens", "drain"
	tag    string
	n      uint32  // charge
	want   bool    // allow
	tokens float64 // tokens: the bucket level
	report string  // drain: the hits as "tag=n,..." sorted by tag
}

func runCharges(t *testing.T, tb *Table, steps []chargeStep) {
	t.Helper()
	for i, s := range steps {
		now := at(s.at)
		switch s.op {
		case "charge":
			tb.Charge(now, []byte(s.tag), s.n)
		case "allow":
			if got := tb.Allow(now, []byte(s.tag)); got != s.want {
				t.Fatalf("step %d (t=%v allow %q): got %v, want %v", i, s.at, s.tag, got, s.want)
			}
		case "tokens":
			st, _ := tb.Peek(now, s.tag)
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

// TestChargeSteps: burst 3, rate 2 (a token every 0.5 s). A charge takes
// what it is given into debt, is never refused, counts its tokens as hits
// to report, and the queries after it are refused until the debt has
// refilled.
func TestChargeSteps(t *testing.T) {
	pol := Policy{Rate: 2, Burst: 3}
	tests := []struct {
		name  string
		steps []chargeStep
	}{
		{"into debt, then refused until refilled", []chargeStep{
			{at: 0, op: "charge", tag: "a", n: 10},
			{at: 0, op: "tokens", tag: "a", tokens: -7},
			{at: 0, op: "allow", tag: "a", want: false},
			{at: 3, op: "tokens", tag: "a", tokens: -1},
			{at: 3.5, op: "allow", tag: "a", want: false}, // 0 tokens
			{at: 4, op: "allow", tag: "a", want: true},    // 1 token
			{at: 4, op: "allow", tag: "a", want: false},
			{at: 4, op: "drain", report: "a=11"},
			{at: 4, op: "drain", report: ""},
		}},
		{"after queries, on what is left", []chargeStep{
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "charge", tag: "a", n: 1},
			{at: 0, op: "tokens", tag: "a", tokens: 1},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "allow", tag: "a", want: false},
			{at: 0, op: "charge", tag: "a", n: 2}, // nothing left: into debt
			{at: 0, op: "tokens", tag: "a", tokens: -2},
			{at: 0, op: "drain", report: "a=5"},
		}},
		{"charges add up, and a peer's report on top", []chargeStep{
			{at: 0, op: "charge", tag: "a", n: 2},
			{at: 0, op: "charge", tag: "a", n: 3},
			{at: 0, op: "tokens", tag: "a", tokens: -2},
			{at: 1, op: "tokens", tag: "a", tokens: 0},
			{at: 1, op: "drain", report: "a=5"},
			{at: 100, op: "tokens", tag: "a", tokens: 3}, // refill capped at burst
			{at: 100, op: "charge", tag: "a", n: 1},
			{at: 100, op: "tokens", tag: "a", tokens: 2},
		}},
		{"a clock stepping back refunds nothing", []chargeStep{
			{at: 10, op: "charge", tag: "a", n: 4},
			{at: 5, op: "tokens", tag: "a", tokens: -1},
			{at: 5, op: "charge", tag: "a", n: 1},
			{at: 10, op: "tokens", tag: "a", tokens: -2},
			{at: 11, op: "tokens", tag: "a", tokens: 0},
		}},
		{"nothing charged", []chargeStep{
			{at: 0, op: "charge", tag: "a", n: 0},
			{at: 0, op: "charge", tag: "", n: 5},
			{at: 0, op: "drain", report: ""},
			{at: 0, op: "allow", tag: "a", want: true},
			{at: 0, op: "tokens", tag: "a", tokens: 2},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTestTable(t, pol, 100)
			runCharges(t, tb, tc.steps)
			if st := tb.Stats(); st.Tags > 1 {
				t.Errorf("%d tags tracked, want at most 1", st.Tags)
			}
		})
	}
}

// TestChargeCountedApart: charges are counted per policy, apart from the
// queries, whatever the answers.
func TestChargeCountedApart(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 2}, 100, Policy{Name: "llm", Prefix: "llm:", Rate: 10, Burst: 100})
	tb.Allow(at(0), []byte("a"))
	tb.Charge(at(0), []byte("a"), 5)
	tb.Allow(at(0), []byte("a"))
	tb.Charge(at(0), []byte("llm:k"), 70)
	tb.Charge(at(0), []byte("llm:k"), 80)
	tb.Charge(at(0), []byte("llm:k"), 0)
	want := map[string]PolicyStats{
		"default": {OK: 1, NO: 1, Charges: 1, ChargedTokens: 5},
		"llm":     {Charges: 2, ChargedTokens: 150},
	}
	for _, ps := range tb.PolicyStats() {
		w := want[ps.Name]
		if ps.OK != w.OK || ps.NO != w.NO || ps.Charges != w.Charges || ps.ChargedTokens != w.ChargedTokens {
			t.Errorf("policy %s: %+v, want %d OK %d NO %d charges of %d tokens", ps.Name, ps, w.OK, w.NO, w.Charges, w.ChargedTokens)
		}
	}
	// The counts survive a reload, by policy name.
	if err := tb.Reconfigure(at(0), Config{Default: Policy{Rate: 1, Burst: 2}, MaxTags: 100, MaxTagBytes: 256,
		Policies: []Policy{{Name: "llm", Prefix: "llm:", Rate: 1, Burst: 100}}}); err != nil {
		t.Fatal(err)
	}
	if ps := tb.PolicyStats()[1]; ps.Charges != 2 || ps.ChargedTokens != 150 {
		t.Errorf("after a reload: %+v, want 2 charges of 150 tokens", ps)
	}
}

// TestChargeSaturates: the largest charge at the slowest rate neither
// overflows the bucket's time nor the unreported count, and a second one
// changes neither.
func TestChargeSaturates(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 1}, 100)
	for i := range 2 {
		tb.Charge(at(0), []byte("a"), math.MaxUint32)
		st, err := tb.Peek(at(0), "a")
		if err != nil {
			t.Fatal(err)
		}
		// The debt is capped at maxAhead nanoseconds of refill (about 73
		// years), 1000 s a token.
		wantTokens := 1 - float64(maxAhead)/1e12
		if math.Abs(st.Tokens-wantTokens) > 1e-6 || st.Unreported != math.MaxUint32 {
			t.Fatalf("charge %d: %+v, want %v tokens and %d unreported", i+1, st, wantTokens, uint32(math.MaxUint32))
		}
	}
	for _, sec := range []float64{0, 1000, 1e6} {
		if tb.Allow(at(sec), []byte("a")) {
			t.Fatalf("a tag charged 2^32-1 tokens at 0.001/s served %v s later", sec)
		}
	}
	// A peer's report on top stays capped too.
	tb.Spend(at(1e6), "a", math.MaxUint32)
	if st, _ := tb.Peek(at(1e6), "a"); !(st.Tokens < 0) || math.IsInf(st.Tokens, 0) {
		t.Fatalf("after a report on top: %v tokens", st.Tokens)
	}
	hits := tb.Drain(nil)
	if len(hits) != 1 || hits[0].Count != math.MaxUint32 {
		t.Fatalf("drained %+v, want a=%d", hits, uint32(math.MaxUint32))
	}
	// At the fastest rate the largest charge is a few seconds of debt.
	fast := newTestTable(t, Policy{Rate: 1e9, Burst: 1}, 100)
	fast.Charge(at(0), []byte("b"), math.MaxUint32)
	if st, _ := fast.Peek(at(0), "b"); st.Tokens != 1-math.MaxUint32 {
		t.Fatalf("at 1e9/s: %v tokens, want %v", st.Tokens, 1-float64(math.MaxUint32))
	}
}

// TestChargeLongTag: a tag over MaxTagBytes is charged under its digest
// key, the one Allow queries and Drain reports.
func TestChargeLongTag(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 3}, 100, Policy{Name: "api", Prefix: "api:", Rate: 1, Burst: 3})
	long := []byte("api:" + strings.Repeat("x", 400))
	other := bytes.Clone(long)
	other[len(other)-1] = 'y' // the same first bytes, another digest
	key := tb.Key(long)
	if len(key) != 257 {
		t.Fatalf("key of %d bytes, want a digest key of 257", len(key))
	}
	tb.Charge(at(0), long, 5)
	st, err := tb.Peek(at(0), key)
	if err != nil || st.Tokens != -2 || st.Unreported != 5 || st.Policy.Name != "api" {
		t.Fatalf("digest key %+v, %v: want -2 tokens, 5 unreported, policy api", st, err)
	}
	if tb.Allow(at(0), long) {
		t.Fatal("the long tag was served after its charge")
	}
	if !tb.Allow(at(0), other) {
		t.Fatal("a long tag with the same prefix was refused: charged under the same key")
	}
	hits := tb.Drain(nil)
	for _, h := range hits {
		if h.Key == key && h.Count != 5 {
			t.Fatalf("drained %d hits for the long tag, want 5", h.Count)
		}
	}
	if len(hits) != 2 {
		t.Fatalf("drained %d keys, want 2", len(hits))
	}
}

// TestChargeAllowDeny: allow and deny policies keep no bucket, so a
// charge under them changes and counts nothing.
func TestChargeAllowDeny(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 3}, 100,
		Policy{Name: "free", Prefix: "free:", Action: Allow}, Policy{Name: "banned", Prefix: "ban:", Action: Deny})
	tb.Charge(at(0), []byte("free:1"), 100)
	tb.Charge(at(0), []byte("ban:1"), 100)
	tb.Charge(at(0), []byte("free:"+strings.Repeat("z", 300)), 100)
	if st := tb.Stats(); st.Tags != 0 {
		t.Errorf("%d tags tracked, want none", st.Tags)
	}
	if hits := tb.Drain(nil); len(hits) != 0 {
		t.Errorf("drained %v, want nothing", hits)
	}
	for _, ps := range tb.PolicyStats() {
		if ps.Charges != 0 || ps.ChargedTokens != 0 || ps.OK != 0 || ps.NO != 0 {
			t.Errorf("policy %s counted %+v, want nothing", ps.Name, ps)
		}
	}
	if !tb.Allow(at(0), []byte("free:1")) || tb.Allow(at(0), []byte("ban:1")) {
		t.Error("a charge changed the answer of an allow or deny policy")
	}
}

// TestChargeConcurrent charges, queries and drains from several
// goroutines at once, with a reload in the middle: every token charged
// and every query served is reported exactly once, and every charge is
// counted.
func TestChargeConcurrent(t *testing.T) {
	cfg := Config{Default: Policy{Rate: 1, Burst: 1000000}, MaxTags: 1000, MaxTagBytes: 256,
		Policies: []Policy{{Name: "llm", Prefix: "llm:", Rate: 1, Burst: 10}}}
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 4, 500
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		drained = map[string]uint64{}
		served  = make([]uint64, workers) // queries served, per worker
		stop    = make(chan struct{})
		drainer = make(chan struct{})
	)
	drain := func() {
		mu.Lock()
		for _, h := range tb.Drain(nil) {
			drained[h.Key] += uint64(h.Count)
		}
		mu.Unlock()
	}
	go func() {
		defer close(drainer)
		for {
			select {
			case <-stop:
				return
			default:
				drain()
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				tb.Charge(at(0), []byte("shared"), uint32(i%7))
				tb.Charge(at(0), []byte("llm:shared"), 3)
				if tb.Allow(at(0), []byte("shared")) {
					served[w]++
				}
				if i == rounds/2 && w == 0 {
					if err := tb.Reconfigure(at(0), cfg); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-drainer
	drain()
	var perWorker, all uint64
	for i := range rounds {
		perWorker += uint64(i % 7)
	}
	for _, n := range served {
		all += n
	}
	if want := workers*perWorker + all; drained["shared"] != want {
		t.Errorf("shared: %d hits reported, want %d (%d charged, %d served)", drained["shared"], want, workers*perWorker, all)
	}
	if want := uint64(workers * rounds * 3); drained["llm:shared"] != want {
		t.Errorf("llm:shared: %d hits reported, want %d", drained["llm:shared"], want)
	}
	zero := uint64(rounds / 7 * workers) // charges of 0 tokens are not counted
	if rounds%7 > 0 {
		zero += workers
	}
	for _, ps := range tb.PolicyStats() {
		switch ps.Name {
		case "default":
			if ps.Charges != workers*rounds-zero || ps.ChargedTokens != workers*perWorker || ps.OK != all {
				t.Errorf("default: %+v, want %d charges of %d tokens, %d OK", ps, workers*rounds-zero, workers*perWorker, all)
			}
		case "llm":
			if ps.Charges != workers*rounds || ps.ChargedTokens != workers*rounds*3 {
				t.Errorf("llm: %+v, want %d charges of %d tokens", ps, workers*rounds, workers*rounds*3)
			}
		}
	}
}
