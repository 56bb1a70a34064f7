package daemon

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

func TestWarmStartFromAPeer(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	// b waits two intervals for answers: long enough for a's to arrive on
	// a busy machine.
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\ninterval = \"200ms\"\n"
	a := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("a"), nil })
	if got := a.ask(t, "x", "x", "x"); got != "OK OK OK" {
		t.Fatalf("a: %q", got)
	}
	// Wait until a has reported x to nobody: b, not yet started, can learn
	// it only from a's answer to its snapshot request.
	deadline := time.Now().Add(10 * time.Second)
	for a.gossip.node.Stats().TagsSent == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a did not report within 10s")
		}
		mem.Deliver(time.Now())
		time.Sleep(5 * time.Millisecond)
	}
	b := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("b"), nil })
	for !b.WarmStats().Warm {
		if time.Now().After(deadline) {
			t.Fatalf("b not warm within 10s: %+v", b.WarmStats())
		}
		mem.Deliver(time.Now())
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.ask(t, "x"); got != "NO" {
		t.Fatalf("b answers %q for a tag a spent before b started; want NO (b's warm stats %+v, a's %+v; b's node %+v)", got, b.WarmStats(), a.WarmStats(), b.gossip.node.Stats())
	}
	ws := b.WarmStats()
	if ws.RequestsSent == 0 || ws.PeersAnswered != 1 || ws.TagsAdopted != 1 {
		t.Fatalf("b's warm stats: %+v", ws)
	}
	if as := a.WarmStats(); as.RequestsReceived == 0 || as.TagsSent != 1 {
		t.Fatalf("a's warm stats: %+v", as)
	}
}

func TestWarmStartOff(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\nwarm_start = false\n"
	a := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("a"), nil })
	if ws := a.WarmStats(); ws.RequestsSent != 0 || ws.Warming {
		t.Fatalf("warm start off, yet: %+v", ws)
	}
}
