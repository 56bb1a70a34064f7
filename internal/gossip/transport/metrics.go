package transport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the metric families of unicast discovery, read from
// DiscoveryStats.

// NewDiscoveryCollector returns the metrics of the peers a unicast
// transport learned, read from stats at each scrape (a
// UnicastTransport's DiscoveryStats; a node without unicast peers passes a
// function that returns the zero DiscoveryStats):
//
//	dthrottle_gossip_peers_learned                        gauge, learned and sent to now
//	dthrottle_gossip_peers_learned_total{event="added|forgotten|refused"}
//
// The collector is safe for concurrent use as long as stats is.
func NewDiscoveryCollector(stats func() DiscoveryStats) prometheus.Collector {
	var (
		learned      = metric.Gauge("gossip_peers_learned", "Unicast peers learned and sent to now.")
		learnedTotal = metric.Counter("gossip_peers_learned_total", "Unicast peers learned, by event: added, forgotten (silent for the silence timeout), refused (max_peers were learned).", "event")
	)
	return metric.NewCollector([]metric.Family{learned, learnedTotal}, func(emit metric.Emit) {
		st := stats()
		emit(learned, float64(st.Learned))
		emit(learnedTotal, float64(st.Added), "added")
		emit(learnedTotal, float64(st.Forgotten), "forgotten")
		emit(learnedTotal, float64(st.Refused), "refused")
	})
}
