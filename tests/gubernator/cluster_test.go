package gubernator

import (
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestTwoNodes runs two dthrottled peers gossiping by multicast inside a
// user and network namespace the test creates (nothing reaches the
// host's interfaces): a key spent to its limit on one is refused by the
// other once one report has arrived.
func TestTwoNodes(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	gossip := "interval = \"200ms\"\ngroup = \"239.255.77.77:7777\"\n"
	a, b := startNode(t, gossip), startNode(t, gossip)
	for i := range 3 {
		if got := a.ask(t, perMinute("shared", 1)); got.Status != guber.Status_UNDER_LIMIT {
			t.Fatalf("hit %d on the first node: %v remaining %d error %q", i+1, got.Status, got.Remaining, got.Error)
		}
	}
	// Reads spend nothing, so polling the second node changes nothing.
	harness.Poll(t, 5*time.Second, "the second node to hear of the three hits", func() bool {
		return b.ask(t, perMinute("shared", 0)).Status == guber.Status_OVER_LIMIT
	})
	if got := b.ask(t, perMinute("shared", 1)); got.Status != guber.Status_OVER_LIMIT || got.Remaining != 0 {
		t.Errorf("a hit on the second node: %v remaining %d, want OVER_LIMIT 0", got.Status, got.Remaining)
	}
	// A key spent on neither is served on both.
	if got := b.ask(t, perMinute("other", 1)); got.Status != guber.Status_UNDER_LIMIT || got.Remaining != 2 {
		t.Errorf("another key on the second node: %v remaining %d", got.Status, got.Remaining)
	}
	ctx := t.Context()
	if h, err := b.client.HealthCheck(ctx, &guber.HealthCheckReq{}); err != nil || h.PeerCount != 2 {
		t.Errorf("HealthCheck on the second node = %+v, %v; want 2 peers (itself and the first)", h, err)
	}
}
