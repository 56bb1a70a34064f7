package harness

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// luaHeader is the Lua 5.3 header the module is built against (Debian:
// liblua5.3-dev), where contrib/haproxy/Makefile looks by default.
const luaHeader = "/usr/include/lua5.3/lua.h"

// RequireHAProxyShared returns HAProxy's path, or skips (fails under
// CI=true) without HAProxy, a C compiler, make or the Lua headers.
func RequireHAProxyShared(t *testing.T) string {
	t.Helper()
	haproxy := RequireSbin(t, "haproxy")
	RequireTool(t, "cc")
	RequireTool(t, "make")
	if _, err := os.Stat(luaHeader); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (liblua5.3-dev) is required under CI=true: %v", luaHeader, err)
		}
		t.Skipf("liblua5.3-dev not installed: %v", err)
	}
	return haproxy
}

// CopyHAProxySharedTo copies the module's sources into dst/contrib/haproxy
// and libdthrottle's into dst/libdthrottle, where the Makefile finds them
// (../../libdthrottle), and returns dst/contrib/haproxy.
func CopyHAProxySharedTo(dst string) (string, error) {
	dir := filepath.Join(dst, "contrib", "haproxy")
	if err := copySources(Path("contrib/haproxy"), dir, "Makefile", ".c", ".h"); err != nil {
		return "", err
	}
	return dir, CopyLibdthrottleTo(filepath.Join(dst, "libdthrottle"))
}

// BuildHAProxyShared builds dthrottle_shared.so once for every test
// package, in a copy so that the tree stays clean, and returns the
// directory that holds it.
func BuildHAProxyShared(t *testing.T) string {
	t.Helper()
	RequireHAProxyShared(t)
	return filepath.Join(Build(t, "haproxy-shared", func(dir string) error {
		dir, err := CopyHAProxySharedTo(dir)
		if err != nil {
			return err
		}
		return RunMakeIn(dir, "dthrottle_shared.so")
	}), "contrib", "haproxy")
}

// hsDecideLine is the shipped decision, which the tests replace with
// hsTagLines.
const hsDecideLine = "    http-request lua.dthrottle_resolve unless { src,lua.dthrottle_decide -m bool }"

// hsTagLines: /dthrottle-stats shows the process's counters; the tag is
// the X-Tag header percent-decoded (so that it may hold any byte) when a
// request has one, else the client's address, as shipped.
const hsTagLines = `    http-request return status 200 content-type text/plain lf-string "%[lua.dthrottle_stats]" if { path /dthrottle-stats }
    http-request lua.dthrottle_resolve if { req.fhdr(x-tag) -m found } !{ req.fhdr(x-tag),url_dec,lua.dthrottle_decide -m bool }
    http-request lua.dthrottle_resolve if !{ req.fhdr(x-tag) -m found } !{ src,lua.dthrottle_decide -m bool }`

// hsProxy is a HAProxy started by a test in master-worker mode (-W).
type hsProxy struct {
	Cmd  *exec.Cmd // the master
	URL  string    // the site's /hello.txt
	Log  string    // HAProxy's output (master, workers, and the Lua logs)
	conf string
	port int
}

// StartHAProxyShared runs HAProxy, four threads, with
// contrib/haproxy/haproxy-shared.cfg re-pointed at sock and the module
// built in moduleDir, the replacements in more made, and the tag as
// hsTagLines takes it; it waits until HAProxy decides in process (or, with
// a daemon that shares nothing, until it attached).
func StartHAProxyShared(t *testing.T, sock, moduleDir string, more ...string) *hsProxy {
	t.Helper()
	dir, _ := ProxySite(t)
	port := FreePort(t)
	lua, err := Path("contrib/haproxy/dthrottle_shared.lua"), error(nil)
	Must(t, err)
	replace := append([]string{
		"global\n", "global\n    nbthread 4\n",
		"presetenv DTHROTTLE_SOCKET /run/dthrottle/dthrottle.sock", "presetenv DTHROTTLE_SOCKET " + sock,
		// A long timeout: on a loaded machine a slow answer must not turn
		// into a fail-open one. An absent daemon still fails at once.
		"presetenv DTHROTTLE_TIMEOUT_MS 20", "presetenv DTHROTTLE_TIMEOUT_MS 2000",
		"presetenv DTHROTTLE_RATE 1", "presetenv DTHROTTLE_RATE 0.001",
		"presetenv DTHROTTLE_BURST 10", "presetenv DTHROTTLE_BURST 3",
		"lua-prepend-path /usr/local/lib/lua/5.3/?.so cpath", "lua-prepend-path " + moduleDir + "/?.so cpath",
		"lua-load-per-thread /etc/haproxy/dthrottle_shared.lua", "lua-load-per-thread " + lua,
		"bind :8080", fmt.Sprintf("bind 127.0.0.1:%d", port),
		hsDecideLine, hsTagLines,
	}, more...)
	p := &hsProxy{conf: filepath.Join(dir, "haproxy.cfg"), Log: filepath.Join(dir, "haproxy.log"), port: port}
	Must(t, os.WriteFile(p.conf, []byte(ContribConfig(t, "haproxy/haproxy-shared.cfg", replace...)), 0o644))
	p.URL = fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port)
	p.Start(t)
	return p
}

// Start runs (or runs again) p's HAProxy and waits until it attached.
func (p *hsProxy) Start(t *testing.T) {
	t.Helper()
	p.Cmd = exec.Command(RequireSbin(t, "haproxy"), "-W", "-db", "-f", p.conf)
	RunProxy(t, p.Cmd, p.port, p.Log)
	p.AwaitAttached(t, 0)
}

// AwaitAttached waits until the process serving p has attached more than
// attaches times since it started (a new worker: 0).
func (p *hsProxy) AwaitAttached(t *testing.T, attaches int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "HAProxy to attach", func() bool {
		return p.StatsField(t, "attaches") > attaches
	})
}

// Stats returns what /dthrottle-stats shows: the counters of the worker
// that answered.
func (p *hsProxy) Stats(t *testing.T) string {
	t.Helper()
	code, body := HTTPDo(t, http.MethodGet, strings.TrimSuffix(p.URL, "hello.txt")+"dthrottle-stats")
	if code != http.StatusOK {
		t.Fatalf("/dthrottle-stats: %d %s\n%s", code, body, p.Output())
	}
	return strings.TrimSpace(body)
}

// StatsField returns the value of the counter name in stats.
func (p *hsProxy) StatsField(t *testing.T, name string) int {
	t.Helper()
	for _, f := range strings.Fields(p.Stats(t)) {
		if k, v, _ := strings.Cut(f, "="); k == name {
			n, err := strconv.Atoi(v)
			Must(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /dthrottle-stats: %s", name, p.Stats(t))
	return 0
}

// Output returns what HAProxy has logged.
func (p *hsProxy) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// workers returns the pids of the master's children, its workers.
func (p *hsProxy) workers(t *testing.T) []int { return childPIDs(t, p.Cmd.Process.Pid) }

// Worker returns the pid of the master's one worker, waiting for the
// others (a reload's former worker) to leave.
func (p *hsProxy) Worker(t *testing.T) int {
	t.Helper()
	var pids []int
	testkit.WaitFor(t, 10*time.Second, "HAProxy to run one worker", func() bool {
		pids = p.workers(t)
		return len(pids) == 1
	})
	return pids[0]
}

// hsEscape percent-encodes every byte of tag but letters, digits and
// '-', for the X-Tag header, which HAProxy decodes (url_dec).
func hsEscape(tag string) string {
	var b strings.Builder
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// hsClient sends every request on a new connection, so that none waits
// on a worker that a reload retired.
var hsClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// HSGet fetches u, with X-Tag: the escaped tag when header is set, and
// returns the response, its body read.
func HSGet(u, tag string, header bool) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if header {
		req.Header.Set("X-Tag", hsEscape(tag))
	}
	res, err := hsClient.Do(req)
	if err != nil {
		return nil, err
	}
	res.Body.Close()
	return res, nil
}

// Statuses sends n requests for tag and returns their statuses.
func (p *hsProxy) Statuses(t *testing.T, tag string, n int) string {
	t.Helper()
	var got []string
	for range n {
		res, err := HSGet(p.URL, tag, true)
		if err != nil {
			t.Fatalf("GET %s (tag %q): %v\n%s", p.URL, tag, err, p.Output())
		}
		got = append(got, strconv.Itoa(res.StatusCode))
	}
	return strings.Join(got, " ")
}

// SignalWorker sends sig to p's worker.
func (p *hsProxy) SignalWorker(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	pid := p.Worker(t)
	Must(t, syscall.Kill(pid, sig))
	return pid
}

// SharedDecided returns what d decided in all, in process included.
func SharedDecided(t *testing.T, d *Daemon) float64 {
	t.Helper()
	_, decided := SharedCounts(t, d)
	return decided
}
