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

// /metrics serves the collectors given, beside the Go runtime's and the
// process's, and reads no snapshot: every family is its component's.
func TestMetricsValues(t *testing.T) {
	f := newFake()
	src := f.sources()
	src.Collectors = []prometheus.Collector{fakeCollector(42)}
	before := f.snapshots.Load()
	fams := scrape(t, handler(t, src))
	if n := f.snapshots.Load() - before; n != 0 {
		t.Errorf("one scrape took %d snapshots, want none", n)
	}
	mt.Expect(t, fams, mt.Sample{Name: "dthrottle_fake_total", Kind: mt.Counter, Value: 42})
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	for _, prefix := range []string{"dthrottle_gossip_", "dthrottle_warm_", "dthrottle_relay_"} {
		mt.Absent(t, fams, prefix)
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
