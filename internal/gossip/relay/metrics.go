package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns relaying's metric families, read from NodeStats.

// Flow is one kind of relaying datagram in one direction, and how many
// datagrams and bytes of it went.
type Flow struct {
	Kind, Dir      string // to_relay, aggregate, crossing; sent, received
	Packets, Bytes uint64
}

// Traffic lists st's datagrams and bytes by kind and direction.
func (st NodeStats) Traffic() []Flow {
	return []Flow{
		{"to_relay", "sent", st.ToRelayPackets, st.ToRelayBytes},
		{"to_relay", "received", st.ToRelayReceived, st.ToRelayBytesReceived},
		{"aggregate", "sent", st.AggregatePackets, st.AggregateBytes},
		{"aggregate", "received", st.AggregatesReceived, st.AggregateBytesReceived},
		{"crossing", "sent", st.CrossingPackets, st.CrossingBytes},
		{"crossing", "received", st.CrossingsReceived, st.CrossingBytesReceived},
	}
}

// Collector returns relaying's metrics, read from stats at each scrape:
//
//	dthrottle_relay_mode{mode}                gauge, always 1
//	dthrottle_relay_relays{where="segment|remote"}
//	dthrottle_relay_reports_total{path="relays|direct"}
//	dthrottle_relay_packets_total{kind,direction}
//	dthrottle_relay_bytes_total{kind,direction}
//	dthrottle_relay_held_tags, _held_hits, _hot_tags
//	dthrottle_relay_hits_total{outcome="passed|dropped|foreign"}
//	dthrottle_relay_own_pending_tags
//	dthrottle_relay_remote_silences_total
//	dthrottle_relay_crossings_lost_total
//
// It is safe for concurrent use as long as stats is.
func Collector(stats func() NodeStats) prometheus.Collector {
	var (
		mode           = metric.Gauge("relay_mode", "Always 1, labelled with relay.mode: off, use or serve.", "mode")
		relays         = metric.Gauge("relay_relays", "Relays heard now and not silent, by where: segment (this node's segment, this one apart), remote (other segments).", "where")
		reports        = metric.Counter("relay_reports_total", "Reports sent, by path: relays (through the segment's relays), direct (to every peer while relaying is on but no relay was heard).", "path")
		packets        = metric.Counter("relay_packets_total", "Relaying datagrams, by kind (to_relay: hits for a relay; aggregate: a relay's sums for its segment; crossing: a relay's sums for other segments) and direction (sent, received).", "kind", "direction")
		bytes          = metric.Counter("relay_bytes_total", "Bytes of relaying datagrams, by kind and direction as relay_packets_total.", "kind", "direction")
		heldTags       = metric.Gauge("relay_held_tags", "Tags whose sums this relay holds back now (under their threshold).")
		heldHits       = metric.Gauge("relay_held_hits", "Hits this relay holds back now.")
		hotTags        = metric.Gauge("relay_hot_tags", "Tags this relay passes on at every aggregate now (they reached their threshold lately).")
		hits           = metric.Counter("relay_hits_total", "Hits a relay summed, by outcome: passed (on to the segment), dropped (stayed under the threshold for the hold age: too sparse to matter), foreign (other segments' hits passed into this one).", "outcome")
		ownPending     = metric.Gauge("relay_own_pending_tags", "Tags whose hits this node sent to a relay and has not seen come back in an aggregate.")
		remoteSilences = metric.Counter("relay_remote_silences_total", "Times a relay of another segment went silent (a cut link: each segment then holds its own rate).")
		crossingsLost  = metric.Counter("relay_crossings_lost_total", "Crossings missing from other segments' relays' sequence numbers: the hits they carried never reached this segment.")
	)
	families := []metric.Family{mode, relays, reports, packets, bytes, heldTags, heldHits, hotTags, hits,
		ownPending, remoteSilences, crossingsLost}
	return metric.NewCollector(families, func(emit metric.Emit) {
		st := stats()
		emit(mode, 1, st.Mode)
		emit(relays, float64(st.Relays), "segment")
		emit(relays, float64(st.RemoteRelays), "remote")
		emit(reports, float64(st.ViaRelays), "relays")
		emit(reports, float64(st.Direct), "direct")
		for _, t := range st.Traffic() {
			emit(packets, float64(t.Packets), t.Kind, t.Dir)
			emit(bytes, float64(t.Bytes), t.Kind, t.Dir)
		}
		emit(heldTags, float64(st.Sum.HeldTags))
		emit(heldHits, float64(st.Sum.HeldHits))
		emit(hotTags, float64(st.Sum.HotTags))
		emit(hits, float64(st.Sum.Passed), "passed")
		emit(hits, float64(st.Sum.Dropped), "dropped")
		emit(hits, float64(st.ForeignHits), "foreign")
		emit(ownPending, float64(st.OwnPending))
		emit(remoteSilences, float64(st.RemoteSilences))
		emit(crossingsLost, float64(st.CrossingsLost))
	})
}
