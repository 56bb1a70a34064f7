package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// TestShareFollowsTheSplit: three daemons under partition "share"; a cut
// off alone holds a third of the rate and burst, in its table, its
// policies' fingerprint unchanged, and says who is missing; healed, it
// holds the whole rate again; a peer that stops cleanly says goodbye, so
// the others' share never drops.
func TestShareFollowsTheSplit(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\ninterval = \"20ms\"\npartition = \"share\"\nforget_after = \"30s\"\n" +
		"[[policy]]\nprefix = \"w:\"\nrate = 0.001\nburst = 3\npartition = \"whole\"\n"
	join := func(name string) func(config.Gossip) (transport.Transport, error) {
		return func(config.Gossip) (transport.Transport, error) { return mem.Join(name), nil }
	}
	a := start(t, cfg, join("a"))
	start(t, cfg, join("b"))
	c := start(t, cfg, join("c"))
	fingerprint := a.table.Fingerprint()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s; a's members %+v, policies %+v", what, a.gossip.node.Members(), a.table.Policies())
			}
			mem.Deliver(time.Now())
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("a hears b and c", func() bool { return a.gossip.node.Members().Live == 2 })

	mem.Partition([]string{"a"}, []string{"b", "c"})
	waitFor("a alone holds a third", func() bool { return a.share() < 0.34 })
	if p := a.table.Policies(); p[0].Rate != 0.001/3 || p[0].Burst != 1 || p[1].Rate != 0.001 || p[1].Burst != 3 {
		t.Errorf("a's policies split: %+v; want the default at a third (1 token), w: whole", p)
	}
	if a.table.Fingerprint() != fingerprint {
		t.Error("a's fingerprint changed with its share")
	}
	if got := a.ask(t, "x", "x", "w:x", "w:x", "w:x", "w:x"); got != "OK NO OK OK OK NO" {
		t.Errorf("a split: %q; want a burst of 1 under share, 3 under whole", got)
	}
	missing := 0
	for _, p := range a.peers() {
		if p.Missing {
			missing++
		}
	}
	if m := a.gossip.node.Members(); missing != 2 || len(m.Missing) != 2 {
		t.Errorf("a's view: %d peers missing, members %+v; want 2", missing, m)
	}

	// A reload changes the policy live: "whole" holds the whole rate at
	// once, split or not; "share" again, a third.
	writeConfig(t, filepath.Dir(a.path), a.sock, strings.Replace(cfg, `partition = "share"`, `partition = "whole"`, 1))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if p := a.table.Policies()[0]; p.Rate != 0.001 || p.Burst != 3 {
		t.Errorf("reloaded under whole while split: %+v, want the whole rate", p)
	}
	writeConfig(t, filepath.Dir(a.path), a.sock, cfg)
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if p := a.table.Policies()[0]; p.Rate != 0.001/3 || p.Burst != 1 {
		t.Errorf("reloaded under share while split: %+v, want a third", p)
	}

	mem.Partition()
	waitFor("a whole again", func() bool { return a.share() == 1 })
	if p := a.table.Policies(); p[0].Rate != 0.001 || p[0].Burst != 3 {
		t.Errorf("a's default policy healed: %+v; want whole", p[0])
	}

	c.stop()
	<-c.done
	c.done <- nil
	if err := c.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor("a hears c's goodbye", func() bool { return a.gossip.node.Members().Left == 1 })
	if m := a.gossip.node.Members(); m.Share != 1 || m.Live != 1 {
		t.Errorf("after c's goodbye a counts %+v; want b live and share 1", m)
	}
}
