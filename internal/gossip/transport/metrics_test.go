package transport

import (
	"testing"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

func TestDiscoveryCollector(t *testing.T) {
	c := NewDiscoveryCollector(func() DiscoveryStats {
		return DiscoveryStats{Learned: 3, Added: 5, Forgotten: 2, Refused: 1}
	})
	fams := mt.Gather(t, c)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_gossip_peers_learned", Kind: mt.Gauge, Value: 3},
		mt.Sample{Name: "dthrottle_gossip_peers_learned_total", Labels: "event=added", Kind: mt.Counter, Value: 5},
		mt.Sample{Name: "dthrottle_gossip_peers_learned_total", Labels: "event=forgotten", Kind: mt.Counter, Value: 2},
		mt.Sample{Name: "dthrottle_gossip_peers_learned_total", Labels: "event=refused", Kind: mt.Counter, Value: 1},
	)
	if n := len(fams); n != 2 {
		t.Errorf("%d families, want 2", n)
	}
	mt.Lint(t, c)
}
