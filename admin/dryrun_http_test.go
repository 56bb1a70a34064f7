package admin

import (
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/httpapi"
	"github.com/dthrottle/dthrottle/serve"
	dto "github.com/prometheus/client_model/go"
)

func TestMetricsDryRunAndHTTP(t *testing.T) {
	f := newFake()
	f.snap.Policies = []bucket.PolicyStats{
		{Policy: bucket.Policy{Name: "default"}, OK: 60, NO: 8},
		{Policy: bucket.Policy{Name: "try", DryRun: true}, OK: 30, DryRunRefused: 12},
	}
	f.snap.HTTP = &httpapi.Stats{Allowed: 40, Refused: 5, Bad: 3, Stats: serve.Stats{Active: 2, Accepted: 9, Rejected: 1}}
	fams := scrape(t, handler(t, f.sources()))
	const counter, gauge = dto.MetricType_COUNTER, dto.MetricType_GAUGE
	for _, s := range []sample{
		{"dthrottle_policy_dry_run_refused_total", "policy=default", counter, 0},
		{"dthrottle_policy_dry_run_refused_total", "policy=try", counter, 12},
		{"dthrottle_policy_queries_total", "policy=try,result=ok", counter, 30},
		{"dthrottle_http_requests_total", "result=allowed", counter, 40},
		{"dthrottle_http_requests_total", "result=refused", counter, 5},
		{"dthrottle_http_requests_total", "result=bad", counter, 3},
		{"dthrottle_http_connections", "", gauge, 2},
		{"dthrottle_http_connections_rejected_total", "", counter, 1},
	} {
		if got := value(t, fams, s); got != s.value {
			t.Errorf("%s{%s} = %v, want %v", s.name, s.labels, got, s.value)
		}
	}
	f.snap.HTTP = nil
	for name := range scrape(t, handler(t, f.sources())) {
		if strings.HasPrefix(name, "dthrottle_http_") {
			t.Errorf("%s served with the HTTP endpoint off", name)
		}
	}
}
