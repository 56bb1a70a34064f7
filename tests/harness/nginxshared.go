package harness

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SharedDaemonConfig is proxyDaemonConfig's limit, with the admin endpoint
// for the counters and %s for more of [listen].
const SharedDaemonConfig = `[listen]
unix = "%%SOCK%%"
unix_mode = "0666"
%s
[limit]
rate = 0.001
burst = 3
[admin]
http = "127.0.0.1:0"
`

// BuildLibdthrottle builds libdthrottle's libdthrottle.so once for every
// test package, in a copy so that the tree stays clean, and returns its
// path.
func BuildLibdthrottle(t *testing.T) string {
	t.Helper()
	RequireTool(t, "cc")
	RequireTool(t, "make")
	dir := Build(t, "libdthrottle-shared", func(dir string) error {
		if err := CopyLibdthrottleTo(dir); err != nil {
			return err
		}
		return RunMakeIn(dir, "libdthrottle.so")
	})
	return filepath.Join(dir, "libdthrottle.so")
}

// RequireNginxLua returns nginx's path, or skips (fails under CI=true)
// without it or its Lua module.
func RequireNginxLua(t *testing.T) string {
	t.Helper()
	nginx := RequireSbin(t, "nginx")
	for _, m := range nginxLuaModules {
		if _, err := os.Stat(m); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s (libnginx-mod-http-lua) is required under CI=true: %v", m, err)
			}
			t.Skipf("libnginx-mod-http-lua not installed: %v", err)
		}
	}
	return nginx
}

// sharedTagChunk replaces the shipped access phase: ?stats=1 shows the
// worker's counters (and those added up in dthrottle_stats, when the
// dict is there); otherwise the tag is the X-Tag
// header when a request has one, else the query's tag argument
// (percent-decoded, so that it may hold any byte), both through access();
// else the variable the query's var argument names, or the client's
// address as shipped, through access_var().
const sharedTagChunk = `local dt = require("dthrottle_shared")
            if ngx.var.arg_stats then
                local s, d = dt.stats(), ngx.shared.dthrottle_stats
                ngx.say("ok=", s.ok, " no=", s.no, " asked=", s.asked, " bad=", s.bad, " shared=", tostring(s.shared),
                    " dict_ok=", d and d:get("ok") or "-", " dict_no=", d and d:get("no") or "-")
                return ngx.exit(200)
            end
            local tag = ngx.var.http_x_tag or (ngx.var.arg_tag and ngx.unescape_uri(ngx.var.arg_tag))
            if tag then
                dt.access(tag)
            else
                dt.access_var(ngx.var.arg_var or "remote_addr")
            end`

// StartNginxShared runs nginx with contrib/nginx/dthrottle-shared.conf
// re-pointed at sock and lib, with the replacements in more, and the tag
// as sharedTagChunk takes it. It returns the site's URL and nginx's error
// log.
func StartNginxShared(t *testing.T, sock, lib string, more ...string) (string, string) {
	t.Helper()
	nginx := RequireNginxLua(t)
	// nginx's workers run as another user (nobody) when the test is root.
	for p := filepath.Dir(sock); p != filepath.Dir(p) && strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
		Must(t, os.Chmod(p, 0o755))
	}
	dir, www := ProxySite(t)
	// A directory's index is an internal redirect, which runs the access
	// phase again: it must not spend a second token.
	Must(t, os.WriteFile(filepath.Join(www, "index.html"), []byte("index\n"), 0o644))
	port := FreePort(t)
	contrib, err := Path("contrib/nginx"), error(nil)
	Must(t, err)
	replace := append([]string{
		"listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"root /var/www/html;", "root " + www + ";",
		"/etc/nginx/dthrottle/", contrib + "/",
		"/usr/local/lib/libdthrottle.so", lib,
		"/run/dthrottle/dthrottle.sock", sock,
		"rate = 1,", "rate = 0.001,",
		"burst = 10,", "burst = 3,",
		// A long timeout: on a loaded machine a slow answer must not turn
		// into a fail-open one. An absent daemon still fails at once.
		"-- timeout = 50,", "timeout = 2000,",
		`require("dthrottle_shared").access_var("remote_addr")`, sharedTagChunk,
	}, more...)
	site := ContribConfig(t, "nginx/dthrottle-shared.conf", replace...)
	Must(t, os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o644))
	var load strings.Builder
	for _, m := range nginxLuaModules {
		fmt.Fprintf(&load, "load_module %s;\n", m)
	}
	WriteNginxConf(t, dir, load.String(), "notice", "")
	RunProxy(t, exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;"), port, filepath.Join(dir, "stderr.log"))
	u, log := fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), filepath.Join(dir, "error.log")
	// The port accepts once the master listens; a request answered means
	// the worker has run init_worker, and so attached.
	if res := SharedGet(t, u+"?tag=", "", log); res.StatusCode != http.StatusOK {
		t.Fatalf("an empty tag: %s, want 200", res.Status)
	}
	return u, log
}

// SharedGet fetches u with X-Tag: tag (none when empty) and returns the
// response, its body read.
func SharedGet(t *testing.T, u, tag, log string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	Must(t, err)
	if tag != "" {
		req.Header.Set("X-Tag", tag)
	}
	res, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		b, _ := os.ReadFile(log)
		t.Fatalf("GET %s (tag %q): %v\n%s", u, tag, err, b)
	}
	res.Body.Close()
	return res
}

// WorkerStats returns what ?stats=1 shows.
func WorkerStats(t *testing.T, u, log string) string {
	t.Helper()
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get(u + "?stats=1")
	if err != nil {
		b, _ := os.ReadFile(log)
		t.Fatalf("GET %s?stats=1: %v\n%s", u, err, b)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	Must(t, err)
	return strings.TrimSpace(string(b))
}

// SharedCounts returns what d was asked over its socket and what it
// decided in all, in process included.
func SharedCounts(t *testing.T, d *Daemon) (socket, decided float64) {
	t.Helper()
	fams := Scrape(t, d.Admin)
	return Metric(t, fams, "dthrottle_requests_total"),
		Metric(t, fams, "dthrottle_queries_total", "result=ok") + Metric(t, fams, "dthrottle_queries_total", "result=no")
}
