package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const ProxyDaemonConfig = `[listen]
unix = "%%SOCK%%"
unix_mode = "0666"
[limit]
rate = 0.001
burst = 3
[http]
listen = "127.0.0.1:0"
refuse_status = %d
`

// ProxySite makes a world-readable directory (a proxy's workers may run
// as another user) holding www/hello.txt.
func ProxySite(t *testing.T) (dir, www string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dthrottle-proxy-")
	Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	Must(t, os.Chmod(dir, 0o755))
	www = filepath.Join(dir, "www")
	Must(t, os.Mkdir(www, 0o755))
	Must(t, os.WriteFile(filepath.Join(www, "hello.txt"), []byte("hello\n"), 0o644))
	return dir, www
}

// ContribConfig reads a file of contrib/ and makes the replacements, each
// of which must be found: the test runs the shipped file, only re-pointed.
func ContribConfig(t *testing.T, path string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Path("contrib"), path))
	Must(t, err)
	s := string(b)
	for i := 0; i < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("contrib/%s has no %q to replace", path, replace[i])
		}
		s = strings.ReplaceAll(s, replace[i], replace[i+1])
	}
	return s
}

// RunProxy starts cmd, stops it when the test ends, and waits until port
// accepts connections.
func RunProxy(t *testing.T, cmd *exec.Cmd, port int, log string) {
	t.Helper()
	out, err := os.Create(log)
	Must(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		out.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(log)
			t.Fatalf("%s exited before listening: %v\n%s", cmd.Path, err, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log)
			t.Fatalf("%s not listening on %d after 10s\n%s", cmd.Path, port, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CheckThrottled asks url four times: three are served, the fourth refused
// with 429, Retry-After and the RateLimit headers. Then it stops d, and
// every request is served, without waiting on a timeout each.
func CheckThrottled(t *testing.T, url string, d *Daemon, log string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func() *http.Response {
		t.Helper()
		res, err := hc.Get(url)
		if err != nil {
			b, _ := os.ReadFile(log)
			t.Fatalf("GET %s: %v\n%s", url, err, b)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	for i := 1; i <= 3; i++ {
		if res := get(); res.StatusCode != http.StatusOK {
			b, _ := os.ReadFile(log)
			t.Fatalf("request %d: %s, want 200 OK\n%s", i, res.Status, b)
		}
	}
	res := get()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 4: %s, want 429", res.Status)
	}
	for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
		if res.Header.Get(h) == "" {
			t.Errorf("the 429 has no %s header: %v", h, res.Header)
		}
	}
	if got := res.Header.Get("RateLimit-Policy"); !strings.Contains(got, "q=3") {
		t.Errorf("RateLimit-Policy %q, want the burst of 3 (q=3)", got)
	}

	d.Stop(t)
	start := time.Now()
	const n = 20
	for i := range n {
		if res := get(); res.StatusCode != http.StatusOK {
			b, _ := os.ReadFile(log)
			t.Fatalf("with dthrottled stopped, request %d: %s, want 200 (fail open)\n%s", i+1, res.Status, b)
		}
	}
	// A request waiting out a timeout would take 50 ms or more; twenty of
	// them, a second. Served at once, they take a few milliseconds.
	if took := time.Since(start); took > time.Second {
		t.Errorf("with dthrottled stopped, %d requests took %v: not served at once", n, took)
	}
}

// GetTagged fetches url with X-Tag: tag (none when empty) and returns the
// status.
func GetTagged(t *testing.T, hc *http.Client, url, tag string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if tag != "" {
		req.Header.Set("X-Tag", tag)
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// CheckConcurrent spends tag "spent" and then sends 24 requests for it
// and 24 for fresh tags at once: each must get its own answer, 429 for
// the spent tag and 200 for the others, however the proxy batches or
// shares its connections.
func CheckConcurrent(t *testing.T, url, log string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := range 4 {
		code, err := GetTagged(t, hc, url, "spent")
		if err != nil || code != map[bool]int{true: 200, false: 429}[i < 3] {
			b, _ := os.ReadFile(log)
			t.Fatalf("spending tag spent, request %d: %d %v\n%s", i+1, code, err, b)
		}
	}
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan string, 2*n)
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag, want := "spent", 429
			if i%2 == 1 {
				tag, want = fmt.Sprintf("fresh-%d", i), 200
			}
			code, err := GetTagged(t, hc, url, tag)
			if err != nil || code != want {
				errs <- fmt.Sprintf("tag %s: %d %v, want %d", tag, code, err, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		b, _ := os.ReadFile(log)
		t.Fatalf("concurrent requests: %s\nlog:\n%s", e, b)
	}
}

// nginxLuaModules are Debian's libnginx-mod-http-lua, loaded by full path.
var nginxLuaModules = []string{"/usr/lib/nginx/modules/ndk_http_module.so", "/usr/lib/nginx/modules/ngx_http_lua_module.so"}

// WriteNginxConf writes dir/nginx.conf for an nginx run by a test: head
// first (load_module lines), one worker, its error log at level (empty:
// nginx's default) and its pid in dir, its temporary files in dir/tmp,
// and http { body } (empty: the site in dir/site.conf). It returns the
// file's path.
func WriteNginxConf(t *testing.T, dir, head, level, body string) string {
	t.Helper()
	tmp := filepath.Join(dir, "tmp")
	Must(t, os.Mkdir(tmp, 0o777))
	if level != "" {
		level = " " + level
	}
	if body == "" {
		body = "    include " + dir + "/site.conf;\n"
	}
	conf := fmt.Sprintf(`%[3]sworker_processes 1;
error_log %[1]s/error.log%[4]s;
pid %[1]s/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
%[5]s}
`, dir, tmp, head, level, body)
	path := filepath.Join(dir, "nginx.conf")
	Must(t, os.WriteFile(path, []byte(conf), 0o644))
	return path
}
