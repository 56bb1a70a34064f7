package top

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func newBoard(t testing.TB, change func(*Config)) *Board {
	t.Helper()
	cfg := DefaultConfig()
	if change != nil {
		change(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refusals is one policy's exact refusals of one interval, as a table
// would harvest them.
func refusals(policy string, counts map[string]uint64) bucket.Refusals {
	s := topk.New(len(counts) + 1)
	for k, n := range counts {
		s.Add([]byte(k), n)
	}
	return bucket.Refusals{Policy: policy, Summary: s.Summary(s.K())}
}

// tags returns a view's policy's tags as key=count, and whether the
// policy is in the view.
func tags(v api.Top, policy string) (map[string]uint64, bool) {
	for _, p := range v.Policies {
		if p.Policy == policy {
			m := map[string]uint64{}
			for _, t := range p.Tags {
				m[t.Tag] = t.Count
			}
			return m, true
		}
	}
	return nil, false
}

// TestWindowForgets: refusals older than the window leave the view whole
// parts at a time; the view says how long it covers.
func TestWindowForgets(t *testing.T) {
	b := newBoard(t, nil) // 60 s in parts of 10 s
	for s := range 10 {
		b.AddRefused(at(float64(s)), []bucket.Refusals{refusals("login", map[string]uint64{"a": 5})})
	}
	for s := 30; s < 40; s++ {
		b.AddRefused(at(float64(s)), []bucket.Refusals{refusals("login", map[string]uint64{"b": 1})})
	}
	type step struct {
		at     float64
		want   map[string]uint64
		window float64
	}
	for i, st := range []step{
		{at: 45, want: map[string]uint64{"a": 50, "b": 10}, window: 45},
		{at: 59.9, want: map[string]uint64{"a": 50, "b": 10}, window: 59.9},
		{at: 60, want: map[string]uint64{"b": 10}, window: 50}, // part [0, 10) is gone whole
		{at: 69.9, want: map[string]uint64{"b": 10}, window: 59.9},
		{at: 90, want: nil, window: 50},
	} {
		v := b.View("refused", "node", "", 20, at(st.at))
		got, _ := tags(v, "login")
		if fmt.Sprint(got) != fmt.Sprint(st.want) || fmt.Sprintf("%.1f", v.WindowSeconds) != fmt.Sprintf("%.1f", st.window) {
			t.Errorf("step %d (%vs): got %v over %.1fs, want %v over %.1fs", i, st.at, got, v.WindowSeconds, st.want, st.window)
		}
	}
	if v := b.View("refused", "node", "", 20, at(90)); len(v.Policies) != 0 || v.Policies == nil {
		t.Errorf("after the window: %+v, want an empty, non-nil list of policies", v.Policies)
	}
}

// TestClockBack: a clock that steps back counts in the latest part, and
// forgets nothing early.
func TestClockBack(t *testing.T) {
	b := newBoard(t, nil)
	b.AddRefused(at(55), []bucket.Refusals{refusals("p", map[string]uint64{"a": 1})})
	b.AddRefused(at(5), []bucket.Refusals{refusals("p", map[string]uint64{"a": 1})})
	if got, _ := tags(b.View("refused", "node", "", 20, at(5)), "p"); got["a"] != 2 {
		t.Fatalf("after the clock stepped back: %v, want a=2", got)
	}
	if got, _ := tags(b.View("refused", "node", "", 20, at(105)), "p"); got["a"] != 2 {
		t.Fatalf("at 105 s: %v, want a=2 (both counted in part [50, 60))", got)
	}
}

// TestServedByPolicy: served hits count under the policy the function
// names, apart from refusals; by selects which the view shows.
func TestServedByPolicy(t *testing.T) {
	b := newBoard(t, nil)
	policy := func(key string) string {
		if len(key) > 4 && key[:4] == "api:" {
			return "api"
		}
		return "default"
	}
	hits := []bucket.Hit{{Key: "api:x", Count: 7}, {Key: "1.2.3.4", Count: 3}, {Key: "api:y", Count: 1}, {Key: "", Count: 9}, {Key: "z", Count: 0}}
	b.AddServed(at(1), hits, policy)
	b.AddServed(at(2), hits[:1], policy)
	b.AddRefused(at(2), []bucket.Refusals{refusals("api", map[string]uint64{"api:q": 4})})
	v := b.View("served", "", "", 20, at(3))
	if v.By != "served" || v.Scope != "cluster" || v.Nodes != 1 || len(v.Policies) != 2 {
		t.Fatalf("view %+v", v)
	}
	if v.Policies[0].Policy != "api" || v.Policies[0].Total != 15 || v.Policies[1].Total != 3 {
		t.Fatalf("policies %+v: want api (15) then default (3)", v.Policies)
	}
	if got, _ := tags(v, "api"); fmt.Sprint(got) != "map[api:x:14 api:y:1]" {
		t.Fatalf("api served %v", got)
	}
	if got, _ := tags(b.View("refused", "node", "api", 1, at(3)), "api"); fmt.Sprint(got) != "map[api:q:4]" {
		t.Fatalf("api refused %v", got)
	}
	if v := b.View("served", "node", "nosuch", 20, at(3)); len(v.Policies) != 0 {
		t.Fatalf("an unknown policy: %+v", v.Policies)
	}
}

// TestViewCut: a view of n tags raises the bound to the heaviest tag it
// leaves out.
func TestViewCut(t *testing.T) {
	b := newBoard(t, nil)
	b.AddRefused(at(1), []bucket.Refusals{refusals("p", map[string]uint64{"a": 9, "b": 7, "c": 5})})
	v := b.View("refused", "node", "p", 2, at(1))
	p := v.Policies[0]
	if len(p.Tags) != 2 || p.Bound != 5 || p.Total != 21 {
		t.Fatalf("%+v: want 2 tags, bound 5, total 21", p)
	}
}

// TestPolicyCap: past Policies policies, a new one is kept only once an
// old one has had nothing for a whole window.
func TestPolicyCap(t *testing.T) {
	b := newBoard(t, func(c *Config) { c.Policies = 2 })
	for _, p := range []string{"a", "b", "c"} {
		b.AddRefused(at(1), []bucket.Refusals{refusals(p, map[string]uint64{"x": 1})})
	}
	if v := b.View("refused", "node", "", 20, at(1)); len(v.Policies) != 2 {
		t.Fatalf("%d policies kept, want 2", len(v.Policies))
	}
	b.AddRefused(at(70), []bucket.Refusals{refusals("c", map[string]uint64{"x": 1})})
	if got, ok := tags(b.View("refused", "node", "", 20, at(70)), "c"); !ok || got["x"] != 1 {
		t.Fatalf("c not kept once a and b left the window: %v", got)
	}
}

// TestConcurrent feeds a board while views are read (run under -race).
func TestConcurrent(t *testing.T) {
	b := newBoard(t, nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
				b.View("refused", "cluster", "", 20, at(30))
				b.Report(at(30))
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 100 {
			b.AddPeer(uint64(i%5+1), at(float64(i)/10), Report{Lists: []List{{Policy: "p", Summary: topk.Summary{Total: 1, Items: []topk.Item{{Key: "k", Count: 1}}}}}})
		}
	}()
	for i := range 200 {
		b.AddRefused(at(float64(i)/10), []bucket.Refusals{refusals("p", map[string]uint64{fmt.Sprint(i % 7): 1})})
		b.AddServed(at(float64(i)/10), []bucket.Hit{{Key: "k", Count: 1}}, func(string) string { return "p" })
	}
	close(done)
	wg.Wait()
	if v := b.View("refused", "cluster", "p", 20, at(20)); v.Nodes != 6 || v.Policies[0].Total != 200+5 {
		t.Fatalf("%+v", v)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Config){
		"K":        func(c *Config) { c.K = 0 },
		"Policies": func(c *Config) { c.Policies = 0 },
		"Parts":    func(c *Config) { c.Parts = 0 },
		"Window":   func(c *Config) { c.Window = time.Microsecond },
		"Nodes":    func(c *Config) { c.Nodes = -1 },
		"PeerTags": func(c *Config) { c.PeerTags = -1 },
		"Expire":   func(c *Config) { c.Expire = 0 },
	} {
		c := DefaultConfig()
		change(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s out of range accepted", name)
		}
	}
}
