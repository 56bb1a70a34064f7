package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dthrottle/dthrottle/gossip/relay"
	"github.com/dthrottle/dthrottle/gossip/warm"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// scrape fetches /metrics from h and parses it with the Prometheus text
// parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	res, body := do(t, h, http.MethodGet, "/metrics")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", res.StatusCode, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want text/plain", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// fakeCollector is a component's collector, as the daemon gives them.
func fakeCollector(value float64) prometheus.Collector {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "dthrottle_fake_total", Help: "A component's counter."})
	c.Add(value)
	return c
}

// The gossip node's families come from the snapshot, every other from the
// collectors given, beside the Go runtime's and the process's.
func TestMetricsValues(t *testing.T) {
	f := newFake()
	src := f.sources()
	src.Collectors = []prometheus.Collector{fakeCollector(42)}
	fams := scrape(t, handler(t, src))
	if n := f.snapshots.Load(); n != 1 {
		t.Errorf("one scrape took %d snapshots, want 1", n)
	}
	const counter, gauge = mt.Counter, mt.Gauge
	snap := fakeSnapshot()
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_fake_total", Kind: counter, Value: 42},
		mt.Sample{Name: "dthrottle_gossip_packets_sent_total", Kind: counter, Value: 11},
		mt.Sample{Name: "dthrottle_gossip_bytes_sent_total", Kind: counter, Value: 1100},
		mt.Sample{Name: "dthrottle_gossip_packets_received_total", Kind: counter, Value: 22},
		mt.Sample{Name: "dthrottle_gossip_bytes_received_total", Kind: counter, Value: 2200},
		mt.Sample{Name: "dthrottle_gossip_packets_dropped_total", Labels: "reason=auth", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_gossip_packets_dropped_total", Labels: "reason=malformed", Kind: counter, Value: 4},
		mt.Sample{Name: "dthrottle_gossip_packets_dropped_total", Labels: "reason=version", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_gossip_packets_dropped_total", Labels: "reason=duplicate", Kind: counter, Value: 6},
		mt.Sample{Name: "dthrottle_gossip_packets_dropped_total", Labels: "reason=stale", Kind: counter, Value: 14},
		mt.Sample{Name: "dthrottle_gossip_own_packets_total", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_gossip_packets_lost_total", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_gossip_fingerprint_mismatches_total", Kind: counter, Value: 13},
		mt.Sample{Name: "dthrottle_gossip_peers", Kind: gauge, Value: 2},
		mt.Sample{Name: "dthrottle_gossip_report_duration_seconds", Kind: gauge, Value: 0.0015},
		mt.Sample{Name: "dthrottle_gossip_last_report_timestamp_seconds", Kind: gauge, Value: float64(snap.Gossip.LastReport.UnixNano()) / 1e9},
	)
	// The runtime and process collectors are registered too.
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
}

// Two collectors of one family cannot both be served: New says so rather
// than fail every scrape.
func TestMetricsCollectorsClash(t *testing.T) {
	src := newFake().sources()
	src.Collectors = []prometheus.Collector{fakeCollector(1), fakeCollector(2)}
	_, err := newServer(Config{Addr: "127.0.0.1:0"}, src, func() time.Time { return t0 })
	if err == nil || !strings.HasPrefix(err.Error(), "admin: registering metrics: ") {
		t.Fatalf("newServer with two collectors of one family: %v", err)
	}
}

func TestMetricsGossipOff(t *testing.T) {
	f := newFake()
	f.snap.Gossip = nil
	src := f.sources()
	src.Collectors = []prometheus.Collector{fakeCollector(42)}
	fams := scrape(t, handler(t, src))
	for _, prefix := range []string{"dthrottle_gossip_", "dthrottle_warm_", "dthrottle_relay_"} {
		mt.Absent(t, fams, prefix)
	}
	mt.Expect(t, fams, mt.Sample{Name: "dthrottle_fake_total", Kind: mt.Counter, Value: 42})
}

func TestMetricsBeforeFirstReport(t *testing.T) {
	f := newFake()
	f.snap.Gossip.LastReport = time.Time{}
	fams := scrape(t, handler(t, f.sources()))
	for _, name := range []string{"dthrottle_gossip_report_duration_seconds", "dthrottle_gossip_last_report_timestamp_seconds"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s served before the first report", name)
		}
	}
	mt.Expect(t, fams, mt.Sample{Name: "dthrottle_gossip_peers", Kind: mt.Gauge, Value: 2})
}

// The gossip collector follows Prometheus's naming conventions (promlint)
// and emits only what it describes (a pedantic registry checks).
func TestMetricsLint(t *testing.T) {
	for _, on := range []bool{true, false} {
		f := newFake()
		if on {
			f.snap.Gossip.Warm = warmSample
			f.snap.Gossip.Relay = relaySample
		} else {
			f.snap.Gossip = nil
		}
		t.Run(map[bool]string{true: "gossip", false: "standalone"}[on], func(t *testing.T) {
			mt.Lint(t, newGossipCollector(f.sources().Snapshot))
		})
	}
}

var (
	warmSample = warm.Stats{RequestsSent: 1, RequestsReceived: 3, RequestsRefused: 1, AnswersSent: 20,
		AnswerBytesSent: 28000, TagsSent: 1500, AnswersReceived: 12, AnswerBytesRecv: 16800, TagsReceived: 900,
		TagsAdopted: 700, DroppedUnasked: 2, DroppedDuplicate: 1, PeersAnswered: 2, Warm: true,
		WarmDuration: 1500 * time.Millisecond}
	relaySample = relay.NodeStats{Mode: "serve", Relays: 1, RemoteRelays: 2, ViaRelays: 10, Direct: 1,
		ToRelayPackets: 3, ToRelayBytes: 300, AggregatePackets: 4, AggregateBytes: 400, CrossingPackets: 5, CrossingBytes: 500,
		ToRelayReceived: 6, ToRelayBytesReceived: 600, AggregatesReceived: 7, AggregateBytesReceived: 700,
		CrossingsReceived: 8, CrossingBytesReceived: 800, ForeignHits: 9, OwnPending: 2,
		Sum: relay.Stats{HeldTags: 4, HeldHits: 5, HotTags: 6, Passed: 7, Dropped: 8}}
)

// The warm start has its metrics.
func TestMetricsWarm(t *testing.T) {
	f := newFake()
	f.snap.Gossip.Warm = warmSample
	fams := scrape(t, handler(t, f.sources()))
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=sent", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=received", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_warm_requests_total", Labels: "direction=refused", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_warm_answer_packets_total", Labels: "direction=sent", Kind: counter, Value: 20},
		mt.Sample{Name: "dthrottle_warm_answer_packets_total", Labels: "direction=received", Kind: counter, Value: 12},
		mt.Sample{Name: "dthrottle_warm_answer_bytes_total", Labels: "direction=received", Kind: counter, Value: 16800},
		mt.Sample{Name: "dthrottle_warm_tags_total", Labels: "direction=adopted", Kind: counter, Value: 700},
		mt.Sample{Name: "dthrottle_warm_answers_dropped_total", Labels: "reason=unasked", Kind: counter, Value: 2},
		mt.Sample{Name: "dthrottle_warm_duration_seconds", Kind: gauge, Value: 1.5},
	)
}

// Relaying has its metrics: mode, relays heard, reports by path, traffic
// by kind and direction, a relay's sums.
func TestMetricsRelay(t *testing.T) {
	f := newFake()
	f.snap.Gossip.Relay = relaySample
	fams := scrape(t, handler(t, f.sources()))
	const counter, gauge = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_relay_mode", Labels: "mode=serve", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_relay_relays", Labels: "where=segment", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_relay_relays", Labels: "where=remote", Kind: gauge, Value: 2},
		mt.Sample{Name: "dthrottle_relay_reports_total", Labels: "path=relays", Kind: counter, Value: 10},
		mt.Sample{Name: "dthrottle_relay_reports_total", Labels: "path=direct", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_relay_packets_total", Labels: "direction=sent,kind=to_relay", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_relay_packets_total", Labels: "direction=received,kind=crossing", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_relay_bytes_total", Labels: "direction=sent,kind=aggregate", Kind: counter, Value: 400},
		mt.Sample{Name: "dthrottle_relay_bytes_total", Labels: "direction=received,kind=to_relay", Kind: counter, Value: 600},
		mt.Sample{Name: "dthrottle_relay_held_tags", Kind: gauge, Value: 4},
		mt.Sample{Name: "dthrottle_relay_held_hits", Kind: gauge, Value: 5},
		mt.Sample{Name: "dthrottle_relay_hot_tags", Kind: gauge, Value: 6},
		mt.Sample{Name: "dthrottle_relay_hits_total", Labels: "outcome=passed", Kind: counter, Value: 7},
		mt.Sample{Name: "dthrottle_relay_hits_total", Labels: "outcome=dropped", Kind: counter, Value: 8},
		mt.Sample{Name: "dthrottle_relay_hits_total", Labels: "outcome=foreign", Kind: counter, Value: 9},
		mt.Sample{Name: "dthrottle_relay_own_pending_tags", Kind: gauge, Value: 2},
	)
}
