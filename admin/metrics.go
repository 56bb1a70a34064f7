package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the gossip node's metric families (and, in relay.go,
// relaying's), read from Snapshot.Gossip. Every other family is the
// collector of the component that counts it, given in
// Sources.Collectors.

// gossipFamilies are the gossip node's and its warm start's families,
// sent only while gossip is on.
type gossipFamilies struct {
	packetsSent, bytesSent, packetsReceived, bytesReceived metric.Family
	dropped, own, lost, mismatches, peers                  metric.Family
	reportDuration, lastReport                             metric.Family
	warmRequests, warmAnswers, warmBytes, warmTags         metric.Family
	warmDropped, warmSeconds                               metric.Family
}

// newGossipCollector returns the gossip node's metrics, reading one
// Snapshot per scrape. It is safe for concurrent use as long as snapshot
// is.
func newGossipCollector(snapshot func() Snapshot) prometheus.Collector {
	f := gossipFamilies{
		packetsSent:     metric.Counter("gossip_packets_sent_total", "Datagrams sent to peers."),
		bytesSent:       metric.Counter("gossip_bytes_sent_total", "Bytes of datagrams sent to peers."),
		packetsReceived: metric.Counter("gossip_packets_received_total", "Datagrams accepted from peers."),
		bytesReceived:   metric.Counter("gossip_bytes_received_total", "Bytes of datagrams accepted from peers."),
		dropped:         metric.Counter("gossip_packets_dropped_total", "Datagrams dropped, by reason: auth (no valid MAC), malformed, version (another format), duplicate, stale (sent before this process started, or too long ago).", "reason"),
		own:             metric.Counter("gossip_own_packets_total", "This node's own datagrams heard back and ignored."),
		lost:            metric.Counter("gossip_packets_lost_total", "Datagrams missing from peers' sequence numbers, less those that arrived late: the hits they carried were never applied."),
		mismatches:      metric.Counter("gossip_fingerprint_mismatches_total", "Datagrams from peers whose policies differ from this node's."),
		peers:           metric.Gauge("gossip_peers", "Peers heard and not silent."),
		reportDuration:  metric.Gauge("gossip_report_duration_seconds", "How long the last report took to send."),
		lastReport:      metric.Gauge("gossip_last_report_timestamp_seconds", "When the last report was sent, seconds since the Unix epoch."),

		warmRequests: metric.Counter("warm_requests_total", "Warm start snapshot requests, by direction: sent (this node asking), received (peers asking), refused (received and not answered: answered before, too many at once).", "direction"),
		warmAnswers:  metric.Counter("warm_answer_packets_total", "Warm start answer datagrams, sent to peers that asked and received (merged) from peers.", "direction"),
		warmBytes:    metric.Counter("warm_answer_bytes_total", "Bytes of warm start answer datagrams, sent and received.", "direction"),
		warmTags:     metric.Counter("warm_tags_total", "Tags in warm start answers, sent, received, and adopted (buckets an answer lowered).", "direction"),
		warmDropped:  metric.Counter("warm_answers_dropped_total", "Warm start answer datagrams dropped, by reason: unasked (for another node, or while not warming), duplicate.", "reason"),
		warmSeconds:  metric.Gauge("warm_duration_seconds", "How long this node's warm start from peers took; present once it is done."),
	}
	relay := newRelayFamilies()
	families := append(relay.all(),
		f.packetsSent, f.bytesSent, f.packetsReceived, f.bytesReceived,
		f.dropped, f.own, f.lost, f.mismatches, f.peers,
		f.reportDuration, f.lastReport,
		f.warmRequests, f.warmAnswers, f.warmBytes, f.warmTags, f.warmDropped, f.warmSeconds,
	)
	return metric.NewCollector(families, func(emit metric.Emit) {
		g := snapshot().Gossip
		if g == nil {
			return
		}
		f.collect(g, emit)
		relay.collect(g.Relay, emit)
	})
}

// collect emits the node's and its warm start's counters; the report
// families only once a report has been sent.
func (f *gossipFamilies) collect(g *Gossip, emit metric.Emit) {
	emit(f.packetsSent, float64(g.PacketsSent))
	emit(f.bytesSent, float64(g.BytesSent))
	emit(f.packetsReceived, float64(g.PacketsReceived))
	emit(f.bytesReceived, float64(g.BytesReceived))
	emit(f.dropped, float64(g.DroppedAuth), "auth")
	emit(f.dropped, float64(g.DroppedMalformed), "malformed")
	emit(f.dropped, float64(g.DroppedVersion), "version")
	emit(f.dropped, float64(g.DroppedDuplicate), "duplicate")
	emit(f.dropped, float64(g.DroppedStale), "stale")
	emit(f.own, float64(g.Own))
	emit(f.lost, float64(g.Lost))
	emit(f.mismatches, float64(g.FingerprintMismatch))
	emit(f.peers, float64(g.Peers))
	if !g.LastReport.IsZero() {
		emit(f.reportDuration, g.LastReportDuration.Seconds())
		emit(f.lastReport, metric.Seconds(g.LastReport))
	}
	w := g.Warm
	emit(f.warmRequests, float64(w.RequestsSent), "sent")
	emit(f.warmRequests, float64(w.RequestsReceived), "received")
	emit(f.warmRequests, float64(w.RequestsRefused), "refused")
	emit(f.warmAnswers, float64(w.AnswersSent), "sent")
	emit(f.warmAnswers, float64(w.AnswersReceived), "received")
	emit(f.warmBytes, float64(w.AnswerBytesSent), "sent")
	emit(f.warmBytes, float64(w.AnswerBytesRecv), "received")
	emit(f.warmTags, float64(w.TagsSent), "sent")
	emit(f.warmTags, float64(w.TagsReceived), "received")
	emit(f.warmTags, float64(w.TagsAdopted), "adopted")
	emit(f.warmDropped, float64(w.DroppedUnasked), "unasked")
	emit(f.warmDropped, float64(w.DroppedDuplicate), "duplicate")
	if w.Warm {
		emit(f.warmSeconds, w.WarmDuration.Seconds())
	}
}
