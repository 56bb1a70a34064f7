package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// adminAddr returns the admin endpoint's address once /healthz answers
// there.
func (d *daemon) adminAddr(t *testing.T) string {
	t.Helper()
	if d.admin == "" {
		t.Fatal("the daemon's config has no admin endpoint on port 0 for the test to pick")
	}
	d.adminUp.Do(func() {
		c := &http.Client{Timeout: time.Second}
		poll(t, 10*time.Second, "the admin endpoint to answer on "+d.admin, func() bool {
			res, err := c.Get("http://" + d.admin + "/healthz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	})
	return d.admin
}

// httpDo sends one request to the admin endpoint and returns status and body.
func httpDo(t *testing.T, method, url string) (int, string) {
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

// scrape fetches /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpDo(t, http.MethodGet, "http://"+addr+"/metrics")
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

// metric returns the value of the series of family name whose labels
// include every name=value in labels.
func metric(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
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

// TestAdminEndpoint drives known traffic through the real daemon and reads
// it back from /metrics, /healthz and /v1/...
func TestAdminEndpoint(t *testing.T) {
	d := startDaemon(t, `
[listen]
unix = "%SOCK%"
[limit]
rate = 0.001
burst = 3
[[policy]]
name = "login"
prefix = "login:"
rate = 0.001
burst = 1
[[policy]]
name = "banned"
prefix = "bad:"
action = "deny"
[admin]
http = "127.0.0.1:0"
`)
	addr := d.adminAddr(t)
	if got := nc(t, "a\na\na\na\nlogin:x\nlogin:x\nbad:1\n\n", "-U", d.sock); got != "OK\nOK\nOK\nNO\nOK\nNO\nNO\nOK\n" {
		t.Fatalf("traffic: %q", got)
	}
	d.cmd.Process.Signal(syscall.SIGHUP) // a reload to count
	poll(t, 10*time.Second, "the reload to be counted", func() bool {
		return metric(t, scrape(t, addr), "dthrottle_config_reloads_total") == 1
	})

	fams := scrape(t, addr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dthrottle_queries_total", []string{"result=ok"}, 4},
		{"dthrottle_queries_total", []string{"result=no"}, 3},
		{"dthrottle_policy_queries_total", []string{"policy=default", "result=ok"}, 3},
		{"dthrottle_policy_queries_total", []string{"policy=default", "result=no"}, 1},
		{"dthrottle_policy_queries_total", []string{"policy=login", "result=no"}, 1},
		{"dthrottle_policy_queries_total", []string{"policy=banned", "result=no"}, 1},
		{"dthrottle_requests_total", nil, 8},
		{"dthrottle_tags", nil, 2},
		{"dthrottle_connections_accepted_total", nil, 2}, // the harness's readiness probe and nc
		{"dthrottle_config_reloads_total", nil, 1},
		{"dthrottle_config_reload_failures_total", nil, 0},
	} {
		if got := metric(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := fams["dthrottle_gossip_peers"]; ok {
		t.Error("gossip metrics served with gossip off")
	}

	code, body := httpDo(t, http.MethodGet, "http://"+addr+"/healthz")
	var health struct{ Status string }
	if code != 200 || json.Unmarshal([]byte(body), &health) != nil || health.Status != "ok" {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	var tag struct {
		Tracked bool
		Policy  string
		Tokens  float64
		Burst   int
	}
	code, body = httpDo(t, http.MethodGet, "http://"+addr+"/v1/tags/a")
	if code != 200 || json.Unmarshal([]byte(body), &tag) != nil || !tag.Tracked || tag.Tokens > 0.01 || tag.Policy != "default" {
		t.Fatalf("/v1/tags/a: %d %s", code, body)
	}
	code, body = httpDo(t, http.MethodGet, "http://"+addr+"/v1/tags/login:new")
	if code != 200 || json.Unmarshal([]byte(body), &tag) != nil || tag.Tracked || tag.Tokens != 1 || tag.Policy != "login" {
		t.Fatalf("/v1/tags/login:new: %d %s", code, body)
	}
	// Forgetting a spent tag gives it a full bucket again.
	code, body = httpDo(t, http.MethodDelete, "http://"+addr+"/v1/tags/a")
	if code != 200 || !strings.Contains(body, `"forgotten":true`) {
		t.Fatalf("DELETE /v1/tags/a: %d %s", code, body)
	}
	if got := nc(t, "a\n", "-U", d.sock); got != "OK\n" {
		t.Fatalf("a after DELETE: %q", got)
	}
	code, body = httpDo(t, http.MethodGet, "http://"+addr+"/v1/peers")
	if code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("/v1/peers with gossip off: %d %s", code, body)
	}
}
