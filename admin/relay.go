package admin

import (
	"github.com/dthrottle/dthrottle/admin/api"
	"github.com/dthrottle/dthrottle/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the admin views of relaying (gossip/relay.go): its
// metrics and its part of /v1/stats.

// relayFamilies are the dthrottle_relay_ metric families.
type relayFamilies struct {
	relayMode, relayRelays, relayReports, relayPackets, relayBytes metric.Family
	relayHeldTags, relayHeldHits, relayHotTags, relayHits          metric.Family
	relayOwnPending, relayRemoteSilences, relayCrossingsLost       metric.Family
}

func newRelayFamilies() relayFamilies {
	return relayFamilies{
		relayMode:           metric.Gauge("relay_mode", "Always 1, labelled with relay.mode: off, use or serve.", "mode"),
		relayRelays:         metric.Gauge("relay_relays", "Relays heard now and not silent, by where: segment (this node's segment, this one apart), remote (other segments).", "where"),
		relayReports:        metric.Counter("relay_reports_total", "Reports sent, by path: relays (through the segment's relays), direct (to every peer while relaying is on but no relay was heard).", "path"),
		relayPackets:        metric.Counter("relay_packets_total", "Relaying datagrams, by kind (to_relay: hits for a relay; aggregate: a relay's sums for its segment; crossing: a relay's sums for other segments) and direction (sent, received).", "kind", "direction"),
		relayBytes:          metric.Counter("relay_bytes_total", "Bytes of relaying datagrams, by kind and direction as relay_packets_total.", "kind", "direction"),
		relayHeldTags:       metric.Gauge("relay_held_tags", "Tags whose sums this relay holds back now (under their threshold)."),
		relayHeldHits:       metric.Gauge("relay_held_hits", "Hits this relay holds back now."),
		relayHotTags:        metric.Gauge("relay_hot_tags", "Tags this relay passes on at every aggregate now (they reached their threshold lately)."),
		relayHits:           metric.Counter("relay_hits_total", "Hits a relay summed, by outcome: passed (on to the segment), dropped (stayed under the threshold for the hold age: too sparse to matter), foreign (other segments' hits passed into this one).", "outcome"),
		relayOwnPending:     metric.Gauge("relay_own_pending_tags", "Tags whose hits this node sent to a relay and has not seen come back in an aggregate."),
		relayRemoteSilences: metric.Counter("relay_remote_silences_total", "Times a relay of another segment went silent (a cut link: each segment then holds its own rate)."),
		relayCrossingsLost:  metric.Counter("relay_crossings_lost_total", "Crossings missing from other segments' relays' sequence numbers: the hits they carried never reached this segment."),
	}
}

func (f *relayFamilies) all() []metric.Family {
	return []metric.Family{f.relayMode, f.relayRelays, f.relayReports, f.relayPackets, f.relayBytes,
		f.relayHeldTags, f.relayHeldHits, f.relayHotTags, f.relayHits,
		f.relayOwnPending, f.relayRemoteSilences, f.relayCrossingsLost}
}

// collect emits the relaying metrics of st.
func (f *relayFamilies) collect(st relay.NodeStats, emit metric.Emit) {
	emit(f.relayMode, 1, st.Mode)
	emit(f.relayRelays, float64(st.Relays), "segment")
	emit(f.relayRelays, float64(st.RemoteRelays), "remote")
	emit(f.relayReports, float64(st.ViaRelays), "relays")
	emit(f.relayReports, float64(st.Direct), "direct")
	for _, t := range relayTraffic(st) {
		emit(f.relayPackets, float64(t.packets), t.kind, t.dir)
		emit(f.relayBytes, float64(t.bytes), t.kind, t.dir)
	}
	emit(f.relayHeldTags, float64(st.Sum.HeldTags))
	emit(f.relayHeldHits, float64(st.Sum.HeldHits))
	emit(f.relayHotTags, float64(st.Sum.HotTags))
	emit(f.relayHits, float64(st.Sum.Passed), "passed")
	emit(f.relayHits, float64(st.Sum.Dropped), "dropped")
	emit(f.relayHits, float64(st.ForeignHits), "foreign")
	emit(f.relayOwnPending, float64(st.OwnPending))
	emit(f.relayRemoteSilences, float64(st.RemoteSilences))
	emit(f.relayCrossingsLost, float64(st.CrossingsLost))
}

type relayFlow struct {
	kind, dir      string
	packets, bytes uint64
}

// relayTraffic lists st's datagrams and bytes by kind and direction.
func relayTraffic(st relay.NodeStats) []relayFlow {
	return []relayFlow{
		{"to_relay", "sent", st.ToRelayPackets, st.ToRelayBytes},
		{"to_relay", "received", st.ToRelayReceived, st.ToRelayBytesReceived},
		{"aggregate", "sent", st.AggregatePackets, st.AggregateBytes},
		{"aggregate", "received", st.AggregatesReceived, st.AggregateBytesReceived},
		{"crossing", "sent", st.CrossingPackets, st.CrossingBytes},
		{"crossing", "received", st.CrossingsReceived, st.CrossingBytesReceived},
	}
}

// relayView is st as /v1/stats shows it.
func relayView(st relay.NodeStats) api.Relay {
	v := api.Relay{Mode: st.Mode, Relays: st.Relays, RemoteRelays: st.RemoteRelays,
		ReportsViaRelays: st.ViaRelays, ReportsDirect: st.Direct,
		Sent: map[string]api.Traffic{}, Received: map[string]api.Traffic{},
		OwnPending: st.OwnPending, OwnForgotten: st.OwnForgotten,
		HeldTags: st.Sum.HeldTags, HeldHits: st.Sum.HeldHits, HotTags: st.Sum.HotTags,
		PassedHits: st.Sum.Passed, DroppedHits: st.Sum.Dropped, ForeignHits: st.ForeignHits,
		RemoteSilences: st.RemoteSilences, CrossingsLost: st.CrossingsLost}
	for _, t := range relayTraffic(st) {
		m := v.Sent
		if t.dir == "received" {
			m = v.Received
		}
		m[t.kind] = api.Traffic{Packets: t.packets, Bytes: t.bytes}
	}
	return v
}
