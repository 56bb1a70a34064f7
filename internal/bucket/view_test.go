package bucket

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"testing"
)

// sharedTable returns a table and a View over its memory, as another
// process maps it, with the heartbeat at t0.
func sharedTable(t *testing.T, def Policy, policies ...Policy) (*Table, *View) {
	t.Helper()
	tb, err := New(Config{Default: def, Policies: policies, MaxTags: 1000, MaxTagBytes: 64, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if tf, sf := tb.SharedFiles(); tf == nil || sf == nil {
		t.Fatal("a shared table has no files")
	}
	v, err := NewView(tb.reg.ro, tb.reg.rw)
	if err != nil {
		t.Fatal(err)
	}
	tb.Beat(at(0))
	return tb, v
}

func ns(sec float64) int64 { return at(sec).UnixNano() }

// TestViewDecidesOnTheTable: a View spends the tokens the daemon's own
// queries see, its hits are drained for the peers, its refusals reach
// the sketches and its counts the policy stats; a tag the table does not
// hold is asked.
func TestViewDecidesOnTheTable(t *testing.T) {
	tb, v := sharedTable(t, Policy{Rate: 1, Burst: 3})
	if d := v.Decide(ns(0), []byte("a")); d.Code != Ask {
		t.Fatalf("unknown tag: %v, want Ask", d.Code)
	}
	if !tb.Allow(at(0), []byte("a")) {
		t.Fatal("first query refused")
	}
	var got []Code
	for range 3 {
		got = append(got, v.Decide(ns(0), []byte("a")).Code)
	}
	if got[0] != OK || got[1] != OK || got[2] != No {
		t.Fatalf("in process: %v, want OK OK No", got)
	}
	if tb.Allow(at(0), []byte("a")) {
		t.Fatal("the daemon serves what the view spent")
	}
	if d := v.Decide(ns(1), []byte("a")); d.Code != OK || d.Remaining != 0 || d.Limit != 3 {
		t.Fatalf("a second later: %+v, want OK with 0 left of 3", d)
	}
	if got := formatHits(tb.Drain(nil)); got != "a=4" {
		t.Fatalf("drained %q, want a=4 (1 by the daemon, 3 in process)", got)
	}
	st := tb.PolicyStats()[0]
	if st.OK != 4 || st.NO != 2 {
		t.Fatalf("policy stats OK %d NO %d, want 4 and 2", st.OK, st.NO)
	}
	refusals, _ := tb.TakeRefusals(nil)
	if len(refusals) != 1 || len(refusals[0].Items) != 1 || refusals[0].Items[0].Count != 2 {
		t.Fatalf("refusals %+v, want a refused twice", refusals)
	}
	// Peers' hits land on the tag decided in process.
	tb.Spend(at(5), "a", 10)
	tb.Beat(at(5))
	if d := v.Decide(ns(5), []byte("a")); d.Code != No {
		t.Fatalf("after a peer's 10 hits: %v, want No", d.Code)
	}
}

// TestViewPolicies: prefix policies found through the shared trie, allow,
// deny and dry run as the daemon answers them, a long tag asked.
func TestViewPolicies(t *testing.T) {
	tb, v := sharedTable(t, Policy{Rate: 1, Burst: 5},
		Policy{Prefix: "login:", Rate: 1, Burst: 1},
		Policy{Prefix: "login:admin", Rate: 1, Burst: 2},
		Policy{Prefix: "ok:", Action: Allow},
		Policy{Prefix: "no:", Action: Deny},
		Policy{Prefix: "dry:", Rate: 1, Burst: 1, DryRun: true})
	for _, tag := range []string{"login:x", "login:admin7", "dry:1"} {
		tb.Allow(at(0), []byte(tag))
	}
	cases := []struct {
		tag  string
		want Code
	}{{"login:x", No}, {"login:admin7", OK}, {"login:admin7", No}, {"ok:1", OK}, {"no:1", No}, {"dry:1", OK}, {"dry:1", OK}}
	for _, c := range cases {
		if d := v.Decide(ns(0), []byte(c.tag)); d.Code != c.want {
			t.Errorf("%s: %v, want %v", c.tag, d.Code, c.want)
		}
	}
	long := make([]byte, 65)
	if d := v.Decide(ns(0), long); d.Code != Ask {
		t.Errorf("a tag past max_tag_bytes: %v, want Ask", d.Code)
	}
	for _, p := range tb.PolicyStats() {
		if p.Prefix == "dry:" && p.DryRunRefused != 2 {
			t.Errorf("dry run counted %d refusals, want 2", p.DryRunRefused)
		}
		if p.Prefix == "no:" && p.NO != 1 {
			t.Errorf("deny counted %d, want 1", p.NO)
		}
	}
	// The dry run's would-be refusals made in process reach the heaviest
	// refused tags at the next drain, as the daemon's own do.
	tb.Drain(nil)
	found := false
	refusals, _ := tb.TakeRefusals(nil)
	for _, r := range refusals {
		for _, it := range r.Items {
			if r.Policy == "dry:" && string(it.Key) == "dry:1" && it.Count == 2 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("refusals %+v, want dry:1 refused twice under dry:", refusals)
	}
	// A reload reaches the view without attaching again.
	if err := tb.Reconfigure(at(0), Config{Default: Policy{Rate: 1, Burst: 5}, MaxTags: 1000, MaxTagBytes: 64}); err != nil {
		t.Fatal(err)
	}
	if d := v.Decide(ns(0), []byte("no:1")); d.Code != Ask {
		t.Errorf("no:1 after the deny policy went: %v, want Ask (a new tag)", d.Code)
	}
}

// TestViewLeft: a retired table, or one without a heartbeat for a
// second, is left.
func TestViewLeft(t *testing.T) {
	tb, v := sharedTable(t, Policy{Rate: 1, Burst: 5})
	tb.Allow(at(0), []byte("a"))
	if d := v.Decide(ns(1.5), []byte("a")); d.Code != Left {
		t.Fatalf("1.5 s after the last beat: %v, want Left", d.Code)
	}
	tb.Beat(at(1.5))
	if d := v.Decide(ns(1.5), []byte("a")); d.Code != OK {
		t.Fatalf("after a beat: %v, want OK", d.Code)
	}
	tb.Retire()
	if d := v.Decide(ns(1.5), []byte("a")); d.Code != Left {
		t.Fatalf("retired: %v, want Left", d.Code)
	}
}

// TestGarbageInTheStateFile writes random bytes over every record and
// the dirty bitmap, as a caller gone wrong could: the daemon keeps
// answering, draining, sweeping and exporting without a crash, and
// reports no tag more hits than its policy could have served.
func TestGarbageInTheStateFile(t *testing.T) {
	tb, v := sharedTable(t, Policy{Rate: 1, Burst: 5})
	tags := []string{"a", "bb", "ccc", "a-longer-tag-of-some-length"}
	for _, tag := range tags {
		tb.Allow(at(0), []byte(tag))
	}
	tb.Drain(nil)
	rng := rand.New(rand.NewPCG(1, 2))
	used := int(tb.reg.next.Load())
	for round := range 50 {
		for i := chunkSize; i < used; i++ {
			tb.reg.records[i] = byte(rng.Uint32())
		}
		for i := range tb.reg.dirty[:used/64+1] {
			tb.reg.dirty[i] = rng.Uint64()
		}
		now := float64(round) + 1
		tb.Beat(at(now))
		for _, tag := range tags {
			tb.Allow(at(now), []byte(tag))
			tb.Spend(at(now), tag, 3)
			v.Decide(ns(now), []byte(tag))
		}
		for _, h := range tb.Drain(nil) {
			if h.Count > 5+1+1+1 {
				t.Fatalf("round %d: drained %d hits for %q in a second, more than a burst of 5 at 1/s allows", round, h.Count, h.Key)
			}
		}
		tb.Export(at(now), func([]Level) error { return nil })
		tb.Stats()
		for i := range 200 {
			tb.Allow(at(now), []byte{byte(i), byte(round)})
		}
	}
}

// TestViewRemainingAgreesWithVerdict: the whole tokens a View reports
// left are the floor of the level the daemon's own verdict reports
// (the HTTP endpoint's RateLimit header), at every fraction of a token.
func TestViewRemainingAgreesWithVerdict(t *testing.T) {
	for _, step := range []float64{0.1, 0.25, 0.5, 0.7, 0.9, 1.3} {
		tb, v := sharedTable(t, Policy{Rate: 1, Burst: 4})
		other, err := New(Config{Default: Policy{Rate: 1, Burst: 4}, MaxTags: 1000, MaxTagBytes: 64})
		if err != nil {
			t.Fatal(err)
		}
		tb.Allow(at(0), []byte("a"))
		other.Allow(at(0), []byte("a"))
		for i := 1; i < 12; i++ {
			now := float64(i) * step / 3
			tb.Beat(at(now))
			d := v.Decide(ns(now), []byte("a"))
			vd := other.AllowN(at(now), []byte("a"), 1)
			if (d.Code == OK) != vd.Allowed {
				t.Fatalf("step %v query %d: view %v, verdict allowed %v", step, i, d.Code, vd.Allowed)
			}
			if want := int64(max(math.Floor(vd.Tokens), 0)); vd.Allowed && d.Remaining != want {
				t.Fatalf("step %v query %d: remaining %d, verdict's level %.3f (floor %d)", step, i, d.Remaining, vd.Tokens, want)
			}
		}
	}
}

// TestViewPolicyBlockTooLarge: a policy set too large for the shared
// block sends processes to ask, and one that fits again lets them decide.
func TestViewPolicyBlockTooLarge(t *testing.T) {
	tb, v := sharedTable(t, Policy{Rate: 1, Burst: 3})
	tb.Allow(at(0), []byte("a"))
	set := *tb.policies.Load()
	big := append(policySet(nil), set...)
	x := *set[0].index
	x.nodes = make([]trieNode, policyBlockMax/8)
	big[0].index = &x
	tb.reg.writePolicies(big)
	if d := v.Decide(ns(0), []byte("a")); d.Code != Ask {
		t.Fatalf("with a policy set too large to share: %v, want Ask", d.Code)
	}
	tb.reg.writePolicies(set)
	if d := v.Decide(ns(0), []byte("a")); d.Code != OK {
		t.Fatalf("with the set fitting again: %v, want OK", d.Code)
	}
	tb.Retire()
	tb.reg.writePolicies(set)
	if d := v.Decide(ns(0), []byte("a")); d.Code != Left {
		t.Fatalf("a retired table after a reload: %v, want Left", d.Code)
	}
}

// TestViewPolicyNames: the policy block carries each policy's name, burst
// and rate, so that an answer decided in process states the same headers
// as the daemon's; a reload renames them; a name past 255 bytes is cut.
func TestViewPolicyNames(t *testing.T) {
	long := string(make([]byte, 300))
	tb, v := sharedTable(t, Policy{Rate: 2, Burst: 5},
		Policy{Name: "logins", Prefix: "login:", Rate: 0.5, Burst: 1, DryRun: true},
		Policy{Prefix: "no:", Action: Deny},
		Policy{Name: long, Prefix: "x:", Rate: 1, Burst: 3})
	want := []Policy{
		{Name: "default", Rate: 2, Burst: 5},
		{Name: "logins", Rate: 0.5, Burst: 1, DryRun: true},
		{Name: "no:", Action: Deny},
		{Name: long[:255], Rate: 1, Burst: 3},
	}
	for i, w := range want {
		p, ok := v.Policy(i)
		if !ok || p != w {
			t.Errorf("policy %d: %+v %v, want %+v", i, p, ok, w)
		}
	}
	if _, ok := v.Policy(len(want)); ok {
		t.Errorf("policy %d of %d: ok", len(want), len(want))
	}
	if _, ok := v.Policy(-1); ok {
		t.Error("policy -1: ok")
	}
	if err := tb.Reconfigure(at(0), Config{Default: Policy{Name: "base", Rate: 1, Burst: 2}, MaxTags: 1000, MaxTagBytes: 64}); err != nil {
		t.Fatal(err)
	}
	if p, ok := v.Policy(0); !ok || p.Name != "base" || p.Burst != 2 {
		t.Errorf("policy 0 after a reload: %+v %v, want base with burst 2", p, ok)
	}
	// A decision's policy is the one it was made under: after a reload,
	// none.
	tb.Allow(at(0), []byte("q"))
	d := v.Decide(ns(0), []byte("q"))
	if p, ok := v.PolicyOf(d); !ok || p.Name != "base" {
		t.Errorf("the policy of a decision: %+v %v, want base", p, ok)
	}
	if err := tb.Reconfigure(at(0), Config{Default: Policy{Name: "other", Rate: 1, Burst: 2}, MaxTags: 1000, MaxTagBytes: 64}); err != nil {
		t.Fatal(err)
	}
	if p, ok := v.PolicyOf(d); ok {
		t.Errorf("the policy of a decision made before a reload: %+v, ok", p)
	}
	// Names that overrun the memory are no names, as in C.
	off := v.hdr64(hdrPolicyActive)
	binary.LittleEndian.PutUint32(tb.reg.ro[off+12:], 1<<30)
	if p, ok := v.Policy(0); !ok || p.Name != "default" || p.Burst != 2 {
		t.Errorf("policy 0 with its names past the block: %+v %v, want it named default", p, ok)
	}
}
