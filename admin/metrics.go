package admin

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// family is one dthrottle_ metric family: its description and its type.
type family struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

func newFamily(name, help string, kind prometheus.ValueType, labels ...string) family {
	return family{prometheus.NewDesc("dthrottle_"+name, help, labels, nil), kind}
}

// collector turns one Snapshot per scrape into constant metrics. It is safe
// for concurrent use as long as its snapshot function is.
type collector struct {
	snapshot func() Snapshot

	buildInfo, startTime                                   family
	queries, policyQueries, requests, linesTooLong         family
	tags, evictions, evictedHits                           family
	connections, accepted, rejected                        family
	reloads, reloadFailures                                family
	packetsSent, bytesSent, packetsReceived, bytesReceived family
	dropped, own, lost, mismatches, peers                  family
	reportDuration, lastReport                             family
	dryRunRefused                                          family
	httpRequests, httpConnections, httpRejected            family
	spoe                                                   spoeFamilies
	warmRequests, warmAnswers, warmBytes, warmTags         family
	warmDropped, warmSeconds                               family
	learned, learnedTotal                                  family
	stateLoadTags, stateLoadBytes, stateLoadSeconds        family
	stateLoadAge, stateIgnored                             family
	relayFamilies
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(snapshot func() Snapshot) *collector {
	const (
		counter = prometheus.CounterValue
		gauge   = prometheus.GaugeValue
	)
	return &collector{
		snapshot:  snapshot,
		buildInfo: newFamily("build_info", "Always 1, labelled with the daemon's version.", gauge, "version"),
		startTime: newFamily("start_time_seconds", "When the daemon started, seconds since the Unix epoch.", gauge),

		queries:       newFamily("queries_total", "Queries decided by a policy, by answer (empty tags are answered ok without a policy and not counted here).", counter, "result"),
		policyQueries: newFamily("policy_queries_total", "Queries decided by each policy, by answer.", counter, "policy", "result"),
		requests:      newFamily("requests_total", "Requests answered on the query socket, empty tags included.", counter),
		linesTooLong:  newFamily("lines_too_long_total", "Query connections closed for a line over the 64 KiB hard cap.", counter),

		tags:        newFamily("tags", "Tags tracked in the table.", gauge),
		evictions:   newFamily("evictions_total", "Tags evicted by the max_tags cap.", counter),
		evictedHits: newFamily("evicted_hits_total", "Unreported hits lost with evicted tags.", counter),

		connections: newFamily("connections", "Query connections being served.", gauge),
		accepted:    newFamily("connections_accepted_total", "Query connections taken into service.", counter),
		rejected:    newFamily("connections_rejected_total", "Query connections closed on arrival because max_conns were being served.", counter),

		reloads:        newFamily("config_reloads_total", "Configuration reloads applied.", counter),
		reloadFailures: newFamily("config_reload_failures_total", "Configuration reloads rejected, the running configuration kept.", counter),

		packetsSent:     newFamily("gossip_packets_sent_total", "Datagrams sent to peers.", counter),
		bytesSent:       newFamily("gossip_bytes_sent_total", "Bytes of datagrams sent to peers.", counter),
		packetsReceived: newFamily("gossip_packets_received_total", "Datagrams accepted from peers.", counter),
		bytesReceived:   newFamily("gossip_bytes_received_total", "Bytes of datagrams accepted from peers.", counter),
		dropped:         newFamily("gossip_packets_dropped_total", "Datagrams dropped, by reason: auth (no valid MAC), malformed, version (another format), duplicate, stale (sent before this process started, or too long ago).", counter, "reason"),
		own:             newFamily("gossip_own_packets_total", "This node's own datagrams heard back and ignored.", counter),
		lost:            newFamily("gossip_packets_lost_total", "Datagrams missing from peers' sequence numbers, less those that arrived late: the hits they carried were never applied.", counter),
		mismatches:      newFamily("gossip_fingerprint_mismatches_total", "Datagrams from peers whose policies differ from this node's.", counter),
		peers:           newFamily("gossip_peers", "Peers heard and not silent.", gauge),
		reportDuration:  newFamily("gossip_report_duration_seconds", "How long the last report took to send.", gauge),
		lastReport:      newFamily("gossip_last_report_timestamp_seconds", "When the last report was sent, seconds since the Unix epoch.", gauge),

		dryRunRefused:   newFamily("policy_dry_run_refused_total", "Queries a dry-run policy served that its limit would have refused (also counted as ok).", counter, "policy"),
		httpRequests:    newFamily("http_requests_total", "Requests to the HTTP decision endpoint, by result: allowed (2xx), refused, bad (4xx for their form).", counter, "result"),
		httpConnections: newFamily("http_connections", "HTTP decision endpoint connections open.", gauge),
		httpRejected:    newFamily("http_connections_rejected_total", "HTTP decision endpoint connections refused because its max_conns were open: answered 503, or closed at once past 64 such answers in flight.", counter),
		spoe:            newSPOEFamilies(),

		warmRequests: newFamily("warm_requests_total", "Warm start snapshot requests, by direction: sent (this node asking), received (peers asking), refused (received and not answered: answered before, too many at once).", counter, "direction"),
		warmAnswers:  newFamily("warm_answer_packets_total", "Warm start answer datagrams, sent to peers that asked and received (merged) from peers.", counter, "direction"),
		warmBytes:    newFamily("warm_answer_bytes_total", "Bytes of warm start answer datagrams, sent and received.", counter, "direction"),
		warmTags:     newFamily("warm_tags_total", "Tags in warm start answers, sent, received, and adopted (buckets an answer lowered).", counter, "direction"),
		warmDropped:  newFamily("warm_answers_dropped_total", "Warm start answer datagrams dropped, by reason: unasked (for another node, or while not warming), duplicate.", counter, "reason"),
		warmSeconds:  newFamily("warm_duration_seconds", "How long this node's warm start from peers took; present once it is done.", gauge),

		learned:      newFamily("gossip_peers_learned", "Unicast peers learned and sent to now.", gauge),
		learnedTotal: newFamily("gossip_peers_learned_total", "Unicast peers learned, by event: added, forgotten (silent for the silence timeout), refused (max_peers were learned).", counter, "event"),

		stateLoadTags:    newFamily("state_load_tags", "Tags read back from the state file on start.", gauge),
		stateLoadBytes:   newFamily("state_load_bytes", "Size of the state file read back on start.", gauge),
		stateLoadSeconds: newFamily("state_load_duration_seconds", "How long reading the state file back took.", gauge),
		stateLoadAge:     newFamily("state_load_age_seconds", "How old the state file read back was when the daemon started.", gauge),
		stateIgnored:     newFamily("state_ignored", "1 when the state file was ignored on start, labelled with why: corrupt, truncated, version, future, stale, oversized, unreadable.", gauge, "reason"),

		relayFamilies: newRelayFamilies(),
	}
}

func (c *collector) families() []family {
	return append(c.spoe.all(),
		c.buildInfo, c.startTime,
		c.queries, c.policyQueries, c.requests, c.linesTooLong,
		c.tags, c.evictions, c.evictedHits,
		c.connections, c.accepted, c.rejected,
		c.reloads, c.reloadFailures,
		c.packetsSent, c.bytesSent, c.packetsReceived, c.bytesReceived,
		c.dropped, c.own, c.lost, c.mismatches, c.peers,
		c.reportDuration, c.lastReport,
		c.dryRunRefused, c.httpRequests, c.httpConnections, c.httpRejected,
		c.warmRequests, c.warmAnswers, c.warmBytes, c.warmTags, c.warmDropped, c.warmSeconds,
		c.learned, c.learnedTotal,
		c.stateLoadTags, c.stateLoadBytes, c.stateLoadSeconds, c.stateLoadAge, c.stateIgnored,
		c.relayMode, c.relayRelays, c.relayReports, c.relayPackets, c.relayBytes,
		c.relayHeldTags, c.relayHeldHits, c.relayHotTags, c.relayHits, c.relayOwnPending,
		c.relayRemoteSilences, c.relayCrossingsLost,
	)
}

// Describe sends every family this collector may emit.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.families() {
		ch <- f.desc
	}
}

// Collect reads one Snapshot and sends its values. Gossip families are
// sent only when gossip is enabled, and the report ones only once a report
// has been sent.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	emit := func(f family, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(f.desc, f.kind, v, labels...)
	}
	emit(c.buildInfo, 1, label(s.Version))
	if !s.Started.IsZero() {
		emit(c.startTime, seconds(s.Started.UnixNano()))
	}

	// Policy names are unique in a valid config, but one may be named like
	// the default; sum rather than emit a series twice (a failed scrape).
	type okNo struct{ ok, no, dry uint64 }
	byName := make(map[string]okNo, len(s.Policies))
	names := make([]string, 0, len(s.Policies))
	var total okNo
	for _, p := range s.Policies {
		name := label(p.Name)
		n, seen := byName[name]
		if !seen {
			names = append(names, name)
		}
		byName[name] = okNo{n.ok + p.OK, n.no + p.NO, n.dry + p.DryRunRefused}
		total = okNo{total.ok + p.OK, total.no + p.NO, 0}
	}
	for _, name := range names {
		emit(c.policyQueries, float64(byName[name].ok), name, "ok")
		emit(c.policyQueries, float64(byName[name].no), name, "no")
		emit(c.dryRunRefused, float64(byName[name].dry), name)
	}
	emit(c.queries, float64(total.ok), "ok")
	emit(c.queries, float64(total.no), "no")
	emit(c.requests, float64(s.Server.Queries))
	emit(c.linesTooLong, float64(s.Server.LineTooLong))

	emit(c.tags, float64(s.Table.Tags))
	emit(c.evictions, float64(s.Table.Evictions))
	emit(c.evictedHits, float64(s.Table.EvictedHits))
	emit(c.connections, float64(s.Server.Active))
	emit(c.accepted, float64(s.Server.Accepted))
	emit(c.rejected, float64(s.Server.Rejected))
	emit(c.reloads, float64(s.Reloads))
	emit(c.reloadFailures, float64(s.ReloadFailures))
	if st := s.State; st != nil {
		if st.Loaded {
			emit(c.stateLoadTags, float64(st.Load.Tags))
			emit(c.stateLoadBytes, float64(st.Load.Bytes))
			emit(c.stateLoadSeconds, st.Load.Duration.Seconds())
			emit(c.stateLoadAge, st.Load.Age.Seconds())
		}
		if st.Ignored != "" {
			emit(c.stateIgnored, 1, label(st.Ignored))
		}
	}
	if h := s.HTTP; h != nil {
		emit(c.httpRequests, float64(h.Allowed), "allowed")
		emit(c.httpRequests, float64(h.Refused), "refused")
		emit(c.httpRequests, float64(h.Bad), "bad")
		emit(c.httpConnections, float64(h.Active))
		emit(c.httpRejected, float64(h.Rejected))
	}
	if sp := s.SPOE; sp != nil {
		c.spoe.collect(sp, emit)
	}

	g := s.Gossip
	if g == nil {
		return
	}
	emit(c.packetsSent, float64(g.PacketsSent))
	emit(c.bytesSent, float64(g.BytesSent))
	emit(c.packetsReceived, float64(g.PacketsReceived))
	emit(c.bytesReceived, float64(g.BytesReceived))
	emit(c.dropped, float64(g.DroppedAuth), "auth")
	emit(c.dropped, float64(g.DroppedMalformed), "malformed")
	emit(c.dropped, float64(g.DroppedVersion), "version")
	emit(c.dropped, float64(g.DroppedDuplicate), "duplicate")
	emit(c.dropped, float64(g.DroppedStale), "stale")
	emit(c.own, float64(g.Own))
	emit(c.lost, float64(g.Lost))
	emit(c.mismatches, float64(g.FingerprintMismatch))
	emit(c.peers, float64(g.Peers))
	if !g.LastReport.IsZero() {
		emit(c.reportDuration, g.LastReportDuration.Seconds())
		emit(c.lastReport, seconds(g.LastReport.UnixNano()))
	}
	emit(c.learned, float64(g.Discovery.Learned))
	emit(c.learnedTotal, float64(g.Discovery.Added), "added")
	emit(c.learnedTotal, float64(g.Discovery.Forgotten), "forgotten")
	emit(c.learnedTotal, float64(g.Discovery.Refused), "refused")
	w := g.Warm
	emit(c.warmRequests, float64(w.RequestsSent), "sent")
	emit(c.warmRequests, float64(w.RequestsReceived), "received")
	emit(c.warmRequests, float64(w.RequestsRefused), "refused")
	emit(c.warmAnswers, float64(w.AnswersSent), "sent")
	emit(c.warmAnswers, float64(w.AnswersReceived), "received")
	emit(c.warmBytes, float64(w.AnswerBytesSent), "sent")
	emit(c.warmBytes, float64(w.AnswerBytesRecv), "received")
	emit(c.warmTags, float64(w.TagsSent), "sent")
	emit(c.warmTags, float64(w.TagsReceived), "received")
	emit(c.warmTags, float64(w.TagsAdopted), "adopted")
	emit(c.warmDropped, float64(w.DroppedUnasked), "unasked")
	emit(c.warmDropped, float64(w.DroppedDuplicate), "duplicate")
	if w.Warm {
		emit(c.warmSeconds, w.WarmDuration.Seconds())
	}
	c.relayFamilies.collect(g.Relay, emit)
}

// seconds converts Unix nanoseconds to seconds.
func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// label makes s a valid label value: Prometheus requires UTF-8.
func label(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
