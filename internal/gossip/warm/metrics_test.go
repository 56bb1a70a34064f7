package warm

import (
	"testing"
	"time"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

var sample = Stats{RequestsSent: 1, RequestsReceived: 3, RequestsRefused: 1, AnswersSent: 20,
	AnswerBytesSent: 28000, TagsSent: 1500, AnswersReceived: 12, AnswerBytesRecv: 16800, TagsReceived: 900,
	TagsAdopted: 700, DroppedUnasked: 2, DroppedDuplicate: 1, PeersAnswered: 2, Warm: true,
	WarmDuration: 1500 * time.Millisecond}

func TestMetrics(t *testing.T) {
	c := Collector(func() Stats { return sample })
	mt.Lint(t, c)
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, mt.Gather(t, c),
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=sent", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=received", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=refused", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_warm_answer_packets_total", Labels: "direction=sent", Kind: counter, Value: 20},
		mt.Sample{Name: "dthrottle_warm_answer_packets_total", Labels: "direction=received", Kind: counter, Value: 12},
		mt.Sample{Name: "dthrottle_warm_answer_bytes_total", Labels: "direction=sent", Kind: counter, Value: 28000},
		mt.Sample{Name: "dthrottle_warm_answer_bytes_total", Labels: "direction=received", Kind: counter, Value: 16800},
		mt.Sample{Name: "dthrottle_warm_tags_total", Labels: "direction=sent", Kind: counter, Value: 1500},
		mt.Sample{Name: "dthrottle_warm_tags_total", Labels: "direction=received", Kind: counter, Value: 900},
		mt.Sample{Name: "dthrottle_warm_tags_total", Labels: "direction=adopted", Kind: counter, Value: 700},
		mt.Sample{Name: "dthrottle_warm_answers_dropped_total", Labels: "reason=unasked", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_warm_answers_dropped_total", Labels: "reason=duplicate", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_warm_duration_seconds", Kind: gauge, Value: 1.5},
	)
}

// The duration is present only once warm start is done.
func TestMetricsWhileWarming(t *testing.T) {
	st := sample
	st.Warm, st.Warming = false, true
	fams := mt.Gather(t, Collector(func() Stats { return st }))
	if _, ok := fams["dthrottle_warm_duration_seconds"]; ok {
		t.Error("dthrottle_warm_duration_seconds served while warming")
	}
}
