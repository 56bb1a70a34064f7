package gossip

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the node's metric families, read from Stats, and hands
// out its parts' (warm.Collector, relay.Collector) beside them.

// Collectors returns the node's metrics and its parts', read at each
// scrape: the node's
//
//	dthrottle_gossip_packets_sent_total, _bytes_sent_total
//	dthrottle_gossip_packets_received_total, _bytes_received_total
//	dthrottle_gossip_packets_dropped_total{reason}
//	dthrottle_gossip_own_packets_total, _packets_lost_total
//	dthrottle_gossip_repair_requests_total, _repair_asked_total
//	dthrottle_gossip_packets_repaired_total
//	dthrottle_gossip_repair_answers_total{result}
//	dthrottle_gossip_fingerprint_mismatches_total
//	dthrottle_gossip_peers                     gauge, heard and not silent
//	dthrottle_gossip_report_duration_seconds   gauge, once a report is sent
//	dthrottle_gossip_last_report_timestamp_seconds
//
// membership's (members.go: dthrottle_gossip_share, _peers_missing,
// _peer_behind_seconds),
// then warm start's dthrottle_warm_* and relaying's dthrottle_relay_*.
// They are safe for concurrent use.
func (n *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		n.collector(),
		n.membersCollector(),
		warm.Collector(n.warm.Stats),
		relay.Collector(func() relay.NodeStats { return n.relay.Stats(n.statsTime()) }),
	}
}

// statsTime is the instant relaying's counters are read at: the last
// report's, or now before the first.
func (n *Node) statsTime() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stats.LastReport.IsZero() {
		return time.Now()
	}
	return n.stats.LastReport
}

func (n *Node) collector() prometheus.Collector {
	var (
		packetsSent     = metric.Counter("gossip_packets_sent_total", "Datagrams sent to peers.")
		bytesSent       = metric.Counter("gossip_bytes_sent_total", "Bytes of datagrams sent to peers.")
		packetsReceived = metric.Counter("gossip_packets_received_total", "Datagrams accepted from peers.")
		bytesReceived   = metric.Counter("gossip_bytes_received_total", "Bytes of datagrams accepted from peers.")
		dropped         = metric.Counter("gossip_packets_dropped_total", "Datagrams dropped, by reason: auth (no valid MAC), malformed, version (another format), duplicate, stale (sent before this process started, or too long ago).", "reason")
		own             = metric.Counter("gossip_own_packets_total", "This node's own datagrams heard back and ignored.")
		lost            = metric.Counter("gossip_packets_lost_total", "Datagrams missing from peers' sequence numbers, less those that arrived late or were repaired: the hits they carried were never applied.")
		repairRequests  = metric.Counter("gossip_repair_requests_total", "Repair requests sent, asking peers for datagrams missing from their sequences.")
		repairAsked     = metric.Counter("gossip_repair_asked_total", "Datagrams asked for again, over every request.")
		repaired        = metric.Counter("gossip_packets_repaired_total", "Datagrams that arrived after this node asked for them again.")
		answers         = metric.Counter("gossip_repair_answers_total", "Datagrams peers asked this node for, by result: resent, suppressed (sent again to every peer just before), gone (no longer kept), refused (asked from an address no peer is heard from).", "result")
		mismatches      = metric.Counter("gossip_fingerprint_mismatches_total", "Datagrams from peers whose policies differ from this node's.")
		peers           = metric.Gauge("gossip_peers", "Peers heard and not silent.")
		reportDuration  = metric.Gauge("gossip_report_duration_seconds", "How long the last report took to send.")
		lastReport      = metric.Gauge("gossip_last_report_timestamp_seconds", "When the last report was sent, seconds since the Unix epoch.")
	)
	families := []metric.Family{packetsSent, bytesSent, packetsReceived, bytesReceived, dropped, own, lost,
		repairRequests, repairAsked, repaired, answers, mismatches, peers, reportDuration, lastReport}
	return metric.NewCollector(families, func(emit metric.Emit) {
		g := n.nodeStats()
		emit(packetsSent, float64(g.PacketsSent))
		emit(bytesSent, float64(g.BytesSent))
		emit(packetsReceived, float64(g.PacketsReceived))
		emit(bytesReceived, float64(g.BytesReceived))
		emit(dropped, float64(g.DroppedAuth), "auth")
		emit(dropped, float64(g.DroppedMalformed), "malformed")
		emit(dropped, float64(g.DroppedVersion), "version")
		emit(dropped, float64(g.DroppedDuplicate), "duplicate")
		emit(dropped, float64(g.DroppedStale), "stale")
		emit(own, float64(g.Own))
		emit(lost, float64(g.Lost))
		emit(repairRequests, float64(g.Repair.Requests))
		emit(repairAsked, float64(g.Repair.Asked))
		emit(repaired, float64(g.Repair.Repaired+n.relay.Repaired()))
		emit(answers, float64(g.Repair.Resent), "resent")
		emit(answers, float64(g.Repair.Suppressed), "suppressed")
		emit(answers, float64(g.Repair.Gone), "gone")
		emit(answers, float64(g.Repair.Refused), "refused")
		emit(mismatches, float64(g.FingerprintMismatch))
		emit(peers, float64(n.Heard()))
		if !g.LastReport.IsZero() {
			emit(reportDuration, g.LastReportDuration.Seconds())
			emit(lastReport, metric.Seconds(g.LastReport))
		}
	})
}

// Heard is how many peers, relays of other segments included, are heard
// and not silent now.
func (n *Node) Heard() int {
	heard := 0
	for _, p := range n.Peers() {
		if !p.Silent {
			heard++
		}
	}
	return heard
}
