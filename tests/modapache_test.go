package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// modSources are the files of mod_dthrottle, built with apxs.
var modSources = []string{"mod_dthrottle.c", "dthrottle_client.c", "dthrottle_target.c", "dthrottle_status.c"}

var (
	modOnce sync.Once
	modPath string
	modErr  error
)

// buildModDthrottle builds contrib/apache's module once per test binary,
// with apxs -Wall -Werror, into the directory TestMain removes, and
// returns the .so's path. Without apxs (Debian's apache2-dev) the test is
// skipped, or fails under CI=true.
func buildModDthrottle(t *testing.T) string {
	t.Helper()
	apxs := requireTool(t, "apxs")
	modOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(binary), "mod_dthrottle")
		if modErr = os.MkdirAll(dir, 0o755); modErr != nil {
			return
		}
		for _, f := range append(modSources, "dthrottle_client.h", "dthrottle_status.h") {
			b, err := os.ReadFile(filepath.Join("../contrib/apache", f))
			if err != nil {
				modErr = err
				return
			}
			if modErr = os.WriteFile(filepath.Join(dir, f), b, 0o644); modErr != nil {
				return
			}
		}
		cmd := exec.Command(apxs, append([]string{"-c", "-Wc,-Wall", "-Wc,-Werror"}, modSources...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			modErr = fmt.Errorf("apxs: %v\n%s", err, out)
			return
		}
		modPath = filepath.Join(dir, ".libs", "mod_dthrottle.so")
		_, modErr = os.Stat(modPath)
	})
	if modErr != nil {
		t.Fatal(modErr)
	}
	return modPath
}

// sharedDaemon starts dthrottled with config (%SOCK% replaced) on a socket
// that Apache's children can reach when they run as another user: in a
// directory anyone may enter, with mode 0666. It returns the daemon and
// the config's path, to start it again.
func sharedDaemon(t *testing.T, config string) (*daemon, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dthrottle-mod-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	sock := filepath.Join(dir, "d.sock")
	path := filepath.Join(dir, "dthrottle.toml")
	must(t, os.WriteFile(path, []byte(strings.ReplaceAll(config, "%SOCK%", sock)), 0o644))
	return runDaemon(t, sock, nil, "-config", path), path
}

// startModApache runs apache2 in the foreground with the given MPM
// ("event", "worker", "prefork"), mod_dthrottle and the directives in
// body, serving www/index.html ("hello"), www/h/index.html and an
// ErrorDocument for 429 at /errors/429.html.
func startModApache(t *testing.T, mpm, body string) *apacheServer {
	t.Helper()
	apache := requireApache(t)
	mod := buildModDthrottle(t)
	dir, err := os.MkdirTemp("", "dthrottle-modapache-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	www := filepath.Join(dir, "www")
	for _, d := range []string{"", "h", "free", "errors"} {
		must(t, os.Mkdir(filepath.Join(www, d), 0o755))
	}
	for path, text := range map[string]string{
		"index.html": "hello\n", "h/index.html": "h\n", "free/index.html": "free\n",
		"errors/429.html": "slow down\n",
	} {
		must(t, os.WriteFile(filepath.Join(www, path), []byte(text), 0o644))
	}

	port := freePort(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "ServerRoot %s\nServerName 127.0.0.1\n", dir)
	fmt.Fprintf(&conf, "LoadModule mpm_%[1]s_module /usr/lib/apache2/modules/mod_mpm_%[1]s.so\n", mpm)
	for _, m := range []string{"authz_core", "dir"} {
		fmt.Fprintf(&conf, "LoadModule %s_module /usr/lib/apache2/modules/mod_%[1]s.so\n", m)
	}
	fmt.Fprintf(&conf, "LoadModule dthrottle_module %s\n", mod)
	if os.Getuid() == 0 {
		u := "www-data"
		if _, err := user.Lookup(u); err != nil {
			u = "nobody"
		}
		fmt.Fprintf(&conf, "User %s\nGroup #%s\n", u, lookupGID(t, u))
	}
	fmt.Fprintf(&conf, `Listen 127.0.0.1:%d
PidFile %[2]s/httpd.pid
ErrorLog %[2]s/error.log
LogLevel warn dthrottle:info
DefaultRuntimeDir %[2]s
Mutex file:%[2]s default
DocumentRoot %[3]s
DirectoryIndex index.html
ErrorDocument 429 /errors/429.html
<Location /dthrottle-status>
	DThrottle Off
	SetHandler dthrottle-status
</Location>
%[4]s
`, port, dir, www, body)
	confPath := filepath.Join(dir, "httpd.conf")
	must(t, os.WriteFile(confPath, []byte(conf.String()), 0o644))
	return runApache(t, apache, confPath, port, filepath.Join(dir, "error.log"))
}

// runApache starts apache2 -f conf in the foreground, stops it when the
// test ends, and waits until it listens on port.
func runApache(t *testing.T, apache, conf string, port int, errLog string) *apacheServer {
	t.Helper()
	cmd := exec.Command(apache, "-f", conf, "-DFOREGROUND")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	a := &apacheServer{url: fmt.Sprintf("http://127.0.0.1:%d", port), errLog: errLog}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("apache2 did not stop within 10s of SIGTERM")
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return a
		}
		select {
		case err := <-done:
			log, _ := os.ReadFile(errLog)
			cf, _ := os.ReadFile(conf)
			t.Fatalf("apache2 exited: %v\n%s%s\nconfig:\n%s", err, out.String(), log, cf)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("apache2 not listening after 10s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fetch GETs path with the header X-Client: client (none if ""), and
// returns the status, Retry-After and body.
func (a *apacheServer) fetch(t *testing.T, hc *http.Client, path, client string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", a.url+path, nil)
	must(t, err)
	if client != "" {
		req.Header.Set("X-Client", client)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
}

// expect fetches path once per wanted status, failing with the error log.
func (a *apacheServer) expect(t *testing.T, hc *http.Client, path, client string, want ...int) {
	t.Helper()
	for i, w := range want {
		if got, _, body := a.fetch(t, hc, path, client); got != w {
			log, _ := os.ReadFile(a.errLog)
			t.Fatalf("%s (X-Client %q) request %d: status %d, want %d\n%s\nerror log:\n%s", path, client, i+1, got, w, body, log)
		}
	}
}

// counters reads the dthrottle-status page into a map.
func (a *apacheServer) counters(t *testing.T, hc *http.Client) map[string]string {
	t.Helper()
	status, _, body := a.fetch(t, hc, "/dthrottle-status", "")
	if status != 200 {
		t.Fatalf("/dthrottle-status: %d\n%s", status, body)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("/dthrottle-status: line %q is not \"name: value\"", line)
		}
		m[k] = v
	}
	return m
}

// rawRequest sends req as is on a new connection and returns the status
// line of the answer ("" if Apache closed without one).
func rawRequest(t *testing.T, a *apacheServer, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, req)
	must(t, err)
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// askDaemon sends tags straight to dthrottled and returns its replies.
func askDaemon(t *testing.T, sock string, tags ...string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, strings.Join(tags, "\n")+"\n")
	must(t, err)
	buf := make([]byte, 3*len(tags))
	_, err = io.ReadFull(c, buf)
	must(t, err)
	return string(buf)
}

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
// front of a real dthrottled at burst 3.
func TestModApache(t *testing.T) {
	d, _ := sharedDaemon(t, `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
`)
	a := startModApache(t, "event", fmt.Sprintf(modConfig, d.sock))
	hc := &http.Client{Timeout: 10 * time.Second}

	// "/" is answered through mod_dir's subrequest for index.html, and the
	// refusal through the ErrorDocument's internal redirect: neither asks
	// again, or the second request would already be refused.
	a.expect(t, hc, "/", "", 200, 200, 200)
	status, retry, body := a.fetch(t, hc, "/", "")
	if status != 429 || retry != "7" || body != "slow down\n" {
		t.Fatalf("4th request: status %d, Retry-After %q, body %q; want 429, \"7\", the ErrorDocument", status, retry, body)
	}
	a.expect(t, hc, "/free/", "", 200, 200, 200, 200, 200)

	// A tag from a header: each client its own bucket; no header, no tag:
	// not throttled.
	a.expect(t, hc, "/h/", "a", 200, 200, 200, 429)
	a.expect(t, hc, "/h/", "b", 200)
	a.expect(t, hc, "/h/", "", 200, 200, 200, 200, 200)

	got := a.counters(t, hc)
	want := map[string]string{"checked": "14", "asked": "9", "served": "12", "refused": "2",
		"failed_open": "0", "failed_closed": "0", "backed_off": "0", "bad_tag": "0", "no_tag": "5"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("counter %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// TestModApacheInjection: a tag that would carry a second query line
// (a newline decoded from %0a in the path, raw bytes in a header) is never
// sent, and the replies stay in step.
func TestModApacheInjection(t *testing.T) {
	d, _ := sharedDaemon(t, `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
`)
	a := startModApache(t, "event", fmt.Sprintf(modConfig, d.sock))
	hc := &http.Client{Timeout: 10 * time.Second}

	// Tags "/p/x\ninj" and "/p/y\rinj": refused (DThrottleBadTag deny),
	// never sent.
	a.expect(t, hc, "/p/x%0ainj", "", 429, 429)
	a.expect(t, hc, "/p/y%0dinj", "", 429)
	// Raw bytes and a folded header line: Apache refuses them or keeps
	// them on one line; whatever it answers, nothing reaches the daemon
	// but whole tags.
	for _, req := range []string{
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: c\x01\xff\xfe\r\nConnection: close\r\n\r\n",
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: e\r\n inj\r\nConnection: close\r\n\r\n",
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: f\ninj\r\nConnection: close\r\n\r\n",
		"GET /h/ HTTP/1.1\r\nHost: x\r\nX-Client: g\x00inj\r\nConnection: close\r\n\r\n",
	} {
		if line := rawRequest(t, a, req); !strings.HasPrefix(line, "HTTP/1.1 ") {
			t.Errorf("request %q: answered %q", req, line)
		}
	}
	// In step: a fresh client gets exactly its burst; had a reply been
	// left over, a query would read its neighbour's.
	a.expect(t, hc, "/h/", "fresh", 200, 200, 200, 429, 429)
	// The daemon never saw "inj" or "h:inj" alone: both buckets are full.
	if got := askDaemon(t, d.sock, "inj", "inj", "inj", "inj", "h:inj", "h:inj", "h:inj", "h:inj"); got != "OK\nOK\nOK\nNO\nOK\nOK\nOK\nNO\n" {
		t.Errorf("the daemon's buckets for inj and h:inj: %q; an injected line reached it", got)
	}
	if c := a.counters(t, hc); c["bad_tag"] != "3" {
		t.Errorf("bad_tag = %q, want 3 (all: %v)", c["bad_tag"], c)
	}
	log, err := os.ReadFile(a.errLog)
	must(t, err)
	// Logged once per process: event runs two or three of them.
	if n := bytes.Count(log, []byte("DT00002")); n < 1 || n > 3 {
		t.Errorf("the bad tag was logged %d times, want once per process:\n%s", n, log)
	}
}

// TestModApacheOutage: with dthrottled frozen, every request is served
// at once after the first timeout (fail open, backoff), or refused under
// DThrottleFail closed; with it stopped, served; restarted, throttling
// resumes without touching Apache.
func TestModApacheOutage(t *testing.T) {
	const config = `
[listen]
unix = "%SOCK%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
`
	d, path := sharedDaemon(t, config)
	const timeout = 300 * time.Millisecond
	a := startModApache(t, "event", fmt.Sprintf(`
DThrottle On
DThrottleSocket %s
DThrottleTimeout %dms
DThrottleBackoff 3s 3s
<Location /closed>
	DThrottleFail closed
</Location>
`, d.sock, timeout.Milliseconds()))
	// One connection, so one Apache child and its backoff serve the test.
	hc := &http.Client{Timeout: 10 * time.Second}
	a.expect(t, hc, "/", "", 200)

	must(t, d.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { d.cmd.Process.Signal(syscall.SIGCONT) })
	start := time.Now()
	a.expect(t, hc, "/", "", 200, 200, 200, 200, 200, 200, 200, 200, 200, 200,
		200, 200, 200, 200, 200, 200, 200, 200, 200, 200)
	// Without the backoff the 20 would wait 20 timeouts: 6 s.
	if took := time.Since(start); took > 10*timeout {
		t.Errorf("20 requests with dthrottled frozen took %v: more than 10 query timeouts (%v)", took, timeout)
	}
	a.expect(t, hc, "/closed", "", 429)
	must(t, d.cmd.Process.Signal(syscall.SIGCONT))

	d.stop(t)
	a.expect(t, hc, "/", "", 200, 200, 200, 200, 200)

	// Started again on the same socket: the backoff (3 s) ends, a probe
	// finds it, and requests are counted again: the burst runs out.
	runDaemon(t, d.sock, nil, "-config", path)
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, _, _ := a.fetch(t, hc, "/", "")
		if status == 429 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(a.errLog)
			t.Fatalf("dthrottled restarted 20 s ago, and Apache still serves everything:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, err := os.ReadFile(a.errLog)
	must(t, err)
	for _, want := range []string{"DT00011", "DT00010"} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("the error log does not have %s (outage, recovery):\n%s", want, log)
		}
	}
}

// TestModApacheMPMs runs mod_dthrottle under each MPM, over TCP, with
// concurrent requests of a spent tag and of fresh tags: every spent one is
// refused and every fresh one served, so no reply went to another query.
func TestModApacheMPMs(t *testing.T) {
	for _, mpm := range []string{"event", "worker", "prefork"} {
		t.Run(mpm, func(t *testing.T) {
			port := freePort(t)
			d, _ := sharedDaemon(t, fmt.Sprintf(`
[listen]
unix = "%%SOCK%%"
unix_mode = "0666"
tcp = "127.0.0.1:%d"
[limit]
rate = 0.001
burst = 3
`, port))
			a := startModApache(t, mpm, fmt.Sprintf(`
DThrottle On
DThrottleSocket 127.0.0.1:%d
DThrottleTimeout 5s
DThrottleTag %%{HTTP:X-Client}
`, port))
			askDaemon(t, d.sock, "spent", "spent", "spent")
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
					req, _ := http.NewRequest("GET", a.url+"/", nil)
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
					log, _ := os.ReadFile(a.errLog)
					t.Fatalf("request %d: status %d, want %d (all: %v)\nerror log:\n%s", i, s, want, statuses, log)
				}
			}
		})
	}
}

// TestModApacheShippedConf checks that contrib/apache/mod_dthrottle.conf,
// as shipped and with its examples uncommented, is a valid Apache
// configuration with the module loaded (apache2 -t).
func TestModApacheShippedConf(t *testing.T) {
	apache := requireApache(t)
	mod := buildModDthrottle(t)
	shipped, err := os.ReadFile("../contrib/apache/mod_dthrottle.conf")
	must(t, err)
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
		must(t, os.WriteFile(inc, []byte(body), 0o644))
		conf := filepath.Join(dir, "httpd-"+name)
		must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`ServerRoot %[1]s
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
`, dir, mod, freePort(t), inc)), 0o644))
		out, err := exec.Command(apache, "-t", "-f", conf).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Syntax OK") {
			t.Errorf("apache2 -t with %s: %v\n%s\n%s", name, err, out, body)
		}
	}
}
