package gossip

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// TestStatedHitsAcrossRelays: hits under a limit a caller stated reach
// every peer with their limit, directly, also where plain hits go
// through relays (a relay sums hits per tag, not per limit).
func TestStatedHitsAcrossRelays(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	q := bucket.Quota{Algorithm: bucket.Leaky, Burst: 3, Rate: 0.05}
	var mu sync.Mutex
	stated := map[string]uint32{} // node: stated hits of "q" applied, under q
	var all []*relayNode
	for i := range 5 {
		mode := relay.Use
		if i < 2 {
			mode = relay.Serve
		}
		name := fmt.Sprintf("n%d", i)
		rn := &relayNode{}
		rn.testNode = newTestNodeWith(t, net.Join(name), func(c *Config) {
			c.Relay = relay.Config{Mode: mode, MaxAge: 2 * time.Second}
			plain := c.Apply
			c.Apply = func(at time.Time, hits []Hit) {
				for _, h := range hits {
					if h.Quota != (bucket.Quota{}) {
						if h.Quota != q || h.Key != "q" {
							t.Errorf("%s applied %+v, want tag q under %+v", name, h, q)
						}
						mu.Lock()
						stated[name] += h.Count
						mu.Unlock()
					}
				}
				plain(at, hits)
			}
		})
		all = append(all, rn)
	}
	const rounds = 6
	for range rounds {
		for _, n := range all {
			n.mu.Lock()
			n.pending = append(n.pending, Hit{Key: "q", Count: 1, Quota: q}, Hit{Key: "plain", Count: 1})
			n.mu.Unlock()
		}
		relayRound(t, now, all, net)
		now = now.Add(time.Second)
	}
	for i, n := range all {
		name := fmt.Sprintf("n%d", i)
		if got := stated[name]; got != 4*rounds {
			t.Errorf("%s applied %d stated hits, want %d (every other node's, once)", name, got, 4*rounds)
		}
		if got := n.got("plain"); got < 4*(rounds-2) {
			t.Errorf("%s applied %d plain hits, want about %d", name, got, 4*rounds)
		}
	}
	if st := all[4].Stats().Relay; st.ViaRelays == 0 {
		t.Errorf("the plain hits never went through relays: %+v", st)
	}
}
