package bucket

import (
	"math"
	"testing"
	"time"
)

// verdictStep is one AllowN at a fixed instant and the verdict it must
// give.
type verdictStep struct {
	check   bool    // Check instead of AllowN: spends nothing
	at      float64 // seconds after t0
	tag     string
	n       int
	allowed bool
	tokens  float64
	wait    float64 // seconds
	full    float64 // seconds
}

func runVerdicts(t *testing.T, tb *Table, steps []verdictStep) {
	t.Helper()
	for i, s := range steps {
		op, ask := "AllowN", tb.AllowN
		if s.check {
			op, ask = "Check", tb.Check
		}
		v := ask(at(s.at), []byte(s.tag), s.n)
		wait := v.Wait.Seconds()
		if v.Wait == math.MaxInt64 {
			wait = math.Inf(1)
		}
		if v.Allowed != s.allowed || math.Abs(v.Tokens-s.tokens) > 1e-9 ||
			math.Abs(wait-s.wait) > 1e-9 && !(math.IsInf(wait, 1) && math.IsInf(s.wait, 1)) ||
			math.Abs(v.Full.Seconds()-s.full) > 1e-9 {
			t.Fatalf("step %d (t=%v %s %q %d): got allowed %v tokens %v wait %v full %v, want %v %v %v %v",
				i, s.at, op, s.tag, s.n, v.Allowed, v.Tokens, wait, v.Full.Seconds(), s.allowed, s.tokens, s.wait, s.full)
		}
	}
}

func TestAllowNSteps(t *testing.T) {
	inf := math.Inf(1)
	tb := newTestTable(t, Policy{Rate: 2, Burst: 3}, 100)
	runVerdicts(t, tb, []verdictStep{
		{at: 0, tag: "a", n: 1, allowed: true, tokens: 2, wait: 0, full: 0.5},
		{at: 0, tag: "a", n: 2, allowed: true, tokens: 0, wait: 1, full: 1.5},
		{at: 0, tag: "a", n: 1, allowed: false, tokens: 0, wait: 0.5, full: 1.5},
		{at: 0.25, tag: "a", n: 1, allowed: false, tokens: 0.5, wait: 0.25, full: 1.25},
		{at: 0.5, tag: "a", n: 1, allowed: true, tokens: 0, wait: 0.5, full: 1.5},
		// More than the burst is never served and does not spend.
		{at: 0.5, tag: "b", n: 4, allowed: false, tokens: 3, wait: inf, full: 0},
		{at: 0.5, tag: "a", n: 4, allowed: false, tokens: 0, wait: inf, full: 1.5},
		{at: 0.5, tag: "b", n: 3, allowed: true, tokens: 0, wait: 1.5, full: 1.5},
		// n < 1 costs one token.
		{at: 10, tag: "c", n: 0, allowed: true, tokens: 2, wait: 0, full: 0.5},
		{at: 10, tag: "c", n: -5, allowed: true, tokens: 1, wait: 0, full: 1},
	})
	if _, err := tb.Peek(at(0.5), "b"); err != nil {
		t.Errorf("b spent 3 tokens: %v", err)
	}
	if got := formatHits(tb.Drain(nil)); got != "a=4,b=3,c=2" {
		t.Errorf("unreported hits: got %q, want a=4,b=3,c=2 (a served query of n tokens is n hits)", got)
	}
}

// Check gives the verdict AllowN would, level and wait included, and
// spends and counts nothing; Refuse counts a refusal and spends nothing.
func TestCheckSteps(t *testing.T) {
	inf := math.Inf(1)
	tb := newTestTable(t, Policy{Rate: 2, Burst: 3}, 100)
	runVerdicts(t, tb, []verdictStep{
		{check: true, at: 0, tag: "a", n: 1, allowed: true, tokens: 3, wait: 0, full: 0},
		{check: true, at: 0, tag: "a", n: 3, allowed: true, tokens: 3, wait: 0, full: 0},
		{check: true, at: 0, tag: "a", n: 4, allowed: false, tokens: 3, wait: inf, full: 0},
		{at: 0, tag: "a", n: 2, allowed: true, tokens: 1, wait: 0.5, full: 1},
		{check: true, at: 0, tag: "a", n: 0, allowed: true, tokens: 1, wait: 0, full: 1},
		{check: true, at: 0, tag: "a", n: 2, allowed: false, tokens: 1, wait: 0.5, full: 1},
		{check: true, at: 0.25, tag: "a", n: 2, allowed: false, tokens: 1.5, wait: 0.25, full: 0.75},
		{check: true, at: 0.5, tag: "a", n: 2, allowed: true, tokens: 2, wait: 0, full: 0.5},
		{at: 0.5, tag: "a", n: 2, allowed: true, tokens: 0, wait: 1, full: 1.5},
		{check: true, at: 0.5, tag: "a", n: 1, allowed: false, tokens: 0, wait: 0.5, full: 1.5},
	})
	tb.Refuse(at(0.5), []byte("a"))
	tb.Refuse(at(0.5), []byte("new"))
	if st, err := tb.Peek(at(0.5), "new"); err == nil {
		t.Errorf("Refuse tracked a new tag: %+v", st)
	}
	if st, _ := tb.Peek(at(0.5), "a"); st.Tokens != 0 || st.Unreported != 4 {
		t.Errorf("a after Refuse: %+v, want 0 tokens and 4 unreported", st)
	}
	if ps := tb.PolicyStats(); ps[0].OK != 2 || ps[0].NO != 2 {
		t.Errorf("counted %d OK, %d NO: want the 2 spends and the 2 refusals, no check", ps[0].OK, ps[0].NO)
	}
	rf, _ := tb.TakeRefusals(nil)
	if len(rf) != 1 || rf[0].Total != 2 || len(rf[0].Items) != 2 {
		t.Errorf("refusals: %+v, want a and new once each", rf)
	}
}

// Check and Refuse under allow, deny and dry-run policies: the fixed
// verdicts, a dry run's would-be refusal served, and a refusal counted
// only where the policy refuses.
func TestCheckPolicies(t *testing.T) {
	tb, err := New(Config{Default: Policy{Name: "dry", Rate: 1, Burst: 1, DryRun: true}, MaxTags: 10, MaxTagBytes: 64,
		Policies: []Policy{{Name: "ok", Prefix: "ok:", Action: Allow}, {Name: "no", Prefix: "no:", Action: Deny}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tag                  string
		n                    int
		allowed, wouldRefuse bool
	}{
		{"ok:a", 5, true, false},
		{"no:a", 1, false, false},
		{"d", 1, true, false},
		{"d", 2, true, true},
		{"", 9, true, false},
	} {
		if v := tb.Check(at(0), []byte(c.tag), c.n); v.Allowed != c.allowed || v.WouldRefuse != c.wouldRefuse {
			t.Errorf("Check(%q, %d) = %+v, want allowed %v, would refuse %v", c.tag, c.n, v, c.allowed, c.wouldRefuse)
		}
		tb.Refuse(at(0), []byte(c.tag))
	}
	for _, ps := range tb.PolicyStats() {
		want := uint64(0)
		if ps.Name == "no" {
			want = 1
		}
		if ps.OK != 0 || ps.NO != want || ps.DryRunRefused != 0 {
			t.Errorf("policy %s counted %+v, want %d NO and nothing else", ps.Name, ps, want)
		}
	}
}

func TestAllowNMatchesAllow(t *testing.T) {
	a := newTestTable(t, Policy{Rate: 1, Burst: 5}, 100, Policy{Prefix: "x", Rate: 3, Burst: 2})
	b := newTestTable(t, Policy{Rate: 1, Burst: 5}, 100, Policy{Prefix: "x", Rate: 3, Burst: 2})
	tags := []string{"p", "q", "xa", "p", "p", "xa", "xa", "xa", "p", "p", "p", "q"}
	for i, tag := range tags {
		now := at(float64(i) * 0.1)
		if got, want := b.AllowN(now, []byte(tag), 1).Allowed, a.Allow(now, []byte(tag)); got != want {
			t.Fatalf("query %d (%q): AllowN %v, Allow %v", i, tag, got, want)
		}
	}
	pa, pb := a.PolicyStats(), b.PolicyStats()
	for i := range pa {
		if pa[i].OK != pb[i].OK || pa[i].NO != pb[i].NO {
			t.Errorf("policy %s: Allow counted %d/%d, AllowN %d/%d", pa[i].Name, pa[i].OK, pa[i].NO, pb[i].OK, pb[i].NO)
		}
	}
}

func TestAllowNPolicies(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 5}, 100,
		Policy{Name: "ok", Prefix: "ok:", Action: Allow}, Policy{Name: "no", Prefix: "no:", Action: Deny},
		Policy{Name: "login", Prefix: "login:", Rate: 0.5, Burst: 2})
	for _, c := range []struct {
		tag     string
		allowed bool
		policy  string
	}{{"", true, ""}, {"ok:1", true, "ok"}, {"no:1", false, "no"}, {"login:1", true, "login"}, {"z", true, "default"}} {
		v := tb.AllowNNow([]byte(c.tag), 1)
		if v.Allowed != c.allowed || v.Policy.Name != c.policy {
			t.Errorf("%q: got allowed %v policy %q, want %v %q", c.tag, v.Allowed, v.Policy.Name, c.allowed, c.policy)
		}
	}
	if st := tb.Stats(); st.Tags != 2 {
		t.Errorf("tracked %d tags, want 2 (the limited ones only)", st.Tags)
	}
}

func TestAllowNLongTagSharesBucketWithAllow(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 0.001, Burst: 2}, 100)
	long := make([]byte, 1000)
	for i := range long {
		long[i] = byte('a' + i%26)
	}
	now := at(0)
	if !tb.Allow(now, long) || !tb.AllowN(now, long, 1).Allowed {
		t.Fatal("the first two queries were refused")
	}
	if tb.AllowN(now, long, 1).Allowed || tb.Allow(now, long) {
		t.Error("a third query was served: AllowN and Allow keep different buckets for a long tag")
	}
}

// BenchmarkAllowN is AllowN's served branch for tags already tracked: one
// token taken, one unreported hit counted and the verdict's figures
// worked out. The clock moves one token's time per query (rate 1e9/s), so
// every query finds a token; served/op shows it.
func BenchmarkAllowN(b *testing.B) {
	tags := benchTags(10000)
	tb := newTestTable(b, Policy{Rate: 1e9, Burst: 1000}, 2*len(tags))
	now := time.Unix(1e9, 0)
	for _, tag := range tags {
		tb.Allow(now, tag)
	}
	b.ReportAllocs()
	ok, i := 0, 0
	for b.Loop() {
		now = now.Add(time.Nanosecond)
		if tb.AllowN(now, tags[i], 1).Allowed {
			ok++
		}
		if i++; i == len(tags) {
			i = 0
		}
	}
	served(b, ok, b.N)
}
