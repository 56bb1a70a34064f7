package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// TestDryRunPeersKeepOneRate gossips between a limiting daemon and one
// running the same policy as a dry run: their fingerprints match (no
// warning during a dry-run rollout), and the dry run's buckets, spent as
// if limiting, carry its hits to the limiting peer.
func TestDryRunPeersKeepOneRate(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	cfg := base + "[gossip]\npeers = [\"mem:1\"]\ninterval = \"20ms\"\n"
	dry := strings.Replace(cfg, "burst = 3", "burst = 3\ndry_run = true", 1)
	a := start(t, dry, func(config.Gossip) (transport.Transport, error) { return mem.Join("a"), nil })
	b := start(t, cfg, func(config.Gossip) (transport.Transport, error) { return mem.Join("b"), nil })
	if got := a.ask(t, "x", "x", "x", "x"); got != "OK OK OK OK" {
		t.Fatalf("the dry run: %q, want every query served", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for spent(b.Daemon, "x") < 2.9 || len(b.peers()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("b did not learn a's 3 hits on x within 10s: %v", spent(b.Daemon, "x"))
		}
		mem.Deliver(time.Now())
		time.Sleep(5 * time.Millisecond)
	}
	if s := spent(b.Daemon, "x"); s > 3.1 {
		t.Fatalf("b spent %v tokens of x, want 3: the query the dry run would have refused is no hit", s)
	}
	if got := b.ask(t, "x"); got != "NO" {
		t.Fatalf("b answers %q for a tag the dry run spent; want NO", got)
	}
	if p := b.peers(); len(p) != 1 || !p[0].FingerprintMatch {
		t.Fatalf("b's view of a: %+v, want the same policies", p)
	}
	if s := b.snapshot(); s.Gossip.FingerprintMismatch != 0 {
		t.Fatalf("%d datagrams counted as from different policies", s.Gossip.FingerprintMismatch)
	}
	if p := a.snapshot().Policies[0]; p.DryRunRefused != 1 {
		t.Fatalf("the dry run counted %d refusals, want 1", p.DryRunRefused)
	}
}
