package haproxy

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// HAProxy through SPOE (contrib/haproxy/haproxy-spoe.cfg and
// spoe-dthrottle.conf), run from Debian's package against a real
// dthrottled's SPOE agent with a burst of 3.

const spoeDaemonConfig = `[listen]
unix = "%%SOCK%%"
[limit]
rate = 0.001
burst = 3
[spoe]
listen = "%s"
`

// startHAProxySPOE runs HAProxy with the shipped SPOE files re-pointed at
// the agent on addr, the tag taken from X-Tag when a request has one. It
// returns the site's URL and HAProxy's log.
func startHAProxySPOE(t *testing.T, addr string) (string, string) {
	t.Helper()
	haproxy := harness.RequireSbin(t, "haproxy")
	dir, _ := harness.ProxySite(t)
	port := harness.FreePort(t)
	spoeConf := filepath.Join(dir, "spoe-dthrottle.conf")
	harness.Must(t, os.WriteFile(spoeConf, []byte(harness.ContribConfig(t, "haproxy/spoe-dthrottle.conf",
		"args tag=src", "args tag=var(txn.tag)",
		// 20 ms is the production figure; a test machine under load may
		// take longer, and a request not answered in time is served. With
		// dthrottled stopped, the first request waits this long, until
		// the health check (every 100 ms here) marks the agent down.
		"timeout processing 20ms", "timeout processing 300ms")), 0o644))
	cfg := harness.ContribConfig(t, "haproxy/haproxy-spoe.cfg",
		"/etc/haproxy/spoe-dthrottle.conf", spoeConf,
		"bind :8080", fmt.Sprintf("bind 127.0.0.1:%d", port),
		"server dthrottled 127.0.0.1:7074 check inter 1s", "server dthrottled "+addr+" check inter 100ms",
		"    http-request send-spoe-group", "    http-request set-var(txn.tag) src\n    http-request set-var(txn.tag) req.hdr(x-tag) if { req.hdr(x-tag) -m found }\n    http-request send-spoe-group")
	conf := filepath.Join(dir, "haproxy.cfg")
	harness.Must(t, os.WriteFile(conf, []byte(cfg), 0o644))
	log := filepath.Join(dir, "haproxy.log")
	harness.RunProxy(t, exec.Command(haproxy, "-db", "-f", conf), port, log)
	return fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), log
}

func TestHAProxySPOE(t *testing.T) {
	d, addr := harness.StartHTTPDaemon(t, fmt.Sprintf(spoeDaemonConfig, "127.0.0.1:0"))
	url, log := startHAProxySPOE(t, addr)
	// The 429 says exactly what dthrottled computed.
	hc := &http.Client{Timeout: 5 * time.Second}
	for i := range 4 {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		harness.Must(t, err)
		req.Header.Set("X-Tag", "exact")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		want := map[bool]int{true: 200, false: 429}[i < 3]
		if res.StatusCode != want {
			b, _ := os.ReadFile(log)
			t.Fatalf("request %d: %s, want %d\n%s", i+1, res.Status, want, b)
		}
		if i == 3 {
			for h, v := range map[string]string{"Retry-After": "1000", "RateLimit": `"default";r=0;t=3000`, "RateLimit-Policy": `"default";q=3;w=3000`} {
				if got := res.Header.Get(h); got != v {
					t.Errorf("the 429's %s: %q, want %q", h, got, v)
				}
			}
		}
	}
	harness.CheckConcurrent(t, url, log)
	harness.CheckThrottled(t, url, d, log) // the client's address as the tag, unspent until now
	// Started again on the same address, dthrottled is found again.
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	sock := filepath.Join(filepath.Dir(path), "d.sock")
	harness.Must(t, os.WriteFile(path, []byte(strings.ReplaceAll(fmt.Sprintf(spoeDaemonConfig, addr), "%SOCK%", sock)), 0o644))
	harness.RunDaemon(t, sock, nil, "-config", path)
	testkit.WaitFor(t, 10*time.Second, "HAProxy to refuse again after dthrottled restarted", func() bool {
		code, err := harness.GetTagged(t, hc, url, "again")
		if err != nil {
			b, _ := os.ReadFile(log)
			t.Fatalf("GET %s: %v\n%s", url, err, b)
		}
		return code == http.StatusTooManyRequests
	})
}
