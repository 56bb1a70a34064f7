package nginx

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// OpenResty's way, deciding in process through LuaJIT's FFI:
// contrib/nginx/dthrottle-shared.conf and dthrottle_shared.lua, run from
// Debian's nginx and libnginx-mod-http-lua (lua-nginx-module, LuaJIT and
// lua-resty-core, as OpenResty bundles them) with libdthrottle built from libdthrottle, against a real
// dthrottled with a burst of 3. Each worker maps the table the daemon
// shares and decides there; the daemon's counters tell what it was asked
// over its socket (dthrottle_requests_total) from what was decided
// (dthrottle_queries_total, which adds the decisions made in process).

// checkBadTags sends the tags the line protocol cannot carry, and the
// empty tag, as the query's tag argument.
func checkBadTags(t *testing.T, u string, d *harness.Daemon, log string) {
	t.Helper()
	socket0, decided0 := harness.SharedCounts(t, d)
	for _, tc := range []struct {
		tag  string
		want int
	}{
		{"", http.StatusOK},                                     // served, as the daemon serves it, nothing counted
		{"a\nb", http.StatusTooManyRequests},                    // a newline: refused, never sent
		{"a\r", http.StatusTooManyRequests},                     // a CR
		{"c\rd", http.StatusTooManyRequests},                    // a CR inside
		{strings.Repeat("x", 2000), http.StatusTooManyRequests}, // over max_tag (1024)
	} {
		for range 2 {
			res := harness.SharedGet(t, u+"?tag="+url.QueryEscape(tc.tag), "", log)
			if res.StatusCode != tc.want {
				b, _ := os.ReadFile(log)
				t.Fatalf("tag %q: %s, want %d\n%s", tc.tag, res.Status, tc.want, b)
			}
			if tc.want == http.StatusTooManyRequests && res.Header.Get("Retry-After") == "" {
				t.Errorf("tag %q: a refusal without Retry-After: %v", tc.tag, res.Header)
			}
		}
	}
	socket1, decided1 := harness.SharedCounts(t, d)
	if socket1 != socket0 || decided1 != decided0 {
		t.Errorf("bad and empty tags reached the daemon: asked %v, decided %v", socket1-socket0, decided1-decided0)
	}
	// The same through access_var: a variable not found, or empty, is
	// served; one over max_tag refused; neither reaches the daemon.
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"var=arg_nothere", http.StatusOK},
		{"var=arg_v&v=", http.StatusOK},
		{"var=arg_v&v=" + strings.Repeat("x", 2000), http.StatusTooManyRequests},
	} {
		if res := harness.SharedGet(t, u+"?"+tc.query, "", log); res.StatusCode != tc.want {
			t.Fatalf("%s: %s, want %d", tc.query, res.Status, tc.want)
		}
	}
	if socket, decided := harness.SharedCounts(t, d); socket != socket0 || decided != decided0 {
		t.Errorf("access_var's bad and empty tags reached the daemon: asked %v, decided %v", socket-socket0, decided-decided0)
	}
	// Longer than the daemon keeps verbatim (256 bytes) but within
	// max_tag: the table keys it by a digest, so every query is asked.
	long := strings.Repeat("y", 600)
	for j := range 4 {
		want := http.StatusOK
		if j == 3 {
			want = http.StatusTooManyRequests
		}
		if res := harness.SharedGet(t, u+"?tag="+long, "", log); res.StatusCode != want {
			t.Fatalf("a 600-byte tag, request %d: %s, want %d", j+1, res.Status, want)
		}
	}
	if socket2, _ := harness.SharedCounts(t, d); socket2-socket1 != 4 {
		t.Errorf("a 600-byte tag asked %v times over the socket for 4 requests, want 4", socket2-socket1)
	}
	// And through access_var: asked each time as well.
	for j := range 4 {
		want := http.StatusOK
		if j == 3 {
			want = http.StatusTooManyRequests
		}
		if res := harness.SharedGet(t, u+"?var=arg_v&v=z"+long, "", log); res.StatusCode != want {
			t.Fatalf("a 601-byte variable, request %d: %s, want %d", j+1, res.Status, want)
		}
	}
	b, err := os.ReadFile(log)
	harness.Must(t, err)
	if !strings.Contains(string(b), "a tag with CR or LF") {
		t.Errorf("nginx's error log does not mention the bad tags:\n%s", b)
	}
}

func TestNginxShared(t *testing.T) {
	harness.RequireNginxLua(t)
	lib := harness.BuildLibdthrottle(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	u, log := harness.StartNginxShared(t, d.Sock, lib)

	harness.CheckDecidedInProcess(t, u, d, log, "first")
	// The worker's own counts: of the 50, 5 asked (the first of each
	// tag), 10 served and 35 refused in process.
	if got, want := harness.WorkerStats(t, u, log), "ok=10 no=35 asked=5 bad=0 shared=true"; !strings.HasPrefix(got, want) {
		t.Errorf("the worker's counters: %q, want %q", got, want)
	}
	checkBadTags(t, u, d, log)
	// A directory: burst 3 then 429, one token per request, though nginx
	// redirects it internally to its index.
	var dir []int
	for range 4 {
		dir = append(dir, harness.SharedGet(t, strings.TrimSuffix(u, "hello.txt"), "dir", log).StatusCode)
	}
	if fmt.Sprint(dir) != "[200 200 200 429]" {
		t.Errorf("GET / four times: %v, want [200 200 200 429]", dir)
	}
	// The client's address as the tag; with dthrottled stopped, served at
	// once (fail open).
	harness.CheckThrottled(t, u, d, log)

	// dthrottled again on the same socket: the worker, not restarted,
	// attaches again and decides in process.
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	config, admin := harness.PinPort(t, strings.ReplaceAll(fmt.Sprintf(harness.SharedDaemonConfig, ""), "%SOCK%", d.Sock), "http")
	harness.Must(t, os.WriteFile(path, []byte(config), 0o644))
	d2 := harness.RunDaemon(t, d.Sock, nil, "-config", path)
	d2.Admin = admin
	testkit.WaitFor(t, 10*time.Second, "nginx to refuse again after dthrottled restarted", func() bool {
		return harness.SharedGet(t, u, "again", log).StatusCode == http.StatusTooManyRequests
	})
	harness.CheckDecidedInProcess(t, u, d2, log, "second")

	b, err := os.ReadFile(log)
	harness.Must(t, err)
	for _, want := range []string{"detached, failing open", "attached again"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("nginx's error log does not say %q:\n%s", want, b)
		}
	}
}

// TestNginxSharedSocketOnly: a daemon that shares nothing
// (share_table = false) is asked every query, over the pooled cosockets;
// with fail = "closed", a stopped daemon refuses.
func TestNginxSharedSocketOnly(t *testing.T) {
	harness.RequireNginxLua(t)
	lib := harness.BuildLibdthrottle(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "share_table = false"))
	u, log := harness.StartNginxShared(t, d.Sock, lib, `-- fail = "closed",`, `fail = "closed",`)

	socket0, decided0 := harness.SharedCounts(t, d)
	for j := range 4 {
		res := harness.SharedGet(t, u, "sock", log)
		want := http.StatusOK
		if j == 3 {
			want = http.StatusTooManyRequests
		}
		if res.StatusCode != want {
			b, _ := os.ReadFile(log)
			t.Fatalf("request %d: %s, want %d\n%s", j+1, res.Status, want, b)
		}
		if j == 3 {
			// Asked: the headers come from rate and burst as configured.
			if got := res.Header.Get("RateLimit-Policy"); got != `"default";q=3;w=3000` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			if got := res.Header.Get("Retry-After"); got != "1000" {
				t.Errorf("Retry-After %q, want 1000", got)
			}
		}
	}
	socket1, decided1 := harness.SharedCounts(t, d)
	if socket1-socket0 != 4 || decided1-decided0 != 4 {
		t.Errorf("4 requests: asked %v over the socket, decided %v; want 4 and 4", socket1-socket0, decided1-decided0)
	}

	d.Stop(t)
	start := time.Now()
	for i := range 10 {
		if res := harness.SharedGet(t, u, "sock2", log); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("fail closed, dthrottled stopped, request %d: %s, want 429", i+1, res.Status)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("with dthrottled stopped, 10 requests took %v: not answered at once", took)
	}
}

// TestNginxSharedPolicies: a prefix put before every tag, a [[policy]]
// named in the configuration for the headers, and a deny policy, decided
// in process on both paths (access and access_var).
func TestNginxSharedPolicies(t *testing.T) {
	harness.RequireNginxLua(t)
	lib := harness.BuildLibdthrottle(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "")+`
[[policy]]
name = "api"
prefix = "web:api:"
rate = 0.5
burst = 2

[[policy]]
name = "blocked"
prefix = "web:blocked:"
action = "deny"
`)
	u, log := harness.StartNginxShared(t, d.Sock, lib,
		`-- prefix = "web:",            -- select a [[policy]]`, `prefix = "web:",`,
		`-- names = { ["login:"] = "login" }, -- [[policy]] names, for the headers`, `names = { ["web:api:"] = "api" },`,
		`-- stats_dict = "dthrottle_stats",`, `stats_dict = "dthrottle_stats",`,
		`# lua_shared_dict dthrottle_stats 64k;`, `lua_shared_dict dthrottle_stats 64k;`)

	for j := range 3 {
		res := harness.SharedGet(t, u, "api:k", log)
		if j < 2 {
			if res.StatusCode != http.StatusOK {
				t.Fatalf("api:k, request %d: %s, want 200", j+1, res.Status)
			}
			continue
		}
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("api:k, request 3: %s, want 429", res.Status)
		}
		// Burst 2 at 0.5/s: full again in 4 s, a token in 2 s.
		for h, want := range map[string]string{"RateLimit-Policy": `"api";q=2;w=4`, "RateLimit": `"api";r=0;t=4`, "Retry-After": "2"} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("api:k refused: %s %q, want %q", h, got, want)
			}
		}
	}

	// A deny policy refuses in process without asking, and has no bucket:
	// no RateLimit headers, as from the daemon's HTTP endpoint.
	socket0, _ := harness.SharedCounts(t, d)
	res := harness.SharedGet(t, u, "blocked:x", log)
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("blocked:x: %s, want 429", res.Status)
	}
	if got := res.Header.Get("RateLimit-Policy"); got != "" {
		t.Errorf("a deny policy's refusal has RateLimit-Policy %q", got)
	}
	if socket1, _ := harness.SharedCounts(t, d); socket1 != socket0 {
		t.Errorf("a deny policy's tag was asked over the socket")
	}

	// The client's address through access_var, with the prefix: the tag
	// the daemon holds is web:127.0.0.1.
	for j := range 4 {
		want := http.StatusOK
		if j == 3 {
			want = http.StatusTooManyRequests
		}
		if res := harness.SharedGet(t, u, "", log); res.StatusCode != want {
			t.Fatalf("the client's address, request %d: %s, want %d", j+1, res.Status, want)
		} else if j == 3 && res.Header.Get("RateLimit-Policy") != `"default";q=3;w=3000` {
			t.Errorf("RateLimit-Policy %q", res.Header.Get("RateLimit-Policy"))
		}
	}
	if code, body := harness.HTTPDo(t, http.MethodGet, "http://"+d.Admin+"/v1/tags/web:127.0.0.1"); code != http.StatusOK || !strings.Contains(body, `"tracked":true`) {
		t.Errorf("/v1/tags/web:127.0.0.1: %d %s, want the tag tracked", code, body)
	}
	// stats_dict: the worker adds its counts up each second. In process:
	// api:k served once and refused once (its first request was asked),
	// blocked:x refused, the address served twice and refused once.
	testkit.WaitFor(t, 5*time.Second, "the worker's counts in dthrottle_stats", func() bool {
		return strings.HasSuffix(harness.WorkerStats(t, u, log), "dict_ok=3 dict_no=3")
	})
}

// TestNginxSharedHungDaemon: a daemon that stops answering and beating
// (SIGSTOP) leaves its table a second later; the worker then serves by the
// fail mode at once, its attempts to attach again waiting on a cosocket,
// never in a request; the daemon going on again, the worker decides in
// process again, from the same table.
func TestNginxSharedHungDaemon(t *testing.T) {
	harness.RequireNginxLua(t)
	lib := harness.BuildLibdthrottle(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	u, log := harness.StartNginxShared(t, d.Sock, lib)
	for j := range 4 {
		want := http.StatusOK
		if j == 3 {
			want = http.StatusTooManyRequests
		}
		if res := harness.SharedGet(t, u, "hung", log); res.StatusCode != want {
			t.Fatalf("request %d: %s, want %d", j+1, res.Status, want)
		}
	}

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { d.Cmd.Process.Signal(syscall.SIGCONT) })
	// The table is left once its heartbeat is over a second old.
	testkit.WaitFor(t, 5*time.Second, "nginx to fail open with dthrottled stopped", func() bool {
		return harness.SharedGet(t, u, "hung", log).StatusCode == http.StatusOK
	})
	start := time.Now()
	for i := range 20 {
		if res := harness.SharedGet(t, u, "hung", log); res.StatusCode != http.StatusOK {
			t.Fatalf("dthrottled stopped, request %d: %s, want 200 (fail open)", i+1, res.Status)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("with dthrottled stopped, 20 requests took %v: not served at once", took)
	}

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	testkit.WaitFor(t, 10*time.Second, "nginx to refuse the spent tag again", func() bool {
		return harness.SharedGet(t, u, "hung", log).StatusCode == http.StatusTooManyRequests
	})
	socket0, decided0 := harness.SharedCounts(t, d)
	for range 5 {
		if res := harness.SharedGet(t, u, "hung", log); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("after dthrottled went on: %s, want 429", res.Status)
		}
	}
	if socket1, decided1 := harness.SharedCounts(t, d); socket1 != socket0 || decided1-decided0 != 5 {
		t.Errorf("after dthrottled went on, 5 requests: asked %v over the socket, decided %v; want 0 and 5", socket1-socket0, decided1-decided0)
	}
}
