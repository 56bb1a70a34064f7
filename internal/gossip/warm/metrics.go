package warm

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns warm start's metric families, read from Stats.

// Collector returns warm start's metrics, read from stats at each scrape:
//
//	dthrottle_warm_requests_total{direction="sent|received|refused"}
//	dthrottle_warm_answer_packets_total{direction="sent|received"}
//	dthrottle_warm_answer_bytes_total{direction="sent|received"}
//	dthrottle_warm_tags_total{direction="sent|received|adopted"}
//	dthrottle_warm_answers_dropped_total{reason="unasked|duplicate"}
//	dthrottle_warm_duration_seconds   gauge, once warm start is done
//
// It is safe for concurrent use as long as stats is.
func Collector(stats func() Stats) prometheus.Collector {
	var (
		requests = metric.Counter("warm_requests_total", "Warm start snapshot requests, by direction: sent (this node asking), received (peers asking), refused (received and not answered: answered before, too many at once).", "direction")
		answers  = metric.Counter("warm_answer_packets_total", "Warm start answer datagrams, sent to peers that asked and received (merged) from peers.", "direction")
		bytes    = metric.Counter("warm_answer_bytes_total", "Bytes of warm start answer datagrams, sent and received.", "direction")
		tags     = metric.Counter("warm_tags_total", "Tags in warm start answers, sent, received, and adopted (buckets an answer lowered).", "direction")
		dropped  = metric.Counter("warm_answers_dropped_total", "Warm start answer datagrams dropped, by reason: unasked (for another node, or while not warming), duplicate.", "reason")
		took     = metric.Gauge("warm_duration_seconds", "How long this node's warm start from peers took; present once it is done.")
	)
	families := []metric.Family{requests, answers, bytes, tags, dropped, took}
	return metric.NewCollector(families, func(emit metric.Emit) {
		w := stats()
		emit(requests, float64(w.RequestsSent), "sent")
		emit(requests, float64(w.RequestsReceived), "received")
		emit(requests, float64(w.RequestsRefused), "refused")
		emit(answers, float64(w.AnswersSent), "sent")
		emit(answers, float64(w.AnswersReceived), "received")
		emit(bytes, float64(w.AnswerBytesSent), "sent")
		emit(bytes, float64(w.AnswerBytesRecv), "received")
		emit(tags, float64(w.TagsSent), "sent")
		emit(tags, float64(w.TagsReceived), "received")
		emit(tags, float64(w.TagsAdopted), "adopted")
		emit(dropped, float64(w.DroppedUnasked), "unasked")
		emit(dropped, float64(w.DroppedDuplicate), "duplicate")
		if w.Warm {
			emit(took, w.WarmDuration.Seconds())
		}
	})
}
