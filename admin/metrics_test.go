package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/gossip"
	"github.com/dthrottle/dthrottle/state"

	"github.com/dthrottle/dthrottle/gossip/relay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// sample is one expected series: family, labels as name=value pairs, value.
type sample struct {
	name   string
	labels string // "policy=login,result=ok"; "" for none
	kind   dto.MetricType
	value  float64
}

// value finds the series of fams named by s and returns its value.
func value(t *testing.T, fams map[string]*dto.MetricFamily, s sample) float64 {
	t.Helper()
	f, ok := fams[s.name]
	if !ok {
		t.Fatalf("%s: family missing", s.name)
	}
	if f.GetType() != s.kind {
		t.Errorf("%s: type %v, want %v", s.name, f.GetType(), s.kind)
	}
	for _, m := range f.GetMetric() {
		var pairs []string
		for _, l := range m.GetLabel() {
			pairs = append(pairs, l.GetName()+"="+l.GetValue())
		}
		if strings.Join(pairs, ",") != s.labels {
			continue
		}
		switch s.kind {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		}
		t.Fatalf("%s: unexpected type %v", s.name, s.kind)
	}
	t.Fatalf("%s{%s}: series missing", s.name, s.labels)
	return 0
}

func TestMetricsValues(t *testing.T) {
	f := newFake()
	fams := scrape(t, handler(t, f.sources()))
	if n := f.snapshots.Load(); n != 1 {
		t.Errorf("one scrape took %d snapshots, want 1", n)
	}
	const counter, gauge = dto.MetricType_COUNTER, dto.MetricType_GAUGE
	snap := fakeSnapshot()
	for _, s := range []sample{
		{"dthrottle_build_info", "version=1.2.3", gauge, 1},
		{"dthrottle_start_time_seconds", "", gauge, float64(snap.Started.UnixNano()) / 1e9},
		{"dthrottle_queries_total", "result=ok", counter, 90},
		{"dthrottle_queries_total", "result=no", counter, 10},
		{"dthrottle_policy_queries_total", "policy=default,result=ok", counter, 60},
		{"dthrottle_policy_queries_total", "policy=default,result=no", counter, 8},
		{"dthrottle_policy_queries_total", "policy=login,result=ok", counter, 30},
		{"dthrottle_policy_queries_total", "policy=login,result=no", counter, 2},
		{"dthrottle_requests_total", "", counter, 100},
		{"dthrottle_lines_too_long_total", "", counter, 2},
		{"dthrottle_tags", "", gauge, 1234},
		{"dthrottle_evictions_total", "", counter, 5},
		{"dthrottle_evicted_hits_total", "", counter, 7},
		{"dthrottle_connections", "", gauge, 3},
		{"dthrottle_connections_accepted_total", "", counter, 10},
		{"dthrottle_connections_rejected_total", "", counter, 1},
		{"dthrottle_config_reloads_total", "", counter, 4},
		{"dthrottle_config_reload_failures_total", "", counter, 1},
		{"dthrottle_gossip_packets_sent_total", "", counter, 11},
		{"dthrottle_gossip_bytes_sent_total", "", counter, 1100},
		{"dthrottle_gossip_packets_received_total", "", counter, 22},
		{"dthrottle_gossip_bytes_received_total", "", counter, 2200},
		{"dthrottle_gossip_packets_dropped_total", "reason=auth", counter, 3},
		{"dthrottle_gossip_packets_dropped_total", "reason=malformed", counter, 4},
		{"dthrottle_gossip_packets_dropped_total", "reason=version", counter, 5},
		{"dthrottle_gossip_packets_dropped_total", "reason=duplicate", counter, 6},
		{"dthrottle_gossip_packets_dropped_total", "reason=stale", counter, 14},
		{"dthrottle_gossip_own_packets_total", "", counter, 8},
		{"dthrottle_gossip_packets_lost_total", "", counter, 9},
		{"dthrottle_gossip_fingerprint_mismatches_total", "", counter, 13},
		{"dthrottle_gossip_peers", "", gauge, 2},
		{"dthrottle_gossip_report_duration_seconds", "", gauge, 0.0015},
		{"dthrottle_gossip_last_report_timestamp_seconds", "", gauge, float64(snap.Gossip.LastReport.UnixNano()) / 1e9},
	} {
		if got := value(t, fams, s); got != s.value {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, got, s.value)
		}
	}
	// The runtime and process collectors are registered too.
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
}

func TestMetricsGossipOff(t *testing.T) {
	f := newFake()
	f.snap.Gossip = nil
	fams := scrape(t, handler(t, f.sources()))
	for name := range fams {
		if strings.HasPrefix(name, "dthrottle_gossip_") {
			t.Errorf("%s served with gossip off", name)
		}
	}
	if got := value(t, fams, sample{"dthrottle_tags", "", dto.MetricType_GAUGE, 0}); got != 1234 {
		t.Errorf("dthrottle_tags = %v, want 1234", got)
	}
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
	if got := value(t, fams, sample{"dthrottle_gossip_peers", "", dto.MetricType_GAUGE, 0}); got != 2 {
		t.Errorf("dthrottle_gossip_peers = %v, want 2", got)
	}
}

// A policy named like another must not fail the scrape with a duplicate
// series, and a label value must be UTF-8.
func TestMetricsPolicyNames(t *testing.T) {
	f := newFake()
	f.snap.Policies = []bucket.PolicyStats{
		{Policy: bucket.Policy{Name: "default"}, OK: 1, NO: 2},
		{Policy: bucket.Policy{Name: "default", Action: bucket.Deny}, OK: 0, NO: 5},
		{Policy: bucket.Policy{Name: "bad\xff", Action: bucket.Allow}, OK: 7},
	}
	f.snap.Version = "v\xfe"
	fams := scrape(t, handler(t, f.sources()))
	const counter = dto.MetricType_COUNTER
	for _, s := range []sample{
		{"dthrottle_policy_queries_total", "policy=default,result=ok", counter, 1},
		{"dthrottle_policy_queries_total", "policy=default,result=no", counter, 7},
		{"dthrottle_policy_queries_total", "policy=bad\uFFFD,result=ok", counter, 7},
		{"dthrottle_queries_total", "result=ok", counter, 8},
		{"dthrottle_queries_total", "result=no", counter, 7},
		{"dthrottle_build_info", "version=v\uFFFD", dto.MetricType_GAUGE, 1},
	} {
		if got := value(t, fams, s); got != s.value {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, got, s.value)
		}
	}
}

// The collector follows Prometheus's naming conventions (promlint) and
// emits only what it describes (a pedantic registry checks).
func TestMetricsLint(t *testing.T) {
	for _, gossip := range []bool{true, false} {
		f := newFake()
		if gossip {
			f.snap.Gossip.Warm = warmSample
			f.snap.Gossip.Relay = relaySample
			f.snap.State = &stateSample
		} else {
			f.snap.Gossip = nil
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(newCollector(f.sources().Snapshot))
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatalf("gossip %v: %v", gossip, err)
		}
		for _, p := range problems {
			t.Errorf("gossip %v: %s: %s", gossip, p.Metric, p.Text)
		}
	}
}

var (
	warmSample = gossip.WarmStats{RequestsSent: 1, RequestsReceived: 3, RequestsRefused: 1, AnswersSent: 20,
		AnswerBytesSent: 28000, TagsSent: 1500, AnswersReceived: 12, AnswerBytesRecv: 16800, TagsReceived: 900,
		TagsAdopted: 700, DroppedUnasked: 2, DroppedDuplicate: 1, PeersAnswered: 2, Warm: true,
		WarmDuration: 1500 * time.Millisecond}
	relaySample = gossip.RelayNodeStats{Mode: "serve", Relays: 1, RemoteRelays: 2, ViaRelays: 10, Direct: 1,
		ToRelayPackets: 3, ToRelayBytes: 300, AggregatePackets: 4, AggregateBytes: 400, CrossingPackets: 5, CrossingBytes: 500,
		ToRelayReceived: 6, ToRelayBytesReceived: 600, AggregatesReceived: 7, AggregateBytesReceived: 700,
		CrossingsReceived: 8, CrossingBytesReceived: 800, ForeignHits: 9, OwnPending: 2,
		Sum: relay.Stats{HeldTags: 4, HeldHits: 5, HotTags: 6, Passed: 7, Dropped: 8}}
	stateSample = state.Stats{Loaded: true, Load: state.Info{Tags: 1000, Adopted: 900, Bytes: 21000,
		Duration: 2 * time.Millisecond, Age: 90 * time.Second}}
)

// The warm start and the state file have their metrics; an ignored file
// says why.
func TestMetricsWarmAndState(t *testing.T) {
	f := newFake()
	f.snap.Gossip.Warm = warmSample
	f.snap.State = &stateSample
	fams := scrape(t, handler(t, f.sources()))
	const counter, gauge = dto.MetricType_COUNTER, dto.MetricType_GAUGE
	for _, s := range []sample{
		{"dthrottle_warm_requests_total", "direction=sent", counter, 1},
		{"dthrottle_warm_requests_total", "direction=received", counter, 3},
		{"dthrottle_warm_requests_total", "direction=refused", counter, 1},
		{"dthrottle_warm_answer_packets_total", "direction=sent", counter, 20},
		{"dthrottle_warm_answer_packets_total", "direction=received", counter, 12},
		{"dthrottle_warm_answer_bytes_total", "direction=received", counter, 16800},
		{"dthrottle_warm_tags_total", "direction=adopted", counter, 700},
		{"dthrottle_warm_answers_dropped_total", "reason=unasked", counter, 2},
		{"dthrottle_warm_duration_seconds", "", gauge, 1.5},
		{"dthrottle_state_load_tags", "", gauge, 1000},
		{"dthrottle_state_load_bytes", "", gauge, 21000},
		{"dthrottle_state_load_age_seconds", "", gauge, 90},
	} {
		if got := value(t, fams, s); got != s.value {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, got, s.value)
		}
	}
	if _, ok := fams["dthrottle_state_ignored"]; ok {
		t.Error("dthrottle_state_ignored served for a file read back")
	}
	f.snap.State = &state.Stats{Ignored: "stale"}
	fams = scrape(t, handler(t, f.sources()))
	if got := value(t, fams, sample{"dthrottle_state_ignored", "reason=stale", gauge, 1}); got != 1 {
		t.Errorf("dthrottle_state_ignored{reason=stale} = %v, want 1", got)
	}
	if _, ok := fams["dthrottle_state_load_tags"]; ok {
		t.Error("dthrottle_state_load_tags served for an ignored file")
	}
}

// Relaying has its metrics: mode, relays heard, reports by path, traffic
// by kind and direction, a relay's sums.
func TestMetricsRelay(t *testing.T) {
	f := newFake()
	f.snap.Gossip.Relay = relaySample
	fams := scrape(t, handler(t, f.sources()))
	const counter, gauge = dto.MetricType_COUNTER, dto.MetricType_GAUGE
	for _, s := range []sample{
		{"dthrottle_relay_mode", "mode=serve", gauge, 1},
		{"dthrottle_relay_relays", "where=segment", gauge, 1},
		{"dthrottle_relay_relays", "where=remote", gauge, 2},
		{"dthrottle_relay_reports_total", "path=relays", counter, 10},
		{"dthrottle_relay_reports_total", "path=direct", counter, 1},
		{"dthrottle_relay_packets_total", "direction=sent,kind=to_relay", counter, 3},
		{"dthrottle_relay_packets_total", "direction=received,kind=crossing", counter, 8},
		{"dthrottle_relay_bytes_total", "direction=sent,kind=aggregate", counter, 400},
		{"dthrottle_relay_bytes_total", "direction=received,kind=to_relay", counter, 600},
		{"dthrottle_relay_held_tags", "", gauge, 4},
		{"dthrottle_relay_held_hits", "", gauge, 5},
		{"dthrottle_relay_hot_tags", "", gauge, 6},
		{"dthrottle_relay_hits_total", "outcome=passed", counter, 7},
		{"dthrottle_relay_hits_total", "outcome=dropped", counter, 8},
		{"dthrottle_relay_hits_total", "outcome=foreign", counter, 9},
		{"dthrottle_relay_own_pending_tags", "", gauge, 2},
	} {
		if got := value(t, fams, s); got != s.value {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, got, s.value)
		}
	}
}
