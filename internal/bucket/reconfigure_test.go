package bucket

import (
	"fmt"
	"testing"
)

func TestReconfigureKeepsState(t *testing.T) {
	old := Config{Default: Policy{Rate: 1, Burst: 3}, MaxTags: 100, MaxTagBytes: 256,
		Policies: []Policy{{Name: "api", Prefix: "api:", Rate: 1, Burst: 2}, {Name: "ops", Prefix: "ops:", Action: Allow}}}
	tb, err := New(old)
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "spent", want: true},
		{at: 0, op: "allow", tag: "spent", want: true},
		{at: 0, op: "allow", tag: "spent", want: true},
		{at: 0, op: "allow", tag: "spent", want: false},
		{at: 0, op: "allow", tag: "half", want: true},
		{at: 0, op: "spend", tag: "debt", hits: 8},
		{at: 0, op: "allow", tag: "api:x", want: true},
		{at: 0, op: "allow", tag: "ops:x", want: true},
	})
	fp := tb.Fingerprint()
	// Raise the burst, turn api: into a deny policy, drop ops: (back to
	// the default limit).
	raised := Config{Default: Policy{Rate: 1, Burst: 10}, MaxTags: 100, MaxTagBytes: 256,
		Policies: []Policy{{Name: "api", Prefix: "api:", Action: Deny}}}
	if err := tb.Reconfigure(at(0), raised); err != nil {
		t.Fatal(err)
	}
	if tb.Fingerprint() == fp {
		t.Error("fingerprint unchanged by new policies")
	}
	runSteps(t, tb, []step{
		// A tag already spent stays spent; new tags get the new burst.
		{at: 0, op: "tokens", tag: "spent", tokens: 0},
		{at: 0, op: "allow", tag: "spent", want: false},
		{at: 0, op: "tokens", tag: "half", tokens: 2},
		{at: 0, op: "tokens", tag: "debt", tokens: -5},
		{at: 0, op: "allow", tag: "api:x", want: false},
		{at: 0, op: "allow", tag: "ops:x", want: true},
		{at: 1, op: "allow", tag: "spent", want: true}, // refilled at the rate
		{at: 1, op: "allow", tag: "spent", want: false},
		// The unreported hits survive the reload.
		{at: 1, op: "drain", report: "half=1,ops:x=1,spent=4"},
	})
	for i := 0; i < 10; i++ {
		if !tb.Allow(at(1), []byte("fresh")) {
			t.Fatalf("fresh tag refused at query %d with the new burst of 10", i+1)
		}
	}
	if tb.Allow(at(1), []byte("fresh")) {
		t.Fatal("fresh tag served an 11th time")
	}
	if _, err := tb.Peek(at(1), "api:x"); err != ErrUnknownTag {
		t.Errorf("tag now under a deny policy still tracked: %v", err)
	}
	// Lower the burst: a fuller bucket is capped at the new one.
	if err := tb.Reconfigure(at(100), Config{Default: Policy{Rate: 1, Burst: 1}, MaxTags: 100, MaxTagBytes: 256}); err != nil {
		t.Fatal(err)
	}
	runSteps(t, tb, []step{
		{at: 100, op: "allow", tag: "half", want: true},
		{at: 100, op: "allow", tag: "half", want: false},
	})
}

func TestReconfigureRejectsBadConfigAndChangesNothing(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 2}, 10)
	tb.Allow(at(0), []byte("a"))
	err := tb.Reconfigure(at(0), Config{Default: Policy{Rate: 0, Burst: 5}, MaxTags: 10, MaxTagBytes: 256})
	if err == nil {
		t.Fatal("zero rate accepted")
	}
	runSteps(t, tb, []step{
		{at: 0, op: "allow", tag: "a", want: true},
		{at: 0, op: "allow", tag: "a", want: false},
	})
}

func TestReconfigureLowerMaxTagsEvicts(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 5}, 5000)
	for i := 0; i < 5000; i++ {
		tb.Allow(at(0), []byte(fmt.Sprintf("t%d", i)))
	}
	if err := tb.Reconfigure(at(0), Config{Default: Policy{Rate: 1, Burst: 5}, MaxTags: 1000, MaxTagBytes: 256}); err != nil {
		t.Fatal(err)
	}
	if st := tb.Stats(); st.Tags > 1000 || st.Evictions < 4000 {
		t.Fatalf("after lowering max_tags to 1000: %+v", st)
	}
}

func TestForget(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 1, Burst: 1}, 10)
	tb.Allow(at(0), []byte("a"))
	if !tb.Forget("a") {
		t.Fatal("Forget of a tracked tag reported false")
	}
	if tb.Forget("a") {
		t.Fatal("Forget of an untracked tag reported true")
	}
	if !tb.Allow(at(0), []byte("a")) {
		t.Fatal("forgotten tag not back to a full bucket")
	}
	if got := formatHits(tb.Drain(nil)); got != "a=1" {
		t.Fatalf("drain after forget: %q (the forgotten hit must not be reported)", got)
	}
}

func TestPolicyStats(t *testing.T) {
	cfg := Config{Default: Policy{Rate: 1, Burst: 1}, MaxTags: 10, MaxTagBytes: 256,
		Policies: []Policy{{Name: "ok", Prefix: "ok:", Action: Allow}, {Name: "no", Prefix: "no:", Action: Deny}}}
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"a", "a", "b", "ok:1", "no:1", "no:2"} {
		tb.Allow(at(0), []byte(tag))
	}
	want := map[string][2]uint64{"default": {2, 1}, "ok": {1, 0}, "no": {0, 2}}
	check := func() {
		t.Helper()
		for _, ps := range tb.PolicyStats() {
			if w := want[ps.Name]; ps.OK != w[0] || ps.NO != w[1] {
				t.Errorf("policy %s: %d OK %d NO, want %v", ps.Name, ps.OK, ps.NO, w)
			}
		}
	}
	check()
	// Counts carry over a reload by name.
	if err := tb.Reconfigure(at(0), cfg); err != nil {
		t.Fatal(err)
	}
	tb.Allow(at(0), []byte("a"))
	want["default"] = [2]uint64{2, 2}
	check()
}

// TestReconfigureConcurrent reloads while queries and reports run: no
// race, and a tag under a deny policy is refused once the reload is done.
func TestReconfigureConcurrent(t *testing.T) {
	a := Config{Default: Policy{Rate: 1, Burst: 100}, MaxTags: 5000, MaxTagBytes: 256}
	b := a
	b.Policies = []Policy{{Prefix: "t1", Action: Deny}}
	tb, err := New(a)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 20000; i++ {
				tag := fmt.Sprintf("t%d", (i*7+w)%3000)
				tb.Allow(at(0), []byte(tag))
				tb.Spend(at(0), tag, 1)
			}
		}(w)
	}
	for i := 0; i < 50; i++ {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		if err := tb.Reconfigure(at(0), cfg); err != nil {
			t.Fatal(err)
		}
		tb.Drain(nil)
		tb.PolicyStats()
	}
	for w := 0; w < 4; w++ {
		<-done
	}
	if err := tb.Reconfigure(at(0), b); err != nil {
		t.Fatal(err)
	}
	if tb.Allow(at(0), []byte("t123")) {
		t.Fatal("tag under a deny policy served after the reload")
	}
}
