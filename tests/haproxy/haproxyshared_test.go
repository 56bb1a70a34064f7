package haproxy

import (
	"debug/elf"
	"fmt"
	"net/http"
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

// HAProxy deciding in process: contrib/haproxy/haproxy-shared.cfg and
// dthrottle_shared.lua, with the Lua C module dthrottle_shared.so built
// from contrib/haproxy (libdthrottle compiled in), run from Debian's
// HAProxy 2.6 with four threads in master-worker mode, against a real
// dthrottled with a burst of 3. The daemon's counters tell what it
// decided, in process included (sharedCounts); HAProxy's own
// (/dthrottle-stats), what its threads decided and what they asked over
// the socket (the daemon's count of lines asked also holds the probes of
// a reattach, which a heartbeat late on a loaded machine may bring).

func TestHAProxyShared(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	p := harness.StartHAProxyShared(t, d.Sock, mod)

	harness.CheckDecidedInProcess(t, p.URL, d, p.Log, "first")
	// HAProxy's own counts, all threads, one attachment: of the 50, 5
	// asked (the first of each tag), 10 served and 35 refused in process.
	if got, want := p.Stats(t), "ok=10 no=35 asked=5 asked_no=0 failed=0 bad=0 attaches=1 shared=true"; got != want {
		t.Errorf("HAProxy's counters: %q, want %q", got, want)
	}
	// A new tag from 32 connections at once, spread over the threads,
	// asked and then decided in process: served its burst, no more.
	stop := make(chan struct{})
	load := harness.StartHSLoad(p.URL, 32, func(i, j int) string { return "together" }, stop)
	testkit.WaitFor(t, 10*time.Second, "the load to be refused", func() bool { return load.Refused.Load() >= 100 })
	close(stop)
	load.Wg.Wait()
	if load.Ok.Load() != 3 || load.Errs.Load() != 0 {
		t.Errorf("one tag from 32 connections at once: %d served, %d refused, %d failed; want 3 served, none failed",
			load.Ok.Load(), load.Refused.Load(), load.Errs.Load())
	}
	// The client's address as the tag, as shipped; with dthrottled
	// stopped, served at once (fail open).
	harness.CheckThrottled(t, p.URL, d, p.Log)

	// dthrottled again on the same socket: HAProxy, not restarted,
	// attaches again and decides in process.
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	config, admin := harness.PinPort(t, strings.ReplaceAll(fmt.Sprintf(harness.SharedDaemonConfig, ""), "%SOCK%", d.Sock), "http")
	harness.Must(t, os.WriteFile(path, []byte(config), 0o644))
	d2 := harness.RunDaemon(t, d.Sock, nil, "-config", path)
	d2.Admin = admin
	testkit.WaitFor(t, 10*time.Second, "HAProxy to refuse again after dthrottled restarted", func() bool {
		return harness.SharedGet(t, p.URL, "again", p.Log).StatusCode == http.StatusTooManyRequests
	})
	harness.CheckDecidedInProcess(t, p.URL, d2, p.Log, "second")

	out := p.Output()
	if !strings.Contains(out, "dthrottle: detached from "+d.Sock+", failing open") ||
		strings.Count(out, "dthrottle: attached to "+d.Sock+": deciding in process") < 2 {
		t.Errorf("HAProxy's log does not tell the outage and the recovery:\n%s", out)
	}
}

// TestHAProxySharedTags: a prefix put before every tag, a [[policy]]
// named in the configuration for the headers, a deny policy, and the
// tags the line protocol cannot carry.
func TestHAProxySharedTags(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "")+`
[[policy]]
name = "api"
prefix = "web:api:"
rate = 0.5
burst = 2

[[policy]]
name = "search"
prefix = "web:search:"
rate = 0.5
burst = 2

[[policy]]
name = "blocked"
prefix = "web:blocked:"
action = "deny"
`)
	p := harness.StartHAProxyShared(t, d.Sock, mod,
		"# presetenv DTHROTTLE_PREFIX web:                # select a [[policy]]", "presetenv DTHROTTLE_PREFIX web:",
		`# presetenv DTHROTTLE_NAMES "login=web:login:"   # [[policy]] names in the headers, over the table's`,
		`presetenv DTHROTTLE_NAMES "the-api=web:api:"`)

	// Named policies, burst 2 at 0.5/s, full again in 4 s, a token in 2 s:
	// api named in DTHROTTLE_NAMES, search by the table.
	for tag, name := range map[string]string{"api:k": "the-api", "search:k": "search"} {
		if got := p.Statuses(t, tag, 2); got != "200 200" {
			t.Fatalf("%s: %s, want 200 200", tag, got)
		}
		res, err := harness.HSGet(p.URL, tag, true)
		harness.Must(t, err)
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s, request 3: %s, want 429", tag, res.Status)
		}
		for h, want := range map[string]string{"RateLimit-Policy": `"` + name + `";q=2;w=4`, "RateLimit": `"` + name + `";r=0;t=4`, "Retry-After": "2"} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("%s refused: %s %q, want %q", tag, h, got, want)
			}
		}
	}

	// A deny policy refuses in process without asking, and has no bucket:
	// no RateLimit headers, as from the daemon's HTTP endpoint.
	asked0, decided0 := p.StatsField(t, "asked"), harness.SharedDecided(t, d)
	res, err := harness.HSGet(p.URL, "blocked:x", true)
	harness.Must(t, err)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("RateLimit-Policy") != "" || res.Header.Get("Retry-After") != "" {
		t.Errorf("blocked:x: %s %v, want 429 without RateLimit headers", res.Status, res.Header)
	}

	// Tags the line protocol cannot carry: refused, never sent; the
	// empty tag: served, nothing counted, as the daemon does.
	for _, tc := range []struct {
		tag  string
		want string
	}{
		{"", "200 200"},
		{"a\nb", "429 429"},
		{"a\r", "429 429"},
		{"c\rd", "429 429"},
		{strings.Repeat("x", 1021), "429 429"}, // over 1024 bytes with the prefix
	} {
		if got := p.Statuses(t, tc.tag, 2); got != tc.want {
			t.Errorf("tag %q: %s, want %s", tc.tag, got, tc.want)
		}
	}
	res, err = harness.HSGet(p.URL, "a\nb", true)
	harness.Must(t, err)
	if res.Header.Get("Retry-After") != "1000" || res.Header.Get("RateLimit-Policy") != `"default";q=3;w=3000` {
		t.Errorf("a bad tag's refusal: %v, want the headers of DTHROTTLE_RATE and _BURST", res.Header)
	}
	if asked, decided := p.StatsField(t, "asked")-asked0, harness.SharedDecided(t, d)-decided0; asked != 0 || decided != 1 {
		t.Errorf("a deny and bad and empty tags: asked %v over the socket, decided %v; want 0 and 1 (the deny)", asked, decided)
	}
	// Any other byte is the tag's: decided as any tag, in process after
	// the first request.
	if got := p.Statuses(t, "\x00\xff\x01 bin", 4); got != "200 200 200 429" {
		t.Errorf("a tag of binary bytes: %s, want 200 200 200 429", got)
	}
	if code, body := harness.HTTPDo(t, http.MethodGet, "http://"+d.Admin+"/v1/tags/web:%00%FF%01%20bin"); code != http.StatusOK || !strings.Contains(body, `"tracked":true`) {
		t.Errorf("the binary tag in the daemon: %d %s", code, body)
	}
	// Longer than the daemon keeps verbatim (256 bytes) but within 1024:
	// the table keys it by a digest, so every query is asked.
	asked2 := p.StatsField(t, "asked")
	if got := p.Statuses(t, strings.Repeat("y", 600), 4); got != "200 200 200 429" {
		t.Errorf("a 604-byte tag: %s, want 200 200 200 429", got)
	}
	if asked := p.StatsField(t, "asked") - asked2; asked != 4 {
		t.Errorf("a 604-byte tag asked %v times over the socket for 4 requests, want 4", asked)
	}

	// The client's address, with the prefix: the daemon holds
	// web:127.0.0.1.
	for j := range 4 {
		res, err := harness.HSGet(p.URL, "", false)
		harness.Must(t, err)
		if want := map[bool]int{true: 200, false: 429}[j < 3]; res.StatusCode != want {
			t.Fatalf("the client's address, request %d: %s, want %d", j+1, res.Status, want)
		}
	}
	if code, body := harness.HTTPDo(t, http.MethodGet, "http://"+d.Admin+"/v1/tags/web:127.0.0.1"); code != http.StatusOK || !strings.Contains(body, `"tracked":true`) {
		t.Errorf("/v1/tags/web:127.0.0.1: %d %s, want the tag tracked", code, body)
	}
	if got := p.StatsField(t, "bad"); got != 9 {
		t.Errorf("HAProxy counted %d bad tags, want 9", got)
	}
	if out := p.Output(); !strings.Contains(out, "dthrottle: a tag with CR or LF, or over 1024 bytes: deny") {
		t.Errorf("HAProxy's log does not mention the bad tags:\n%s", out)
	}
}

// TestHAProxySharedSocketOnly: a daemon that shares nothing
// (share_table = false) is asked every query over the threads' kept
// connections; with DTHROTTLE_FAIL closed, a stopped daemon refuses, at
// once.
func TestHAProxySharedSocketOnly(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "share_table = false"))
	p := harness.StartHAProxyShared(t, d.Sock, mod, "presetenv DTHROTTLE_FAIL open", "presetenv DTHROTTLE_FAIL closed")

	decided0 := harness.SharedDecided(t, d)
	if got := p.Statuses(t, "sock", 4); got != "200 200 200 429" {
		t.Fatalf("4 requests: %s, want 200 200 200 429\n%s", got, p.Output())
	}
	if decided := harness.SharedDecided(t, d) - decided0; decided != 4 {
		t.Errorf("4 requests: the daemon decided %v, want 4", decided)
	}
	if got := p.Stats(t); !strings.Contains(got, "asked=4 asked_no=1") || !strings.HasSuffix(got, "shared=false") {
		t.Errorf("HAProxy's counters: %q, want 4 asked, 1 refused, not shared", got)
	}

	d.Stop(t)
	start := time.Now()
	for i := range 10 {
		res, err := harness.HSGet(p.URL, "sock2", true)
		harness.Must(t, err)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1000" {
			t.Fatalf("fail closed, dthrottled stopped, request %d: %s %v, want 429 with Retry-After 1000", i+1, res.Status, res.Header)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("with dthrottled stopped, 10 requests took %v: not answered at once", took)
	}
}

// TestHAProxySharedIdle: a kept connection that sat in a thread's pool
// past half the timeout is never used, so no query is sent twice (HAProxy
// reports a connection it timed out while idle as one the daemon closed,
// after the line went out): against a daemon that shares nothing, a
// tag's requests spaced wider than the timeout spend one token each, and
// exactly the burst is served.
func TestHAProxySharedIdle(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "share_table = false"))
	p := harness.StartHAProxyShared(t, d.Sock, mod, "presetenv DTHROTTLE_TIMEOUT_MS 2000", "presetenv DTHROTTLE_TIMEOUT_MS 500")
	served := 0
	for range 5 {
		res, err := harness.HSGet(p.URL, "idle", true)
		if err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		if res.StatusCode == http.StatusOK {
			served++
		}
		// The gap is the test's subject, not a wait for an event. The
		// timeout is wide enough that a loaded machine's slow answer
		// does not fail open (which would serve a fourth).
		time.Sleep(600 * time.Millisecond)
	}
	if served != 3 {
		t.Errorf("served %d of 5 requests spaced past the timeout, want the burst, 3\n%s", served, p.Output())
	}
}

// TestHAProxySharedReload: a reload (SIGUSR2 to the master) while
// requests come in: the new worker attaches and decides in process from
// the same table, so that a tag spent before stays spent, and a tag
// spent across the reload is served its burst, no more.
func TestHAProxySharedReload(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	p := harness.StartHAProxyShared(t, d.Sock, mod)
	if got := p.Statuses(t, "before", 4); got != "200 200 200 429" {
		t.Fatalf("before the reload: %s, want 200 200 200 429", got)
	}
	old := p.Worker(t)

	stop := make(chan struct{})
	load := harness.StartHSLoad(p.URL, 4, func(i, j int) string { return "across" }, stop)
	time.Sleep(100 * time.Millisecond) // some load before the reload
	harness.Must(t, p.Cmd.Process.Signal(syscall.SIGUSR2))
	var now int
	testkit.WaitFor(t, 10*time.Second, "the reload's new worker", func() bool {
		now = p.Worker(t)
		return now != old
	})
	p.AwaitAttached(t, 0)
	time.Sleep(100 * time.Millisecond) // some load after it
	close(stop)
	load.Wg.Wait()
	// Every answer is exact, in process or asked: a request that failed
	// (a connection the former worker closed) may have spent a token, so
	// three served at most.
	t.Logf("across the reload: %d served, %d refused, %d failed", load.Ok.Load(), load.Refused.Load(), load.Errs.Load())
	if load.Ok.Load() > 3 || load.Ok.Load()+load.Errs.Load() < 3 || load.Refused.Load() < 10 {
		t.Errorf("tag across, spent across the reload: %d served, %d refused, %d failed; want 3 served at most, and refused after",
			load.Ok.Load(), load.Refused.Load(), load.Errs.Load())
	}
	if got := p.Statuses(t, "across", 1); got != "429" {
		t.Errorf("tag across after the reload: %s, want 429", got)
	}

	asked0, decided0 := p.StatsField(t, "asked"), harness.SharedDecided(t, d)
	if got := p.Statuses(t, "before", 3); got != "429 429 429" {
		t.Errorf("a tag spent before the reload, after it: %s, want 429 429 429", got)
	}
	if asked, decided := p.StatsField(t, "asked")-asked0, harness.SharedDecided(t, d)-decided0; asked != 0 || decided != 3 {
		t.Errorf("after the reload, a known tag: asked %v over the socket, decided %v; want 0 and 3", asked, decided)
	}
	harness.CheckDecidedInProcess(t, p.URL, d, p.Log, "after")
}

// TestHAProxySharedKilled: two HAProxys decide from one table; one's
// worker is killed (SIGKILL) while it decides under load. The other goes
// on deciding in process, exactly; the killed one started again decides
// in process too.
func TestHAProxySharedKilled(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "")+`
[[policy]]
name = "load"
prefix = "load:"
rate = 1e9
burst = 1000000
`)
	a := harness.StartHAProxyShared(t, d.Sock, mod)
	b := harness.StartHAProxyShared(t, d.Sock, mod)

	stop := make(chan struct{})
	load := harness.StartHSLoad(a.URL, 8, func(i, j int) string { return fmt.Sprintf("load:%d", j%16) }, stop)
	testkit.WaitFor(t, 10*time.Second, "HAProxy a to decide under load", func() bool { return load.Ok.Load() >= 200 })
	a.SignalWorker(t, syscall.SIGKILL)
	close(stop)
	load.Wg.Wait()

	// b: fresh tags, and the tags of the load, in process.
	harness.CheckDecidedInProcess(t, b.URL, d, b.Log, "b")
	asked0, decided0 := b.StatsField(t, "asked"), harness.SharedDecided(t, d)
	for i := range 16 {
		if got := b.Statuses(t, fmt.Sprintf("load:%d", i), 1); got != "200" {
			t.Errorf("load:%d from b: %s, want 200", i, got)
		}
	}
	if asked, decided := b.StatsField(t, "asked")-asked0, harness.SharedDecided(t, d)-decided0; asked != 0 || decided != 16 {
		t.Errorf("b, the tags of the load: asked %v over the socket, decided %v; want 0 and 16", asked, decided)
	}

	// a: its master left with its worker (and let go of the port);
	// started again, it attaches.
	testkit.WaitFor(t, 10*time.Second, "HAProxy a's master to exit after its worker was killed", func() bool {
		return syscall.Kill(a.Cmd.Process.Pid, 0) == syscall.ESRCH
	})
	a.Start(t)
	harness.CheckDecidedInProcess(t, a.URL, d, a.Log, "a-again")
}

// TestHAProxySharedHungDaemon: a daemon that stops answering and beating
// (SIGSTOP). A new tag is asked, and waits the timeout (300 ms) at most
// before it is served (fail open); a second later the table is left, and
// every request is served at once, the attempts to attach again waiting
// on HAProxy's sockets, never in a request. The daemon going on again,
// HAProxy decides in process again.
func TestHAProxySharedHungDaemon(t *testing.T) {
	t.Parallel()
	mod := harness.BuildHAProxyShared(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	p := harness.StartHAProxyShared(t, d.Sock, mod, "presetenv DTHROTTLE_TIMEOUT_MS 2000", "presetenv DTHROTTLE_TIMEOUT_MS 300")
	if got := p.Statuses(t, "hung", 4); got != "200 200 200 429" {
		t.Fatalf("before: %s, want 200 200 200 429", got)
	}

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { d.Cmd.Process.Signal(syscall.SIGCONT) })
	timed := func(tag string) (int, time.Duration) {
		t.Helper()
		start := time.Now()
		res, err := harness.HSGet(p.URL, tag, true)
		if err != nil {
			t.Fatalf("tag %s, dthrottled stopped: %v\n%s", tag, err, p.Output())
		}
		return res.StatusCode, time.Since(start)
	}
	// Within the second the table is still live: a new tag is asked.
	if code, took := timed("hung-new"); code != http.StatusOK || took > 1200*time.Millisecond {
		t.Errorf("a new tag, dthrottled stopped: %d in %v, want 200 (fail open) within the 300 ms timeout", code, took)
	}
	testkit.WaitFor(t, 5*time.Second, "HAProxy to fail open on a spent tag, the table left", func() bool {
		code, _ := timed("hung")
		return code == http.StatusOK
	})
	start := time.Now()
	for i := range 20 {
		if code, took := timed(fmt.Sprintf("hung-%d", i%3)); code != http.StatusOK || took > 300*time.Millisecond {
			t.Fatalf("dthrottled stopped, request %d: %d in %v, want 200 (fail open) at once", i+1, code, took)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("with dthrottled stopped, 20 requests took %v: not served at once", took)
	}

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	testkit.WaitFor(t, 10*time.Second, "HAProxy to refuse the spent tag again", func() bool {
		code, _ := timed("hung")
		return code == http.StatusTooManyRequests
	})
	asked0, decided0 := p.StatsField(t, "asked"), harness.SharedDecided(t, d)
	if got := p.Statuses(t, "hung", 5); got != "429 429 429 429 429" {
		t.Errorf("after dthrottled went on: %s, want 429s", got)
	}
	if asked, decided := p.StatsField(t, "asked")-asked0, harness.SharedDecided(t, d)-decided0; asked != 0 || decided != 5 {
		t.Errorf("after dthrottled went on, 5 requests: asked %v over the socket, decided %v; want 0 and 5", asked, decided)
	}
}

// TestHAProxySharedBuild: make install puts the module where Lua 5.3
// looks (PREFIX/lib/lua/5.3), and the module exports its luaopen and
// nothing else: libdthrottle's symbols stay inside.
func TestHAProxySharedBuild(t *testing.T) {
	t.Parallel()
	harness.RequireHAProxyShared(t)
	dir, err := harness.CopyHAProxySharedTo(t.TempDir())
	harness.Must(t, err)
	dest := t.TempDir()
	harness.RunMake(t, dir, "install", "DESTDIR="+dest, "PREFIX=/opt/dt")
	so := filepath.Join(dest, "opt", "dt", "lib", "lua", "5.3", "dthrottle_shared.so")
	f, err := elf.Open(so)
	harness.Must(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	harness.Must(t, err)
	var exported []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			exported = append(exported, s.Name)
		}
	}
	if fmt.Sprint(exported) != "[luaopen_dthrottle_shared]" {
		t.Errorf("dthrottle_shared.so exports %v, want [luaopen_dthrottle_shared]", exported)
	}
	if built, _ := filepath.Glob(filepath.Join(dir, "..", "..", "libdthrottle", "*.o")); len(built) > 0 {
		t.Errorf("building the module built in ../../libdthrottle: %v", built)
	}

	// lua-load, HAProxy's one state for all threads, is refused at once.
	lua, err := filepath.Abs("../../contrib/haproxy/dthrottle_shared.lua")
	harness.Must(t, err)
	conf := filepath.Join(t.TempDir(), "haproxy.cfg")
	harness.Must(t, os.WriteFile(conf, []byte(harness.ContribConfig(t, "haproxy/haproxy-shared.cfg",
		"lua-load-per-thread /etc/haproxy/dthrottle_shared.lua", "lua-load "+lua)), 0o644))
	out, err := exec.Command(harness.RequireSbin(t, "haproxy"), "-c", "-f", conf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "load it with lua-load-per-thread") {
		t.Errorf("haproxy -c with lua-load: %v, want it refused\n%s", err, out)
	}
}
