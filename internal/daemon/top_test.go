package daemon

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// waitTop polls r's view until ok holds of it, for at most 10 seconds.
func waitTop(t *testing.T, r *running, by, scope string, ok func(api.Top) bool, poke func()) api.Top {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := r.top.View(by, scope, "", 20)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("view %s/%s not as wanted within 10s: %+v", by, scope, v)
		}
		if poke != nil {
			poke()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// first is the first tag of the first policy of v, and its count.
func first(v api.Top) (string, uint64) {
	if len(v.Policies) == 0 || len(v.Policies[0].Tags) == 0 {
		return "", 0
	}
	return v.Policies[0].Tags[0].Tag, v.Policies[0].Tags[0].Count
}

// TestTopWithoutGossip: with gossip off, the daemon's own loop counts the
// refused and the served tags (here draining at every feed, not every
// tenth).
func TestTopWithoutGossip(t *testing.T) {
	was := servedEvery
	t.Cleanup(func() { servedEvery = was }) // after the daemon's stop, registered later
	servedEvery = 1
	r := start(t, base, nil)
	if got := r.ask(t, "x", "x", "x", "x", "x", "y"); got != "OK OK OK NO NO OK" {
		t.Fatalf("replies %q", got)
	}
	v := waitTop(t, r, "refused", "node", func(v api.Top) bool { tag, n := first(v); return tag == "x" && n == 2 }, nil)
	if v.Nodes != 1 || v.Policies[0].Policy != "default" || v.Policies[0].Total != 2 {
		t.Errorf("refused view %+v: want one node, the default policy, 2 refusals", v)
	}
	waitTop(t, r, "served", "node", func(v api.Top) bool {
		return len(v.Policies) == 1 && v.Policies[0].Total == 4 && len(v.Policies[0].Tags) == 2
	}, nil)
}

// TestTopAcrossTheCluster: a tag refused on one daemon only is in the
// other's cluster view, carried by gossip, and not in its node view.
func TestTopAcrossTheCluster(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\ninterval = \"20ms\"\n"
	a := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("a"), nil })
	b := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("b"), nil })
	if got := a.ask(t, "x", "x", "x", "x"); got != "OK OK OK NO" {
		t.Fatalf("a: %q", got)
	}
	deliver := func() { mem.Deliver(time.Now()) }
	v := waitTop(t, b, "refused", "cluster", func(v api.Top) bool { tag, n := first(v); return tag == "x" && n >= 1 }, deliver)
	if v.Nodes != 2 {
		t.Errorf("b's cluster view %+v: want both nodes counted", v)
	}
	if v := b.top.View("refused", "node", "", 20); len(v.Policies) != 0 {
		t.Errorf("b's node view %+v: want nothing refused on b", v)
	}
}
