package apache

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// modConfig is the server configuration of the tests: throttle by client
// address; /free not throttled; /h by the X-Client header under the
// prefix "h:"; /p by the decoded path, where %0a becomes a newline.
const modConfig = `
DThrottle On
DThrottleSocket %s
DThrottleTimeout 2s
DThrottleRetryAfter 7
<Location /free>
	DThrottle Off
</Location>
<Location /h>
	DThrottleTag %%{HTTP:X-Client}
	DThrottlePrefix h:
</Location>
<Location /p>
	DThrottleTag %%{REQUEST_URI}
</Location>
`

// TestModApache runs a real Apache (event MPM) with mod_dthrottle in
// front of a real dthrottled at burst 3, which shares its table (the
// default) or not: the answers are the same, and the counters say who
// decided. Shared, a tag's first query is asked (the daemon inserts the
// tag) and the rest are decided in Apache's children; the daemon counts
// those decisions too (modapache_shared_test.go, TestModApacheSharedCounts).
func TestModApache(t *testing.T) {
	for _, tc := range []struct {
		name, listen  string
		asked, shared string
		log           string // a line each child logs at info
	}{
		{"shared", "", "3", "6", ""},
		{"socket", "share_table = false\n", "9", "0", "DT00031"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := harness.SharedDaemon(t, `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
`+tc.listen+`[limit]
rate = 0.001
burst = 3
`)
			a := harness.StartModApache(t, "event", fmt.Sprintf(modConfig, d.Sock))
			modBasics(t, a)
			got := a.Counters(t, &http.Client{Timeout: 10 * time.Second})
			want := map[string]string{"checked": "14", "asked": tc.asked, "decided_shared": tc.shared,
				"served": "12", "refused": "2", "failed_open": "0", "failed_closed": "0",
				"backed_off": "0", "bad_tag": "0", "no_tag": "5"}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("counter %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if tc.log != "" {
				log, err := os.ReadFile(a.ErrLog)
				harness.Must(t, err)
				if !bytes.Contains(log, []byte(tc.log)) {
					t.Errorf("the error log does not have %s:\n%s", tc.log, log)
				}
			}
		})
	}
}

// modBasics sends modConfig's requests of TestModApache: 14 checked (5 of
// them without a tag), 12 served, 2 refused.
func modBasics(t *testing.T, a *harness.ApacheServer) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	// "/" is answered through mod_dir's subrequest for index.html, and the
	// refusal through the ErrorDocument's internal redirect: neither asks
	// again, or the second request would already be refused.
	a.Expect(t, hc, "/", "", 200, 200, 200)
	status, retry, body := a.Fetch(t, hc, "/", "")
	if status != 429 || retry != "7" || body != "slow down\n" {
		t.Fatalf("4th request: status %d, Retry-After %q, body %q; want 429, \"7\", the ErrorDocument", status, retry, body)
	}
	a.Expect(t, hc, "/free/", "", 200, 200, 200, 200, 200)

	// A tag from a header: each client its own bucket; no header, no tag:
	// not throttled.
	a.Expect(t, hc, "/h/", "a", 200, 200, 200, 429)
	a.Expect(t, hc, "/h/", "b", 200)
	a.Expect(t, hc, "/h/", "", 200, 200, 200, 200, 200)
}

// TestModApacheInjection: a tag that would carry a second query line
// (a newline decoded from %0a in the path, raw bytes in a header) is never
// sent, and the replies stay in step.
func TestModApacheInjection(t *testing.T) {
	d, _ := harness.SharedDaemon(t, `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
`)
	a := harness.StartModApache(t, "event", fmt.Sprintf(modConfig, d.Sock))
	hc := &http.Client{Timeout: 10 * time.Second}

	// Tags "/p/x\ninj" and "/p/y\rinj": refused (DThrottleBadTag deny),
	// never sent.
	a.Expect(t, hc, "/p/x%0ainj", "", 429, 429)
	a.Expect(t, hc, "/p/y%0dinj", "", 429)
	// Raw bytes and a folded header line: Apache refuses them or keeps
	// them on one line; whatever it answers, nothing reaches the daemon
	// but whole tags.
	for _, req := range []string{
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: c\x01\xff\xfe\r\nConnection: close\r\n\r\n",
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: e\r\n inj\r\nConnection: close\r\n\r\n",
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: f\ninj\r\nConnection: close\r\n\r\n",
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: g\x00inj\r\nConnection: close\r\n\r\n",
	} {
		if line := harness.RawRequest(t, a, req); !strings.HasPrefix(line, "HTTP/1.1 ") {
			t.Errorf("request %q: answered %q", req, line)
		}
	}
	// In step: a fresh client gets exactly its burst; had a reply been
	// left over, a query would read its neighbour's.
	a.Expect(t, hc, "/h/", "fresh", 200, 200, 200, 429, 429)
	// The daemon never saw "inj" or "h:inj" alone: both buckets are full.
	if got := harness.AskDaemon(t, d.Sock, "inj", "inj", "inj", "inj", "h:inj", "h:inj", "h:inj", "h:inj"); got != "OK\nOK\nOK\nNO\nOK\nOK\nOK\nNO\n" {
		t.Errorf("the daemon's buckets for inj and h:inj: %q; an injected line reached it", got)
	}
	if c := a.Counters(t, hc); c["bad_tag"] != "3" {
		t.Errorf("bad_tag = %q, want 3 (all: %v)", c["bad_tag"], c)
	}
	log, err := os.ReadFile(a.ErrLog)
	harness.Must(t, err)
	// Logged once per process: event runs two or three of them.
	if n := bytes.Count(log, []byte("DT00002")); n < 1 || n > 3 {
		t.Errorf("the bad tag was logged %d times, want once per process:\n%s", n, log)
	}
}

// TestModApacheOutage: with dthrottled frozen, every request is served
// at once after the first timeout (fail open, backoff), or refused under
// DThrottleFail closed; with it stopped, served; restarted, throttling
// resumes without touching Apache. This is the socket's outage (the
// daemon shares no table, so every query is asked, with its timeout and
// backoff); the shared table's is TestModApacheSharedOutage.
func TestModApacheOutage(t *testing.T) {
	const config = `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
share_table = false
[limit]
rate = 0.001
burst = 3
`
	d, path := harness.SharedDaemon(t, config)
	const timeout = 300 * time.Millisecond
	a := harness.StartModApache(t, "event", fmt.Sprintf(`
DThrottle On
DThrottleSocket %s
DThrottleTimeout %dms
DThrottleBackoff 3s 3s
<Location /closed>
	DThrottleFail closed
</Location>
`, d.Sock, timeout.Milliseconds()))
	// One connection, so one Apache child and its backoff serve the test.
	hc := &http.Client{Timeout: 10 * time.Second}
	a.Expect(t, hc, "/", "", 200)

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { d.Cmd.Process.Signal(syscall.SIGCONT) })
	start := time.Now()
	a.Expect(t, hc, "/", "", 200, 200, 200, 200, 200, 200, 200, 200, 200, 200,
		200, 200, 200, 200, 200, 200, 200, 200, 200, 200)
	// Without the backoff the 20 would wait 20 timeouts: 6 s.
	if took := time.Since(start); took > 10*timeout {
		t.Errorf("20 requests with dthrottled frozen took %v: more than 10 query timeouts (%v)", took, timeout)
	}
	a.Expect(t, hc, "/closed", "", 429)
	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))

	d.Stop(t)
	a.Expect(t, hc, "/", "", 200, 200, 200, 200, 200)

	// Started again on the same socket: the backoff (3 s) ends, a probe
	// finds it, and requests are counted again: the burst runs out.
	harness.RunDaemon(t, d.Sock, nil, "-config", path)
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, _, _ := a.Fetch(t, hc, "/", "")
		if status == 429 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(a.ErrLog)
			t.Fatalf("dthrottled restarted 20 s ago, and Apache still serves everything:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, err := os.ReadFile(a.ErrLog)
	harness.Must(t, err)
	for _, want := range []string{"DT00011", "DT00010"} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("the error log does not have %s (outage, recovery):\n%s", want, log)
		}
	}
}

// TestModApacheMPMs runs mod_dthrottle under each MPM, over TCP (asking
// every query) and over the Unix socket (deciding from the shared table),
// with concurrent requests of a spent tag and of fresh tags: every spent
// one is refused and every fresh one served, so no reply went to another
// query. Over the socket, the spent tag, which the daemon already tracks,
// is decided in the children, and each fresh tag asked once.
func TestModApacheMPMs(t *testing.T) {
	for _, mpm := range []string{"event", "worker", "prefork"} {
		for _, via := range []string{"tcp", "unix"} {
			t.Run(mpm+"/"+via, func(t *testing.T) { modMPM(t, mpm, via) })
		}
	}
}

func modMPM(t *testing.T, mpm, via string) {
	port := harness.FreePort(t)
	d, _ := harness.SharedDaemon(t, fmt.Sprintf(`
[listen]
unix = "%%SOCK%%"
unix_mode = "0666"
tcp = "127.0.0.1:%d"
[limit]
rate = 0.001
burst = 3
`, port))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if via == "unix" {
		addr = d.Sock
	}
	a := harness.StartModApache(t, mpm, fmt.Sprintf(`
DThrottle On
DThrottleSocket %s
DThrottleTimeout 5s
DThrottleTag %%{HTTP:X-Client}
`, addr))
	harness.AskDaemon(t, d.Sock, "spent", "spent", "spent")
	const n = 48
	statuses := make([]int, n)
	var wg sync.WaitGroup
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := "spent"
			if i%2 == 1 {
				client = fmt.Sprintf("fresh%d", i)
			}
			req, _ := http.NewRequest("GET", a.URL+"/", nil)
			req.Header.Set("X-Client", client)
			resp, err := hc.Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, s := range statuses {
		want := 429
		if i%2 == 1 {
			want = 200
		}
		if s != want {
			log, _ := os.ReadFile(a.ErrLog)
			t.Fatalf("request %d: status %d, want %d (all: %v)\nerror log:\n%s", i, s, want, statuses, log)
		}
	}
	want := map[string]string{"asked": "48", "decided_shared": "0"}
	if via == "unix" {
		want = map[string]string{"asked": "24", "decided_shared": "24"}
	}
	got := a.Counters(t, hc)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("counter %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// TestModApacheShippedConf checks that contrib/apache/mod_dthrottle.conf,
// as shipped and with its examples uncommented, is a valid Apache
// configuration with the module loaded (apache2 -t).
func TestModApacheShippedConf(t *testing.T) {
	apache := harness.RequireApache(t)
	mod := harness.BuildModDthrottle(t)
	shipped, err := os.ReadFile("../../contrib/apache/mod_dthrottle.conf")
	harness.Must(t, err)
	var examples strings.Builder
	inExamples := false
	for _, line := range strings.SplitAfter(string(shipped), "\n") {
		if strings.Contains(line, "# Examples:") {
			inExamples = true
		} else if inExamples {
			if rest, ok := strings.CutPrefix(line, "\t# "); ok {
				line = "\t" + rest
			} else if rest, ok := strings.CutPrefix(line, "\t#\t"); ok {
				line = "\t" + rest
			}
		}
		examples.WriteString(line)
	}
	if !inExamples || examples.String() == string(shipped) {
		t.Fatal("mod_dthrottle.conf has no \"# Examples:\" block to uncomment")
	}
	dir := t.TempDir()
	for name, body := range map[string]string{"shipped.conf": string(shipped), "examples.conf": examples.String()} {
		inc := filepath.Join(dir, name)
		harness.Must(t, os.WriteFile(inc, []byte(body), 0o644))
		conf := filepath.Join(dir, "httpd-"+name)
		harness.Must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`ServerRoot %[1]s
ServerName 127.0.0.1
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule authz_host_module /usr/lib/apache2/modules/mod_authz_host.so
LoadModule dthrottle_module %[2]s
Listen 127.0.0.1:%[3]d
PidFile %[1]s/httpd.pid
ErrorLog %[1]s/error.log
DefaultRuntimeDir %[1]s
Include %[4]s
`, dir, mod, harness.FreePort(t), inc)), 0o644))
		out, err := exec.Command(apache, "-t", "-f", conf).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Syntax OK") {
			t.Errorf("apache2 -t with %s: %v\n%s\n%s", name, err, out, body)
		}
	}
}
