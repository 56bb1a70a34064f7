package harness

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// AdminAddr returns the admin endpoint's address once /healthz answers
// there.
func (d *Daemon) AdminAddr(t *testing.T) string {
	t.Helper()
	if d.Admin == "" {
		t.Fatal("the daemon's config has no admin endpoint on port 0 for the test to pick")
	}
	d.adminUp.Do(func() {
		c := &http.Client{Timeout: time.Second}
		testkit.WaitFor(t, 10*time.Second, "the admin endpoint to answer on "+d.Admin, func() bool {
			res, err := c.Get("http://" + d.Admin + "/healthz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	})
	return d.Admin
}

// HTTPDo sends one request to the admin endpoint and returns status and body.
func HTTPDo(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// Scrape fetches /metrics and parses it with the Prometheus text parser.
func Scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := HTTPDo(t, http.MethodGet, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// Metric returns the value of the series of family name whose labels
// include every name=value in labels.
func Metric(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("metric family %s missing", name)
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	t.Fatalf("%s%v: no such series", name, labels)
	return 0
}
