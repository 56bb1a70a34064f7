package bucket

import (
	"fmt"
	"sync"
	"testing"
)

// TestPolicyStatsConcurrent answers allow, deny and limit policies' tags
// from several goroutines at once, through Allow, AllowBatch and AllowN,
// with a reload in the middle: every answer is counted once, under its
// policy, whichever counter took it.
func TestPolicyStatsConcurrent(t *testing.T) {
	cfg := Config{Default: Policy{Rate: 1, Burst: 5000}, MaxTags: 1000, MaxTagBytes: 256,
		Policies: []Policy{
			{Name: "ok", Prefix: "ok:", Action: Allow},
			{Name: "no", Prefix: "no:", Action: Deny},
			{Name: "api", Prefix: "api:", Rate: 1, Burst: 5000},
		}}
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 4, 300
	// Each round of a worker asks, under each policy, 2 queries through
	// Allow, 4 in one batch and 1 through AllowN: 7 per policy. A limit
	// tag is asked 7*rounds times by one worker at most, within its burst.
	query := func(w, i int) {
		for _, p := range []string{"ok:", "no:", "api:", "d"} {
			tag := []byte(fmt.Sprintf("%s%d", p, w))
			tb.Allow(at(0), tag)
			tb.Allow(at(0), tag)
			tb.AllowBatch(at(0), [][]byte{tag, tag, tag, tag}, make([]bool, 4))
			tb.AllowN(at(0), tag, 1)
		}
	}
	var wg sync.WaitGroup
	half := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if i == rounds/2 {
					half <- struct{}{}
				}
				query(w, i)
			}
		}()
	}
	for range workers {
		<-half
	}
	if err := tb.Reconfigure(at(0), cfg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	const each = workers * rounds * 7
	want := map[string][2]uint64{"default": {each, 0}, "ok": {each, 0}, "no": {0, each}, "api": {each, 0}}
	for _, ps := range tb.PolicyStats() {
		if w := want[ps.Name]; ps.OK != w[0] || ps.NO != w[1] {
			t.Errorf("policy %s: %d OK %d NO, want %v", ps.Name, ps.OK, ps.NO, w)
		}
	}
}
