package tests

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The fast paths: nginx's Lua module sharing one pipelined connection per
// worker (contrib/nginx/dthrottle-pipeline.conf), and HAProxy's Lua action
// keeping its connections per thread (contrib/haproxy/haproxy-pool.cfg),
// both over the line protocol, run from Debian's packages against a real
// dthrottled with a burst of 3.

// startNginxPipeline runs nginx with contrib/nginx/dthrottle-pipeline.conf
// re-pointed at sock, the tag taken from X-Tag when a request has one. It
// returns the site's URL and nginx's error log.
func startNginxPipeline(t *testing.T, sock string) (string, string) {
	t.Helper()
	nginx := requireSbin(t, "nginx")
	lua := "/usr/lib/nginx/modules/ngx_http_lua_module.so"
	if _, err := os.Stat(lua); err != nil && os.Getenv("CI") != "true" {
		t.Skipf("libnginx-mod-http-lua not installed: %v", err)
	}
	dir, www := proxySite(t)
	port := freePort(t)
	contrib, err := filepath.Abs("../contrib/nginx")
	must(t, err)
	site := contribConfig(t, "nginx/dthrottle-pipeline.conf",
		"listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"root /var/www/html;", "root "+www+";",
		"/etc/nginx/dthrottle/", contrib+"/",
		"unix:/run/dthrottle/dthrottle.sock", "unix:"+sock,
		"rate = 1,", "rate = 0.001,",
		"burst = 10,", "burst = 3,",
		// A long timeout: on a loaded machine a slow answer must not turn
		// into a fail-open one. An absent daemon still fails at once.
		"-- timeout = 20,", "timeout = 2000,",
		"access(ngx.var.remote_addr)", "access(ngx.var.http_x_tag or ngx.var.remote_addr)")
	must(t, os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o644))
	writeNginxConf(t, dir, "load_module /usr/lib/nginx/modules/ndk_http_module.so;\nload_module "+lua+";\n", "notice", "")
	runProxy(t, exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;"), port, filepath.Join(dir, "stderr.log"))
	return fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), filepath.Join(dir, "error.log")
}

// startHAProxyPool runs HAProxy with contrib/haproxy/haproxy-pool.cfg
// re-pointed at sock, the tag taken from X-Tag when a request has one. It
// returns the site's URL and HAProxy's log.
func startHAProxyPool(t *testing.T, sock, timeoutMS string) (string, string) {
	t.Helper()
	haproxy := requireSbin(t, "haproxy")
	dir, _ := proxySite(t)
	port := freePort(t)
	lua := filepath.Join(dir, "dthrottle_pool.lua")
	must(t, os.WriteFile(lua, []byte(contribConfig(t, "haproxy/dthrottle_pool.lua")), 0o644))
	cfg := contribConfig(t, "haproxy/haproxy-pool.cfg",
		"setenv DTHROTTLE_SOCKET /run/dthrottle/dthrottle.sock", "setenv DTHROTTLE_SOCKET "+sock,
		"setenv DTHROTTLE_RATE 1", "setenv DTHROTTLE_RATE 0.001",
		"setenv DTHROTTLE_BURST 10", "setenv DTHROTTLE_BURST 3",
		"setenv DTHROTTLE_TIMEOUT_MS 20", "setenv DTHROTTLE_TIMEOUT_MS "+timeoutMS,
		"lua-load-per-thread /etc/haproxy/dthrottle_pool.lua", "lua-load-per-thread "+lua,
		"bind :8080", fmt.Sprintf("bind 127.0.0.1:%d", port),
		"    http-request lua.dthrottle", "    http-request set-var(txn.dthrottle_tag) req.hdr(x-tag) if { req.hdr(x-tag) -m found }\n    http-request lua.dthrottle")
	conf := filepath.Join(dir, "haproxy.cfg")
	must(t, os.WriteFile(conf, []byte(cfg), 0o644))
	log := filepath.Join(dir, "haproxy.log")
	runProxy(t, exec.Command(haproxy, "-db", "-f", conf), port, log)
	return fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), log
}

// checkResumes starts a dthrottled again on sock, stopped before, and
// waits until the proxy, not restarted, throttles again: the new daemon's
// fresh bucket refuses the fourth request it is asked.
func checkResumes(t *testing.T, url, sock, log string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	must(t, os.WriteFile(path, []byte(strings.ReplaceAll(fmt.Sprintf(proxyDaemonConfig, 403), "%SOCK%", sock)), 0o644))
	runDaemon(t, sock, nil, "-config", path)
	hc := &http.Client{Timeout: 5 * time.Second}
	poll(t, 10*time.Second, "the proxy to refuse again after dthrottled restarted", func() bool {
		code, err := getTagged(t, hc, url, "again")
		if err != nil {
			b, _ := os.ReadFile(log)
			t.Fatalf("GET %s: %v\n%s", url, err, b)
		}
		return code == http.StatusTooManyRequests
	})
}

func TestNginxPipeline(t *testing.T) {
	d := startDaemon(t, fmt.Sprintf(proxyDaemonConfig, 403))
	// nginx's workers run as another user (nobody) when the test is root.
	must(t, os.Chmod(filepath.Dir(d.sock), 0o755))
	must(t, os.Chmod(filepath.Dir(filepath.Dir(d.sock)), 0o755))
	url, log := startNginxPipeline(t, d.sock)
	checkConcurrent(t, url, log)
	checkThrottled(t, url, d, log)
	checkResumes(t, url, d.sock, log)
	b, err := os.ReadFile(log)
	must(t, err)
	for _, want := range []string{"daemon unreachable, failing open", "daemon answering again"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("nginx's error log does not say %q:\n%s", want, b)
		}
	}
}

func TestHAProxyPool(t *testing.T) {
	d := startDaemon(t, fmt.Sprintf(proxyDaemonConfig, 403))
	url, log := startHAProxyPool(t, d.sock, "2000")
	checkConcurrent(t, url, log)
	checkThrottled(t, url, d, log)
	checkResumes(t, url, d.sock, log)
}

// TestHAProxyPoolIdle: a connection that sat in the pool past its
// timeout is never used, so no query is sent twice: spaced wider than the
// timeout, a tag's requests spend one token each, and exactly the burst
// is served.
func TestHAProxyPoolIdle(t *testing.T) {
	d := startDaemon(t, fmt.Sprintf(proxyDaemonConfig, 403))
	url, log := startHAProxyPool(t, d.sock, "100")
	hc := &http.Client{Timeout: 5 * time.Second}
	served := 0
	for range 5 {
		code, err := getTagged(t, hc, url, "idle")
		if err != nil {
			b, _ := os.ReadFile(log)
			t.Fatalf("%v\n%s", err, b)
		}
		if code == http.StatusOK {
			served++
		}
		time.Sleep(150 * time.Millisecond)
	}
	if served != 3 {
		b, _ := os.ReadFile(log)
		t.Errorf("served %d of 5 requests spaced past the timeout, want the burst, 3\n%s", served, b)
	}
}
