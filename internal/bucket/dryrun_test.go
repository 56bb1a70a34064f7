package bucket

import (
	"testing"
)

// TestDryRunServesAndKeepsTheBucket runs the same queries through a
// limiting table and a dry-run one: every answer of the dry run is OK, its
// bucket and its reports are exactly the limiting table's, and what the
// limit refused is counted.
func TestDryRunServesAndKeepsTheBucket(t *testing.T) {
	limit := Policy{Rate: 2, Burst: 3}
	dry := limit
	dry.DryRun = true
	lim := newTestTable(t, limit, 100)
	run := newTestTable(t, dry, 100)
	refused := 0
	for i := 0; i < 40; i++ {
		now := at(float64(i) * 0.1)
		tag := []byte("a")
		if i%5 == 4 {
			tag = []byte("b")
		}
		want := lim.Allow(now, tag)
		if !want {
			refused++
		}
		if !run.Allow(now, tag) {
			t.Fatalf("query %d: the dry run refused", i)
		}
		for _, k := range []string{"a", "b"} {
			ls, _ := lim.Peek(now, k)
			rs, _ := run.Peek(now, k)
			if ls.Tokens != rs.Tokens || ls.Unreported != rs.Unreported {
				t.Fatalf("query %d: %s: limiting bucket %v/%d, dry run's %v/%d", i, k, ls.Tokens, ls.Unreported, rs.Tokens, rs.Unreported)
			}
		}
	}
	if refused == 0 {
		t.Fatal("the limit never refused: the test proves nothing")
	}
	if a, b := formatHits(lim.Drain(nil)), formatHits(run.Drain(nil)); a != b {
		t.Errorf("reports differ: limiting %q, dry run %q", a, b)
	}
	ls, rs := lim.PolicyStats()[0], run.PolicyStats()[0]
	if rs.DryRunRefused != uint64(refused) || rs.OK != 40 || rs.NO != 0 {
		t.Errorf("dry run counted ok %d no %d would-refuse %d, want 40, 0, %d", rs.OK, rs.NO, rs.DryRunRefused, refused)
	}
	if ls.DryRunRefused != 0 || ls.NO != uint64(refused) {
		t.Errorf("limiting table counted no %d would-refuse %d, want %d, 0", ls.NO, ls.DryRunRefused, refused)
	}
}

func TestDryRunBatchAndVerdict(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, 100, Policy{Name: "try", Prefix: "t:", Rate: 0.001, Burst: 2, DryRun: true})
	tags := [][]byte{[]byte("t:x"), []byte("t:x"), []byte("t:x"), []byte("t:y"), []byte("t:x")}
	ok := make([]bool, len(tags))
	tb.AllowBatch(at(0), tags, ok)
	for i, o := range ok {
		if !o {
			t.Errorf("batch query %d refused under a dry run", i)
		}
	}
	v := tb.AllowN(at(0), []byte("t:x"), 1)
	if !v.Allowed || !v.WouldRefuse || !v.Policy.DryRun || v.Wait <= 0 {
		t.Errorf("verdict %+v: want allowed, would refuse, a dry-run policy and a wait", v)
	}
	if v := tb.AllowN(at(0), []byte("t:z"), 1); !v.Allowed || v.WouldRefuse {
		t.Errorf("a fresh tag: verdict %+v, want allowed and not refused", v)
	}
	if v := tb.AllowN(at(0), []byte("t:z"), 5); !v.Allowed || !v.WouldRefuse {
		t.Errorf("a cost over the burst under a dry run: verdict %+v, want allowed, would refuse", v)
	}
	st := tb.PolicyStats()[1]
	if st.DryRunRefused != 4 || st.OK != 8 || st.NO != 0 {
		t.Errorf("counted ok %d no %d would-refuse %d, want 8, 0, 4", st.OK, st.NO, st.DryRunRefused)
	}
}

// TestDryRunReload turns a dry run on and off by Reconfigure: the buckets
// keep their state, the answers follow the flag, the count carries over.
func TestDryRunReload(t *testing.T) {
	cfg := func(dry bool) Config {
		return Config{Default: Policy{Rate: 0.001, Burst: 2, DryRun: dry}, MaxTags: 100, MaxTagBytes: 256}
	}
	tb, err := New(cfg(false))
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "a", want: true},
		{at: 0, op: "allow", tag: "a", want: true},
		{at: 0, op: "allow", tag: "a", want: false},
	})
	if err := tb.Reconfigure(at(1), cfg(true)); err != nil {
		t.Fatal(err)
	}
	runSteps(t, tb, []step{
		{at: 1, op: "allow", tag: "a", want: true}, // would refuse
		{at: 1, op: "tokens", tag: "a", tokens: 0.001},
		{at: 1, op: "allow", tag: "b", want: true},
		{at: 1, op: "allow", tag: "b", want: true},
		{at: 1, op: "allow", tag: "b", want: true}, // would refuse
	})
	if err := tb.Reconfigure(at(2), cfg(false)); err != nil {
		t.Fatal(err)
	}
	runSteps(t, tb, []step{
		{at: 2, op: "allow", tag: "a", want: false},
		{at: 2, op: "allow", tag: "b", want: false},
		{at: 2, op: "drain", report: "a=2,b=2"},
	})
	st := tb.PolicyStats()[0]
	if st.DryRunRefused != 2 || st.OK != 6 || st.NO != 3 {
		t.Errorf("counted ok %d no %d would-refuse %d, want 6, 3, 2", st.OK, st.NO, st.DryRunRefused)
	}
}

// TestDryRunFingerprint: peers throttle alike whether or not a policy is a
// dry run, so the flag is not in the fingerprint.
func TestDryRunFingerprint(t *testing.T) {
	a := newTestTable(t, Policy{Rate: 1, Burst: 10}, 10, Policy{Prefix: "login:", Rate: 0.2, Burst: 5})
	b := newTestTable(t, Policy{Rate: 1, Burst: 10, DryRun: true}, 10, Policy{Prefix: "login:", Rate: 0.2, Burst: 5, DryRun: true})
	if a.Fingerprint() != b.Fingerprint() {
		t.Error("dry run changed the fingerprint")
	}
}

func TestDryRunDeny(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 10}, 10, Policy{Name: "block", Prefix: "b:", Action: Deny, DryRun: true})
	if !tb.AllowNow([]byte("b:1")) {
		t.Error("a dry run of deny refused")
	}
	if v := tb.AllowNNow([]byte("b:2"), 1); !v.Allowed || !v.WouldRefuse {
		t.Errorf("verdict %+v: want allowed, would refuse", v)
	}
	if st := tb.PolicyStats()[1]; st.OK != 2 || st.NO != 0 || st.DryRunRefused != 2 {
		t.Errorf("counted ok %d no %d would-refuse %d, want 2, 0, 2", st.OK, st.NO, st.DryRunRefused)
	}
	if st := tb.Stats(); st.Tags != 0 {
		t.Errorf("tracked %d tags under deny, want 0", st.Tags)
	}
}
