package nginx

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// nginx's native module: contrib/nginx/module built against nginx-dev's
// sources and loaded into Debian's nginx with the shipped
// contrib/nginx/dthrottle-module.conf, against a real dthrottled with a
// burst of 3 (sharedDaemonConfig). Each worker maps the table the daemon
// shares and decides in its preaccess phase; what the table does not
// decide it asks over the socket without blocking. The daemon's counters
// tell what it was asked over its socket (dthrottle_requests_total) from
// what was decided (dthrottle_queries_total, decisions made in process
// included); dthrottle_stats, what the worker did; X-DThrottle
// ($dthrottle_status), what decided each request.

func TestNginxModule(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	s := harness.StartNginxModule(t, d.Sock)

	harness.CheckDecidedInProcess(t, s.URL, d, s.Log, "first")
	// The worker's own counts: of the 50, 5 asked (the first of each
	// tag), 10 served and 35 refused in process.
	if got, want := s.Stats(t), "ok=10 no=35 asked=5 asked_no=0 failed=0 bad=0 attaches=1 asking=0 shared=true"; got != want {
		t.Errorf("the worker's counters: %q, want %q", got, want)
	}
	// What decided each request: the daemon, asked about a new tag, then
	// the table.
	if codes, how := harness.NgxStatuses(t, s, "paths", 4); codes != "200 200 200 429" || how != "ASKED_OK OK OK NO" {
		t.Errorf("a new tag four times: %s, decided %s; want 200 200 200 429, decided ASKED_OK OK OK NO", codes, how)
	}

	// A directory: burst 3 then 429, one token per request, though nginx
	// redirects each internally to its index.
	var dir []int
	for range 4 {
		dir = append(dir, harness.SharedGet(t, strings.TrimSuffix(s.URL, "hello.txt"), "dir", s.Log).StatusCode)
	}
	if fmt.Sprint(dir) != "[200 200 200 429]" {
		t.Errorf("GET / four times: %v, want [200 200 200 429]", dir)
	}

	// The client's address as the tag, as shipped; with dthrottled
	// stopped, served at once (fail open).
	failed0 := s.StatsField(t, "failed")
	harness.CheckThrottled(t, s.URL, d, s.Log)
	if got := s.StatsField(t, "failed") - failed0; got != 20 {
		t.Errorf("with dthrottled stopped, %d requests answered by the fail mode, want 20", got)
	}

	// dthrottled again on the same socket: the worker, not restarted,
	// asks it, attaches again and decides in process.
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	config, admin := harness.PinPort(t, strings.ReplaceAll(fmt.Sprintf(harness.SharedDaemonConfig, ""), "%SOCK%", d.Sock), "http")
	harness.Must(t, os.WriteFile(path, []byte(config), 0o644))
	d2 := harness.RunDaemon(t, d.Sock, nil, "-config", path)
	d2.Admin = admin
	testkit.WaitFor(t, 10*time.Second, "nginx to refuse again after dthrottled restarted", func() bool {
		return harness.SharedGet(t, s.URL, "again", s.Log).StatusCode == http.StatusTooManyRequests
	})
	harness.CheckDecidedInProcess(t, s.URL, d2, s.Log, "second")
	if got := s.StatsField(t, "attaches"); got != 2 {
		t.Errorf("attaches %d, want 2 (one at the start, one after the restart)", got)
	}

	log := s.Output()
	for _, want := range []string{"detached, failing open", "cannot ask dthrottled", "attached again"} {
		if !strings.Contains(log, want) {
			t.Errorf("nginx's error log does not say %q:\n%s", want, log)
		}
	}
}

// TestNginxModuleTags: bad and empty tags; tags the table keys by a
// digest (always asked); named, deny and dry-run policies, whose
// refusals state the bucket.
func TestNginxModuleTags(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "")+`
[[policy]]
name = "api"
prefix = "api:"
rate = 0.5
burst = 2

[[policy]]
name = "blocked"
prefix = "blocked:"
action = "deny"

[[policy]]
name = "try"
prefix = "try:"
rate = 0.001
burst = 1
dry_run = true
`)
	s := harness.StartNginxModule(t, d.Sock)

	// Bad tags, refused by default though the module fails open, and the
	// empty tag, served: none reaches the daemon.
	harness.CheckNgxBadTags(t, s, d, http.StatusTooManyRequests)

	// Longer than the daemon keeps verbatim (256 bytes), 1024 at most:
	// the table keys it by a digest, so every query is asked.
	long := strings.Repeat("y", 1024)
	socket1, _ := harness.SharedCounts(t, d)
	if codes, how := harness.NgxStatuses(t, s, long, 4); codes != "200 200 200 429" || how != "ASKED_OK ASKED_OK ASKED_OK ASKED_NO" {
		t.Errorf("a 1024-byte tag: %s, decided %s; want 200 200 200 429, all asked", codes, how)
	}
	if socket2, _ := harness.SharedCounts(t, d); socket2-socket1 != 4 {
		t.Errorf("a 1024-byte tag asked %v times over the socket for 4 requests, want 4", socket2-socket1)
	}

	// A named policy, refused in process: its name and its bucket. Burst
	// 2 at 0.5/s: full again in 4 s, a token in 2 s.
	if codes, _ := harness.NgxStatuses(t, s, "api:k", 2); codes != "200 200" {
		t.Fatalf("api:k: %s, want 200 200", codes)
	}
	res, _ := harness.NgxGet(t, s, s.URL, "api:k")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("X-DThrottle") != "NO" {
		t.Fatalf("api:k, request 3: %s, decided %s; want 429, NO", res.Status, res.Header.Get("X-DThrottle"))
	}
	for h, want := range map[string]string{"RateLimit-Policy": `"api";q=2;w=4`, "RateLimit": `"api";r=0;t=4`, "Retry-After": "2"} {
		if got := res.Header.Get(h); got != want {
			t.Errorf("api:k refused: %s %q, want %q", h, got, want)
		}
	}

	// A deny policy refuses in process without asking, and has no bucket:
	// no RateLimit headers, as from the daemon's HTTP endpoint.
	socket3, _ := harness.SharedCounts(t, d)
	res, _ = harness.NgxGet(t, s, s.URL, "blocked:x")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("X-DThrottle") != "NO" {
		t.Fatalf("blocked:x: %s, decided %s; want 429, NO", res.Status, res.Header.Get("X-DThrottle"))
	}
	for _, h := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
		if got := res.Header.Get(h); got != "" {
			t.Errorf("a deny policy's refusal has %s %q", h, got)
		}
	}
	if socket4, _ := harness.SharedCounts(t, d); socket4 != socket3 {
		t.Errorf("a deny policy's tag was asked over the socket")
	}

	// A dry run serves what its limit refuses, and says so.
	if codes, how := harness.NgxStatuses(t, s, "try:k", 3); codes != "200 200 200" || how != "ASKED_OK DRY_RUN DRY_RUN" {
		t.Errorf("a dry run's tag three times: %s, decided %s; want 200s, ASKED_OK DRY_RUN DRY_RUN", codes, how)
	}
}

// TestNginxModuleBadTagAllow: with dthrottle_bad_tag allow, the bad tags
// TestNginxModuleTags sees refused are served, as dthrottle_shared.lua's
// bad_tag = "allow" serves them: still counted bad, logged, and never
// sent. Other tags are throttled as before.
func TestNginxModuleBadTagAllow(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	s := harness.StartNginxModule(t, d.Sock, "# dthrottle_bad_tag allow;", "dthrottle_bad_tag allow;")

	harness.CheckNgxBadTags(t, s, d, http.StatusOK)
	if codes, how := harness.NgxStatuses(t, s, "good", 4); codes != "200 200 200 429" || how != "ASKED_OK OK OK NO" {
		t.Errorf("a good tag four times: %s, decided %s; want 200 200 200 429, decided ASKED_OK OK OK NO", codes, how)
	}
}

// TestNginxModuleSocketOnly: a daemon that shares nothing
// (share_table = false) is asked every query, and its refusals carry
// Retry-After: 1; with dthrottle_fail closed, a stopped daemon refuses,
// at once.
func TestNginxModuleSocketOnly(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "share_table = false"))
	s := harness.StartNginxModule(t, d.Sock, "# dthrottle_fail closed;", "dthrottle_fail closed;")

	socket0, decided0 := harness.SharedCounts(t, d)
	for j := range 4 {
		res, _ := harness.NgxGet(t, s, s.URL, "sock")
		want, how := http.StatusOK, "ASKED_OK"
		if j == 3 {
			want, how = http.StatusTooManyRequests, "ASKED_NO"
		}
		if res.StatusCode != want || res.Header.Get("X-DThrottle") != how {
			t.Fatalf("request %d: %s, decided %s; want %d, %s\n%s", j+1, res.Status, res.Header.Get("X-DThrottle"), want, how, s.Output())
		}
		if j == 3 {
			if got := res.Header.Get("Retry-After"); got != "1" {
				t.Errorf("asked and refused: Retry-After %q, want 1", got)
			}
			if got := res.Header.Get("RateLimit-Policy"); got != "" {
				t.Errorf("asked and refused: RateLimit-Policy %q, want none (the line protocol says nothing of the bucket)", got)
			}
		}
	}
	socket1, decided1 := harness.SharedCounts(t, d)
	if socket1-socket0 != 4 || decided1-decided0 != 4 {
		t.Errorf("4 requests: asked %v over the socket, decided %v; want 4 and 4", socket1-socket0, decided1-decided0)
	}
	if st := s.Stats(t); !strings.Contains(st, "asked=4 asked_no=1") || !strings.HasSuffix(st, "shared=false") {
		t.Errorf("the worker's counters: %q, want asked=4 asked_no=1 and shared=false", st)
	}

	d.Stop(t)
	start := time.Now()
	for i := range 10 {
		res, _ := harness.NgxGet(t, s, s.URL, "sock2")
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("X-DThrottle") != "FAILED_CLOSED" || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("fail closed, dthrottled stopped, request %d: %s, decided %s, Retry-After %q; want 429, FAILED_CLOSED, 1",
				i+1, res.Status, res.Header.Get("X-DThrottle"), res.Header.Get("Retry-After"))
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("with dthrottled stopped, 10 requests took %v: not answered at once", took)
	}
	if log := s.Output(); !strings.Contains(log, "failing closed") {
		t.Errorf("nginx's error log does not say it fails closed:\n%s", log)
	}
}

// TestNginxModuleKilled: the worker is killed (SIGKILL) while it decides
// under load; the master starts another, which attaches and decides in
// process, from the same table: the tags of the load are not asked again.
func TestNginxModuleKilled(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "")+`
[[policy]]
name = "load"
prefix = "load:"
rate = 1e9
burst = 1000000
`)
	s := harness.StartNginxModule(t, d.Sock)
	old := s.Worker(t)

	stop := make(chan struct{})
	load := harness.StartHSLoad(s.URL, 4, func(i, j int) string { return fmt.Sprintf("load:%d", j%16) }, stop)
	testkit.WaitFor(t, 10*time.Second, "nginx to decide under load", func() bool { return load.Ok.Load() >= 200 })
	harness.Must(t, syscall.Kill(old, syscall.SIGKILL))
	var now int
	testkit.WaitFor(t, 10*time.Second, "the master to start another worker", func() bool {
		now = s.Worker(t)
		return now != old
	})
	close(stop)
	load.Wg.Wait()
	t.Logf("under load: %d served, %d refused, %d failed", load.Ok.Load(), load.Refused.Load(), load.Errs.Load())

	// The new worker answers: it attached before it served.
	if got := s.Stats(t); !strings.HasSuffix(got, "attaches=1 asking=0 shared=true") {
		t.Errorf("the new worker's counters: %q, want it attached and deciding in process", got)
	}
	socket0, decided0 := harness.SharedCounts(t, d)
	for i := range 16 {
		if res, _ := harness.NgxGet(t, s, s.URL, fmt.Sprintf("load:%d", i)); res.StatusCode != http.StatusOK || res.Header.Get("X-DThrottle") != "OK" {
			t.Errorf("load:%d from the new worker: %s, decided %s; want 200, OK", i, res.Status, res.Header.Get("X-DThrottle"))
		}
	}
	if socket1, decided1 := harness.SharedCounts(t, d); socket1 != socket0 || decided1-decided0 != 16 {
		t.Errorf("the new worker, the tags of the load: asked %v over the socket, decided %v; want 0 and 16", socket1-socket0, decided1-decided0)
	}
	harness.CheckDecidedInProcess(t, s.URL, d, s.Log, "after-kill")
	if log := s.Output(); !strings.Contains(log, "exited on signal 9") {
		t.Errorf("nginx's error log does not show the worker killed:\n%s", log)
	}
}

// TestNginxModuleHungDaemon: a daemon that stops answering and beating
// (SIGSTOP). An ask waits the timeout (500 ms) at most, then the fail mode
// serves, while the worker goes on serving others; a second later the
// table is left, and requests are served at once but for one ask at a
// time, after a backoff. The daemon going on again, the worker decides in
// process again.
func TestNginxModuleHungDaemon(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	s := harness.StartNginxModule(t, d.Sock, "dthrottle_timeout 2s;", "dthrottle_timeout 500ms;")
	if codes, _ := harness.NgxStatuses(t, s, "hung", 4); codes != "200 200 200 429" {
		t.Fatalf("before: %s, want 200 200 200 429", codes)
	}

	harness.StopDaemon(t, d)
	stopped := time.Now()

	// A new tag is asked, and the daemon does not answer.
	type answer struct {
		code int
		how  string
		took time.Duration
	}
	asked := make(chan answer, 1)
	go func() {
		res, err := harness.HSGet(s.URL, "hung-new", true)
		if err != nil {
			asked <- answer{code: -1, how: err.Error()}
			return
		}
		asked <- answer{res.StatusCode, res.Header.Get("X-DThrottle"), time.Since(stopped)}
	}()
	// Meanwhile the worker serves: its counters, while the ask waits...
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := s.Stats(t)
		if strings.Contains(st, " asking=1 ") {
			break
		}
		select {
		case a := <-asked:
			t.Fatalf("the new tag was answered (%+v) before the worker was seen asking: %s\n%s", a, st, s.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker does not say it asks: %s\n%s", st, s.Output())
		}
	}
	// ...and a spent tag, decided from the table while it is still live
	// (the daemon beat less than a second ago).
	res, took := harness.NgxGet(t, s, s.URL, "hung")
	if since := time.Since(stopped); since < 700*time.Millisecond {
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("X-DThrottle") != "NO" || took > 450*time.Millisecond {
			t.Errorf("a spent tag while an ask waits: %s, decided %s, in %v; want 429 from the table at once", res.Status, res.Header.Get("X-DThrottle"), took)
		}
	} else {
		t.Logf("a spent tag checked %v after SIGSTOP: the table may be left, not checked", since)
	}
	a := <-asked
	if a.code != http.StatusOK || a.how != "FAILED_OPEN" || a.took < 400*time.Millisecond || a.took > 3*time.Second {
		t.Errorf("a new tag, dthrottled stopped: %d, decided %s, after %v; want 200, FAILED_OPEN, after the 500 ms timeout", a.code, a.how, a.took)
	}

	// The table left: served by the fail mode, at once but for an ask
	// now and then (one at a time), which waits the timeout at most.
	testkit.WaitFor(t, 5*time.Second, "nginx to fail open on a spent tag, the table left", func() bool {
		res, _ := harness.NgxGet(t, s, s.URL, "hung")
		return res.StatusCode == http.StatusOK
	})
	slow := 0
	for i := range 20 {
		res, took := harness.NgxGet(t, s, s.URL, fmt.Sprintf("hung-%d", i%3))
		if res.StatusCode != http.StatusOK || took > 1200*time.Millisecond {
			t.Fatalf("dthrottled stopped, request %d: %s in %v, want 200 (fail open) within the timeout", i+1, res.Status, took)
		}
		if took > 250*time.Millisecond {
			slow++
		}
	}
	// The backoff (50 ms doubling) lets an ask through now and then; on a
	// loaded machine a few more, never most.
	if slow > 10 {
		t.Errorf("with dthrottled stopped, %d of 20 requests waited on an ask: want at most a few (one ask at a time, after a backoff)", slow)
	}

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	// Refused from the table again, not asked: asks that timed out while
	// it was stopped still wait in its listen queue, and it counts them
	// as it reads them, so the worker's own counters tell.
	testkit.WaitFor(t, 10*time.Second, "nginx to refuse the spent tag from the table again", func() bool {
		res, _ := harness.NgxGet(t, s, s.URL, "hung")
		return res.StatusCode == http.StatusTooManyRequests && res.Header.Get("X-DThrottle") == "NO"
	})
	asked0 := s.StatsField(t, "asked")
	if codes, how := harness.NgxStatuses(t, s, "hung", 5); codes != "429 429 429 429 429" || how != "NO NO NO NO NO" {
		t.Errorf("after dthrottled went on: %s, decided %s; want 429s from the table", codes, how)
	}
	if asked := s.StatsField(t, "asked") - asked0; asked != 0 {
		t.Errorf("after dthrottled went on, 5 requests for a tag in the table: %d asked over the socket, want 0", asked)
	}
	if log := s.Output(); !strings.Contains(log, "timed out") || !strings.Contains(log, "attached again") {
		t.Errorf("nginx's error log does not say the ask timed out and the worker attached again:\n%s", log)
	}
}

// TestNginxModuleClientGone: a client that goes away while its request
// waits for the daemon leaves nothing behind: the request ends, and the
// connection to the daemon is closed with it, long before the timeout.
func TestNginxModuleClientGone(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	s := harness.StartNginxModule(t, d.Sock, "dthrottle_timeout 2s;", "dthrottle_timeout 30s;")
	harness.StopDaemon(t, d)

	u, err := url.Parse(s.URL)
	harness.Must(t, err)
	c, err := net.Dial("tcp", u.Host)
	harness.Must(t, err)
	fmt.Fprintf(c, "GET /hello.txt HTTP/1.1\r\nHost: %s\r\nX-Tag: gone\r\n\r\n", u.Host)
	testkit.WaitFor(t, 5*time.Second, "the worker to ask", func() bool { return s.StatsField(t, "asking") == 1 })
	c.Close()
	start := time.Now()
	testkit.WaitFor(t, 5*time.Second, "the worker to close the ask of the request gone", func() bool { return s.StatsField(t, "asking") == 0 })
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the ask was closed %v after the client left", took)
	}

	// The worker serves on; once the daemon goes on, it answers again.
	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	res, _ := harness.NgxGet(t, s, s.URL, "after-gone")
	if res.StatusCode != http.StatusOK || res.Header.Get("X-DThrottle") != "ASKED_OK" {
		t.Errorf("a new tag after the client left: %s, decided %s; want 200, ASKED_OK", res.Status, res.Header.Get("X-DThrottle"))
	}
}

// TestNginxModuleBuild: make install puts the module where Debian's nginx
// looks (/usr/lib/nginx/modules under DESTDIR), nginx loads it, and it
// exports nginx's three module symbols and nothing else: libdthrottle's
// stay inside.
func TestNginxModuleBuild(t *testing.T) {
	nginx := harness.RequireNginxModule(t)
	dir := harness.BuildNginxModule(t)
	dest := t.TempDir()
	harness.RunMake(t, dir, "-s", "install", "DESTDIR="+dest)
	so := filepath.Join(dest, "usr", "lib", "nginx", "modules", "ngx_http_dthrottle_module.so")
	if _, err := os.Stat(so); err != nil {
		t.Fatalf("make install: %v", err)
	}

	nm := harness.RequireTool(t, "nm")
	out, err := exec.Command(nm, "-D", "--defined-only", so).CombinedOutput()
	if err != nil {
		t.Fatalf("nm: %v\n%s", err, out)
	}
	var syms []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			syms = append(syms, f[2])
		}
	}
	if fmt.Sprint(syms) != "[ngx_module_names ngx_module_order ngx_modules]" {
		t.Errorf("the module exports %v, want nginx's three module symbols only", syms)
	}

	conf := filepath.Join(dest, "nginx.conf")
	harness.Must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`load_module %s;
events {}
http {
    dthrottle_socket @dthrottle-test;
    dthrottle $remote_addr;
    dthrottle_fail closed;
    dthrottle_bad_tag allow;
    dthrottle_status 503;
    dthrottle_timeout 20ms;
    server {
        listen 127.0.0.1:1;
        location = /stats { dthrottle off; dthrottle_stats; }
    }
}
`, so)), 0o644))
	if out, err := exec.Command(nginx, "-t", "-q", "-c", conf, "-g", "error_log /dev/stderr; pid "+filepath.Join(dest, "pid")+";").CombinedOutput(); err != nil {
		t.Errorf("nginx -t with the module loaded: %v\n%s", err, out)
	}
	// A bad value is refused when the configuration is read.
	for _, bad := range []string{"dthrottle_status 200;", "dthrottle_fail sometimes;", "dthrottle_bad_tag sometimes;", "dthrottle_socket relative.sock;", "dthrottle_timeout 0;"} {
		c := filepath.Join(dest, "bad.conf")
		harness.Must(t, os.WriteFile(c, []byte(fmt.Sprintf("load_module %s;\nevents {}\nhttp { %s server { listen 127.0.0.1:1; } }\n", so, bad)), 0o644))
		out, err := exec.Command(nginx, "-t", "-q", "-c", c, "-g", "error_log /dev/stderr; pid "+filepath.Join(dest, "pid")+";").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "[emerg]") {
			t.Errorf("nginx -t accepted %q: %v\n%s", bad, err, out)
		}
	}
}
