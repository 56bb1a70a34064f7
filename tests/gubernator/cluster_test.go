package gubernator

import (
	"fmt"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
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
	inOneMinute(t, func(key string) (errs []string) {
		started := time.Now().Truncate(time.Minute)
		for i := range 3 {
			if got := a.ask(t, perMinute(key, 1)); got.Status != guber.Status_UNDER_LIMIT {
				t.Fatalf("hit %d on the first node: %v remaining %d error %q", i+1, got.Status, got.Remaining, got.Error)
			}
		}
		// Reads spend nothing, so polling the second node changes nothing.
		// (In the next minute the window is new: the run is taken again.)
		testkit.WaitFor(t, 5*time.Second, "the second node to hear of the three hits", func() bool {
			return b.ask(t, perMinute(key, 0)).Status == guber.Status_OVER_LIMIT || !time.Now().Truncate(time.Minute).Equal(started)
		})
		if got := b.ask(t, perMinute(key, 1)); got.Status != guber.Status_OVER_LIMIT || got.Remaining != 0 {
			errs = append(errs, fmt.Sprintf("a hit on the second node: %v remaining %d, want OVER_LIMIT 0", got.Status, got.Remaining))
		}
		// A key spent on neither is served on both.
		if got := b.ask(t, perMinute(key+"-other", 1)); got.Status != guber.Status_UNDER_LIMIT || got.Remaining != 2 {
			errs = append(errs, fmt.Sprintf("another key on the second node: %v remaining %d", got.Status, got.Remaining))
		}
		return errs
	})
	ctx := t.Context()
	if h, err := b.client.HealthCheck(ctx, &guber.HealthCheckReq{}); err != nil || h.PeerCount != 2 {
		t.Errorf("HealthCheck on the second node = %+v, %v; want 2 peers (itself and the first)", h, err)
	}
}
