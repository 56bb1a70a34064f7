package apache

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestModApacheSharedCounts: what Apache's children decide from the
// shared table counts in the daemon as if it had been asked: its metrics
// and `dthrottle stats` at once (the children count in the state file,
// which /metrics reads), `dthrottle tag` shows the bucket spent, and the
// refusals made in the children reach `/v1/top` at the daemon's next
// report, when it harvests them from the state file (every 100 ms here:
// gossip to a loopback port where no peer listens).
func TestModApacheSharedCounts(t *testing.T) {
	d, _ := harness.SharedDaemon(t, fmt.Sprintf(`
[listen]
unix = "%%SOCK%%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
[admin]
http = "127.0.0.1:0"
[gossip]
interval = "100ms"
bind = "127.0.0.1:%d"
peers = ["127.0.0.1:%d"]
`, harness.FreePort(t), harness.FreePort(t)))
	a := harness.StartModApache(t, "event", fmt.Sprintf(modConfig, d.Sock))
	modBasics(t, a)
	c := a.Counters(t, &http.Client{Timeout: 10 * time.Second})
	if c["decided_shared"] != "6" || c["asked"] != "3" {
		t.Fatalf("counters: decided_shared %s, asked %s; want 6 and 3 (all: %v)", c["decided_shared"], c["asked"], c)
	}

	// 9 queries with a tag: 7 served, 2 refused, 6 of them in Apache.
	addr := d.AdminAddr(t)
	fams := harness.Scrape(t, addr)
	for result, want := range map[string]float64{"ok": 7, "no": 2} {
		if got := harness.Metric(t, fams, "dthrottle_queries_total", "result="+result); got != want {
			t.Errorf("dthrottle_queries_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if code, out, errs := harness.RunCLI(t, "", "stats", "-admin", addr); code != 0 || !strings.Contains(out, "7 OK, 2 NO") {
		t.Errorf("dthrottle stats: exit %d, want \"7 OK, 2 NO\"\n%s%s", code, out, errs)
	}
	for _, tag := range []string{"127.0.0.1", "h:a"} {
		code, out, errs := harness.RunCLI(t, "", "tag", "-admin", addr, tag)
		if code != 0 || !strings.Contains(out, "tokens      0 of 3") || !strings.Contains(out, "tracked     yes") {
			t.Errorf("dthrottle tag %s: exit %d, want tracked with 0 of 3 tokens\n%s%s", tag, code, out, errs)
		}
	}
	var doc api.Top
	deadline := time.Now().Add(5 * time.Second)
	for {
		doc = harness.TopView(t, d, "by=refused&scope=node")
		a, okA := doc.Find("default", "127.0.0.1")
		h, okH := doc.Find("default", "h:a")
		if okA && okH && a.Count == 1 && h.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/v1/top after 5 s: %+v; want 127.0.0.1 and h:a refused once each", doc)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestModApacheSharedOutage: the shared table's outage (and the
// Retry-After of a refusal decided from it). Frozen, the daemon
// stops beating in the table: after a second the children stop deciding
// from it and ask, which fails fast (timeout, backoff), so the fail mode
// answers; thawed, the table is live again and decides. Stopped, the
// daemon retires the table: the fail mode answers at once; started again,
// the children attach to its new table once it answers, and decide from
// it, without touching Apache.
func TestModApacheSharedOutage(t *testing.T) {
	const config = `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
`
	d, path := harness.SharedDaemon(t, config)
	const timeout = 200 * time.Millisecond
	a := harness.StartModApache(t, "event", fmt.Sprintf(`
DThrottle On
DThrottleSocket %s
DThrottleTimeout %dms
DThrottleBackoff 1s 1s
<Location /closed>
	DThrottleFail closed
</Location>
`, d.Sock, timeout.Milliseconds()))
	hc := &http.Client{Timeout: 10 * time.Second}
	count := func(name string) int {
		t.Helper()
		n, err := strconv.Atoi(a.Counters(t, hc)[name])
		harness.Must(t, err)
		return n
	}
	a.Expect(t, hc, "/", "", 200, 200, 200)
	// Refused in process, without DThrottleRetryAfter: Retry-After says
	// when the bucket earns a token, 1000 s at this rate.
	status, retry, _ := a.Fetch(t, hc, "/", "")
	if secs, err := strconv.Atoi(retry); status != 429 || err != nil || secs < 990 || secs > 1000 {
		t.Fatalf("4th request: status %d, Retry-After %q; want 429 and about 1000", status, retry)
	}
	if n := count("decided_shared"); n != 3 {
		t.Fatalf("decided_shared = %d before the outage, want 3", n)
	}

	// Frozen: in-process decisions go on until the heartbeat is a second
	// old, then the fail mode answers.
	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { d.Cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(1200 * time.Millisecond)
	start := time.Now()
	a.Expect(t, hc, "/", "", 200, 200, 200, 200, 200, 200, 200, 200, 200, 200)
	if took := time.Since(start); took > 5*timeout {
		t.Errorf("10 requests with dthrottled frozen took %v: more than 5 query timeouts (%v)", took, timeout)
	}
	closed := count("failed_closed")
	a.Expect(t, hc, "/closed", "", 429)
	if n := count("failed_closed"); n != closed+1 {
		t.Errorf("failed_closed = %d after /closed with dthrottled frozen, want %d", n, closed+1)
	}
	// Thawed: the same table is live again, and refuses the spent tag.
	shared := count("decided_shared")
	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	awaitStatus(t, a, hc, "/", 429, "the thawed daemon's table to refuse")
	// The first refusal may be asked (the heartbeat not beaten yet since
	// the thaw); the table decides again within a beat or two.
	testkit.WaitFor(t, 5*time.Second, "decided_shared to rise after the thaw", func() bool {
		a.Fetch(t, hc, "/", "")
		return count("decided_shared") > shared
	})

	// Stopped: the table is retired, and the daemon gone: fail open.
	d.Stop(t)
	a.Expect(t, hc, "/", "", 200, 200, 200, 200, 200)
	a.Expect(t, hc, "/closed", "", 429)

	// Started again on the same socket, with a new table where the tag's
	// bucket is full: 3 served, then refused, and decided in process.
	harness.RunDaemon(t, d.Sock, nil, "-config", path)
	shared = count("decided_shared")
	awaitStatus(t, a, hc, "/", 429, "the restarted daemon to refuse")
	a.Expect(t, hc, "/", "", 429, 429)
	if n := count("decided_shared"); n < shared+3 {
		t.Errorf("decided_shared = %d after the restart, want at least %d: not attached again", n, shared+3)
	}
	log, err := os.ReadFile(a.ErrLog)
	harness.Must(t, err)
	if !bytes.Contains(log, []byte("DT00033")) {
		t.Errorf("the error log does not have DT00033 (attached again):\n%s", log)
	}
}

// awaitStatus fetches path until it answers status, for at most 10 s.
func awaitStatus(t *testing.T, a *harness.ApacheServer, hc *http.Client, path string, status int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, _, _ := a.Fetch(t, hc, path, ""); got == status {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(a.ErrLog)
			t.Fatalf("waited 10 s for %s:\n%s", what, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestModApacheSymbols: the module built as shipped (with its version
// script) exports the module record Apache looks up and nothing else, so
// libdthrottle's dt_* functions compiled into it cannot clash with or
// interpose on another copy in Apache's process.
func TestModApacheSymbols(t *testing.T) {
	f, err := elf.Open(harness.BuildModDthrottle(t))
	harness.Must(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	harness.Must(t, err)
	var defined []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && s.Name != "" {
			defined = append(defined, s.Name)
		}
	}
	if fmt.Sprint(defined) != "[dthrottle_module]" {
		t.Errorf("mod_dthrottle.so exports %v, want [dthrottle_module] only", defined)
	}
}
