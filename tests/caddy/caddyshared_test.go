package caddy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// Caddy deciding in process: a Caddy built with contrib/caddy's module by
// contrib/caddy/build.sh, on the shipped Caddyfile.shared, against a real
// dthrottled with a burst of 3. Caddy maps the table the daemon shares and
// decides there; the daemon's counters tell what it was asked over its
// socket from what was decided (sharedCounts), as for nginx
// (nginxshared_test.go).

// caddyGetRaw sends a GET for u with the header line given, as bytes no
// HTTP client would send, and returns the status code.
func caddyGetRaw(t *testing.T, u, headerLine string) int {
	t.Helper()
	pu, err := url.Parse(u)
	harness.Must(t, err)
	c, err := net.Dial("tcp", pu.Host)
	harness.Must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\nConnection: close\r\n\r\n", pu.Path, pu.Host, headerLine)
	harness.Must(t, err)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	harness.Must(t, err)
	res.Body.Close()
	return res.StatusCode
}

// codes returns the status codes of n requests for u with X-Tag: tag.
func codes(t *testing.T, u, tag, log string, n int) string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, fmt.Sprint(harness.SharedGet(t, u, tag, log).StatusCode))
	}
	return strings.Join(out, " ")
}

// checkCaddyBadTags: the tags the line protocol cannot carry are refused
// and never reach the daemon; an empty tag is served, uncounted; a
// trailing CR is dropped, as the daemon drops it; header bytes Caddy
// takes (tab, obs-text) make a tag like any other, those it does not
// (control bytes) get its 400; a tag longer than the daemon keeps
// verbatim is asked over the socket each time.
func checkCaddyBadTags(t *testing.T, u string, d *harness.Daemon, log string) {
	t.Helper()
	socket0, decided0 := harness.SharedCounts(t, d)
	if got := codes(t, u, "", log, 5); got != "200 200 200 200 200" {
		t.Errorf("no X-Tag, no tag argument (an empty tag): %s, want 200s", got)
	}
	for _, q := range []string{"?tag=a%0Ab", "?tag=%0A"} {
		for range 2 {
			res := harness.SharedGet(t, u+q, "", log)
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
				t.Errorf("%s: %s %v, want 429 with Retry-After: 1", q, res.Status, res.Header)
			}
		}
	}
	if got := codes(t, u, strings.Repeat("z", 70<<10), log, 2); got != "429 429" {
		t.Errorf("a 70 KiB tag: %s, want 429s", got)
	}
	if socket1, decided1 := harness.SharedCounts(t, d); socket1 != socket0 || decided1 != decided0 {
		t.Errorf("empty and bad tags reached the daemon: asked %v, decided %v", socket1-socket0, decided1-decided0)
	}

	if got := codes(t, u, "cr", log, 3); got != "200 200 200" {
		t.Errorf("cr: %s", got)
	}
	if res := harness.SharedGet(t, u+"?tag=cr%0D", "", log); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("cr and a CR after the bucket of cr is spent: %s, want 429 (the same tag)", res.Status)
	}
	var got []int
	for range 4 {
		got = append(got, harness.SharedGet(t, u+"?tag=c%0Dd", "", log).StatusCode)
	}
	if fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("a CR inside a tag: %v, want a bucket of its own", got)
	}
	for _, h := range []string{"X-Tag: caf\xc3\xa9-\xff", "X-Tag: a\tb"} {
		var got []int
		for range 4 {
			got = append(got, caddyGetRaw(t, u, h))
		}
		if fmt.Sprint(got) != "[200 200 200 429]" {
			t.Errorf("%q: %v, want a bucket of its own", h, got)
		}
	}
	socket2, decided2 := harness.SharedCounts(t, d)
	if got := caddyGetRaw(t, u, "X-Tag: a\x01b"); got != http.StatusBadRequest {
		t.Errorf("a control byte in X-Tag: %d, want Caddy's 400", got)
	}
	long := strings.Repeat("y", 600)
	if got := codes(t, u, long, log, 4); got != "200 200 200 429" {
		t.Errorf("a 600-byte tag: %s", got)
	}
	if socket3, decided3 := harness.SharedCounts(t, d); socket3-socket2 != 4 || decided3-decided2 != 4 {
		t.Errorf("a 600-byte tag, 4 requests: asked %v over the socket, decided %v; want 4 and 4", socket3-socket2, decided3-decided2)
	}
}

// TestCaddyShared: burst 3 then 429 with the bucket's headers, decided in
// process; bad tags; fail open and fail closed with the daemon stopped;
// the daemon started again found by the Caddy still running.
func TestCaddyShared(t *testing.T) {
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	urls, p, _ := harness.StartCaddyShared(t, d.Sock)
	remote, tagged, closed := urls[0], urls[1], urls[2]

	harness.AwaitInProcess(t, tagged, d, p.Log)
	harness.CheckDecidedInProcess(t, tagged, d, p.Log, "first")
	checkCaddyBadTags(t, tagged, d, p.Log)
	if got := codes(t, closed, "closed-up", p.Log, 4); got != "200 200 200 429" {
		t.Errorf("fail closed, dthrottled up: %s", got)
	}
	// The shipped site: the client's address as the tag; with dthrottled
	// stopped, served at once (fail open).
	harness.CheckThrottled(t, remote, d, p.Log)
	start := time.Now()
	for i := range 10 {
		res := harness.SharedGet(t, closed, "closed-down", p.Log)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("fail closed, dthrottled stopped, request %d: %s %v, want 429 with Retry-After: 1", i+1, res.Status, res.Header)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("fail closed, dthrottled stopped: 10 requests took %v, not answered at once", took)
	}

	// dthrottled again on the same socket: Caddy, not restarted, finds it
	// and decides in process again.
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	config, admin := harness.PinPort(t, strings.ReplaceAll(fmt.Sprintf(harness.SharedDaemonConfig, ""), "%SOCK%", d.Sock), "http")
	harness.Must(t, os.WriteFile(path, []byte(config), 0o644))
	d2 := harness.RunDaemon(t, d.Sock, nil, "-config", path)
	d2.Admin = admin
	testkit.WaitFor(t, 15*time.Second, "caddy to refuse again after dthrottled restarted", func() bool {
		return harness.SharedGet(t, tagged, "again", p.Log).StatusCode == http.StatusTooManyRequests
	})
	harness.AwaitInProcess(t, tagged, d2, p.Log)
	harness.CheckDecidedInProcess(t, tagged, d2, p.Log, "second")
	if got := codes(t, closed, "closed-again", p.Log, 4); got != "200 200 200 429" {
		t.Errorf("fail closed, dthrottled back: %s", got)
	}
}

// TestCaddySharedSocketOnly: a daemon that shares nothing is asked every
// query; a refusal then knows no bucket, and says Retry-After: 1.
func TestCaddySharedSocketOnly(t *testing.T) {
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "share_table = false"))
	urls, p, _ := harness.StartCaddyShared(t, d.Sock)
	socket0, decided0 := harness.SharedCounts(t, d)
	var res *http.Response
	var got []int
	for range 4 {
		res = harness.SharedGet(t, urls[1], "sock", p.Log)
		got = append(got, res.StatusCode)
	}
	if fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("4 requests: %v", got)
	}
	if res.Header.Get("Retry-After") != "1" || res.Header.Get("RateLimit-Policy") != "" {
		t.Errorf("refused over the socket: %v, want Retry-After: 1 alone", res.Header)
	}
	// The client tries to attach again (an empty line, which the daemon
	// counts as a request) at most every 100 ms.
	if socket1, decided1 := harness.SharedCounts(t, d); socket1-socket0 < 4 || decided1-decided0 != 4 {
		t.Errorf("4 requests: asked %v over the socket, decided %v; want 4 or more and 4", socket1-socket0, decided1-decided0)
	}
}

// TestCaddySharedKilled: Caddy is one process; SIGKILLed while goroutines
// hammer a limited policy, then started again. The daemon and the new
// Caddy go on deciding from the same table: what was spent stays spent,
// every 200 was counted by the daemon and at most one per hammerer
// beyond (a decision whose answer the kill lost), the policy's bound
// holds across both Caddys, and the new one decides in process.
func TestCaddySharedKilled(t *testing.T) {
	const hammerers, tags, rate, burst = 4, 4, 100, 10
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "")+fmt.Sprintf(`
[[policy]]
name = "hot"
prefix = "hot:"
rate = %d.0
burst = %d
`, rate, burst))
	urls, p, restart := harness.StartCaddyShared(t, d.Sock)
	u := urls[1]
	harness.AwaitInProcess(t, u, d, p.Log)
	if got := codes(t, u, "spent", p.Log, 4); got != "200 200 200 429" {
		t.Fatalf("spent: %s", got)
	}

	ok0 := harness.Metric(t, harness.Scrape(t, d.Admin), "dthrottle_policy_queries_total", "policy=hot", "result=ok")
	var (
		stop             atomic.Bool
		answered, failed atomic.Int64
		served           [tags]atomic.Int64
		wg               sync.WaitGroup
	)
	start := time.Now()
	for g := range hammerers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 5 * time.Second}
			for i := g; !stop.Load(); i++ {
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				req.Header.Set("X-Tag", fmt.Sprintf("hot:%d", i%tags))
				res, err := hc.Do(req)
				if err != nil { // Caddy killed, not yet back
					failed.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				answered.Add(1)
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					served[i%tags].Add(1)
				}
			}
		}()
	}
	testkit.WaitFor(t, 10*time.Second, "the hammerers' first 1000 answers", func() bool { return answered.Load() >= 1000 })
	p.Kill(t)
	p = restart()
	after := answered.Load()
	testkit.WaitFor(t, 10*time.Second, "1000 answers from the new caddy", func() bool { return answered.Load() >= after+1000 })
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start).Seconds()

	ok1 := harness.Metric(t, harness.Scrape(t, d.Admin), "dthrottle_policy_queries_total", "policy=hot", "result=ok")
	var seen int64
	for i := range served {
		n := served[i].Load()
		seen += n
		if limit := burst + rate*elapsed + 1; float64(n) > limit {
			t.Errorf("hot:%d served %d times in %.2fs, over burst + rate x time = %.0f", i, n, elapsed, limit)
		}
	}
	decided := int64(ok1 - ok0)
	t.Logf("%d answers in %.2fs, %d requests failed (the kill), %d served; the daemon counts %d served", answered.Load(), elapsed, failed.Load(), seen, decided)
	if decided < seen || decided > seen+hammerers {
		t.Errorf("the daemon counts %d served of the hot policy, %d answered 200: want between %d and %d", decided, seen, seen, seen+hammerers)
	}

	// The table as the killed Caddy left it: spent stays spent, and the
	// daemon answers over its socket as ever.
	if got := codes(t, u, "spent", p.Log, 2); got != "429 429" {
		t.Errorf("spent, after the kill: %s, want 429s", got)
	}
	if got := harness.AskDaemon(t, d.Sock, "after-kill", "after-kill", "after-kill", "after-kill"); got != "OK\nOK\nOK\nNO\n" {
		t.Errorf("the daemon over its socket after the kill: %q", got)
	}
	harness.AwaitInProcess(t, u, d, p.Log)
	harness.CheckDecidedInProcess(t, u, d, p.Log, "restarted")
	if d.Cmd.ProcessState != nil || strings.Contains(d.Stderr.String(), "panic") {
		t.Errorf("dthrottled after the kill: %v\n%s", d.Cmd.ProcessState, d.Stderr)
	}
}

// TestCaddySharedBuild: build.sh builds the module into Caddy, and with
// -bare the same Caddy without it, for the benchmark's comparison.
func TestCaddySharedBuild(t *testing.T) {
	with := harness.BuildCaddyShared(t)
	bare := filepath.Join(t.TempDir(), "caddy-bare")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", "../../contrib/caddy/build.sh", "-bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("build.sh -bare: %v\n%s", err, out)
	}
	run := func(bin string, args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	if !strings.Contains(run(with, "list-modules"), "http.handlers.dthrottle") {
		t.Error("the built Caddy lacks http.handlers.dthrottle")
	}
	if strings.Contains(run(bare, "list-modules"), "dthrottle") {
		t.Error("the -bare Caddy has the dthrottle module")
	}
	if v1, v2 := run(with, "version"), run(bare, "version"); v1 != v2 || !strings.HasPrefix(v1, "v2.") {
		t.Errorf("versions %q and %q, want the same Caddy", v1, v2)
	}
	if out, err := exec.CommandContext(ctx, "bash", "../../contrib/caddy/build.sh").CombinedOutput(); err == nil || !strings.Contains(string(out), "usage") {
		t.Errorf("build.sh without OUT: %v %s, want its usage", err, out)
	}
}
