package daemon

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestAdminEndpoint drives known traffic through the real daemon and reads
// it back from /metrics, /healthz and /v1/...
func TestAdminEndpoint(t *testing.T) {
	d := harness.StartDaemon(t, `
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
	addr := d.AdminAddr(t)
	if got := harness.NC(t, "a\na\na\na\nlogin:x\nlogin:x\nbad:1\n\n", "-U", d.Sock); got != "OK\nOK\nOK\nNO\nOK\nNO\nNO\nOK\n" {
		t.Fatalf("traffic: %q", got)
	}
	d.Cmd.Process.Signal(syscall.SIGHUP) // a reload to count
	testkit.WaitFor(t, 10*time.Second, "the reload to be counted", func() bool {
		return harness.Metric(t, harness.Scrape(t, addr), "dthrottle_config_reloads_total") == 1
	})

	fams := harness.Scrape(t, addr)
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
		if got := harness.Metric(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := fams["dthrottle_gossip_peers"]; ok {
		t.Error("gossip metrics served with gossip off")
	}

	code, body := harness.HTTPDo(t, http.MethodGet, "http://"+addr+"/healthz")
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
	code, body = harness.HTTPDo(t, http.MethodGet, "http://"+addr+"/v1/tags/a")
	if code != 200 || json.Unmarshal([]byte(body), &tag) != nil || !tag.Tracked || tag.Tokens > 0.01 || tag.Policy != "default" {
		t.Fatalf("/v1/tags/a: %d %s", code, body)
	}
	code, body = harness.HTTPDo(t, http.MethodGet, "http://"+addr+"/v1/tags/login:new")
	if code != 200 || json.Unmarshal([]byte(body), &tag) != nil || tag.Tracked || tag.Tokens != 1 || tag.Policy != "login" {
		t.Fatalf("/v1/tags/login:new: %d %s", code, body)
	}
	// Forgetting a spent tag gives it a full bucket again.
	code, body = harness.HTTPDo(t, http.MethodDelete, "http://"+addr+"/v1/tags/a")
	if code != 200 || !strings.Contains(body, `"forgotten":true`) {
		t.Fatalf("DELETE /v1/tags/a: %d %s", code, body)
	}
	if got := harness.NC(t, "a\n", "-U", d.Sock); got != "OK\n" {
		t.Fatalf("a after DELETE: %q", got)
	}
	code, body = harness.HTTPDo(t, http.MethodGet, "http://"+addr+"/v1/peers")
	if code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("/v1/peers with gossip off: %d %s", code, body)
	}
}
