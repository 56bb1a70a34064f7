package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// nginxDevSource is where Debian's nginx-dev puts nginx's sources and
// configure flags, where contrib/nginx/module/Makefile looks by default.
const nginxDevSource = "/usr/share/nginx/src"

// RequireNginxModule returns nginx's path, or skips (fails under CI=true)
// without nginx, the Lua module the tests compute their tags with,
// nginx-dev's sources, a C compiler, make or bash.
func RequireNginxModule(t *testing.T) string {
	t.Helper()
	nginx := RequireNginxLua(t)
	for _, tool := range []string{"cc", "make", "bash"} {
		RequireTool(t, tool)
	}
	if _, err := os.Stat(filepath.Join(nginxDevSource, "configure")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (nginx-dev) is required under CI=true: %v", nginxDevSource, err)
		}
		t.Skipf("nginx-dev not installed: %v", err)
	}
	return nginx
}

// copyNginxModuleTo copies the module's sources into
// dst/contrib/nginx/module and libdthrottle's into dst/libdthrottle, where
// the module's config finds them (../../../libdthrottle), and returns
// dst/contrib/nginx/module.
func copyNginxModuleTo(dst string) (string, error) {
	dir := filepath.Join(dst, "contrib", "nginx", "module")
	if err := copySources(Path("contrib/nginx/module"), dir, "config", "Makefile", ".c", ".h", ".map"); err != nil {
		return "", err
	}
	return dir, CopyLibdthrottleTo(filepath.Join(dst, "libdthrottle"))
}

// BuildNginxModule builds ngx_http_dthrottle_module.so once for every
// test package, in a copy so that the tree stays clean, and returns the
// directory that holds it (and its build).
func BuildNginxModule(t *testing.T) string {
	t.Helper()
	RequireNginxModule(t)
	return filepath.Join(Build(t, "nginx-module", func(dir string) error {
		dir, err := copyNginxModuleTo(dir)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", "-s")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make ngx_http_dthrottle_module.so: %v\n%s", err, out)
		}
		return nil
	}), "contrib", "nginx", "module")
}

// ngxTagLines replace the shipped tag, the client's address: the tag is
// the X-Tag header, else the query's tag argument, each percent-decoded
// (so that a tag may hold any byte), else the client's address, as
// shipped. X-DThrottle says what decided each request.
const ngxTagLines = `        set_by_lua_block $dthrottle_tag {
            local h = ngx.var.http_x_tag
            if h then return ngx.unescape_uri(h) end
            local a = ngx.var.arg_tag
            if a then return ngx.unescape_uri(a) end
            return ngx.var.remote_addr
        }
        dthrottle $dthrottle_tag;
        add_header X-DThrottle $dthrottle_status always;`

// NgxModuleServer is an nginx started by a test with the module.
type NgxModuleServer struct {
	cmd *exec.Cmd // the master
	URL string    // the site's /hello.txt
	Log string    // nginx's error log
}

// StartNginxModule runs nginx, one worker, with
// contrib/nginx/dthrottle-module.conf re-pointed at sock, its stats
// location enabled, the tag as ngxTagLines takes it, a timeout of 2 s,
// and the replacements in more made after those; the module is loaded in
// the main context. It returns once the worker answers (it attached, if
// it could, before it served).
func StartNginxModule(t *testing.T, sock string, more ...string) *NgxModuleServer {
	t.Helper()
	nginx := RequireNginxModule(t)
	mod := filepath.Join(BuildNginxModule(t), "ngx_http_dthrottle_module.so")
	// nginx's workers run as another user (nobody) when the test is root.
	for p := filepath.Dir(sock); p != filepath.Dir(p) && strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
		Must(t, os.Chmod(p, 0o755))
	}
	dir, www := ProxySite(t)
	// A directory's index is an internal redirect, which runs the
	// preaccess phase again: it must not spend a second token.
	Must(t, os.WriteFile(filepath.Join(www, "index.html"), []byte("index\n"), 0o644))
	port := FreePort(t)
	replace := append([]string{
		"listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"root /var/www/html;", "root " + www + ";",
		"/run/dthrottle/dthrottle.sock", sock,
		// A long timeout: on a loaded machine a slow answer must not turn
		// into a fail-open one. An absent daemon still fails at once.
		"# dthrottle_timeout 50ms;", "dthrottle_timeout 2s;",
		"    # location = /dthrottle-stats {", "    location = /dthrottle-stats {",
		"    #     allow 127.0.0.1;", "        allow 127.0.0.1;",
		"    #     deny all;", "        deny all;",
		"    #     dthrottle_stats;", "        dthrottle_stats;",
		"    # }", "    }",
		"        dthrottle $remote_addr;", ngxTagLines,
	}, more...)
	site := ContribConfig(t, "nginx/dthrottle-module.conf", replace...)
	Must(t, os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o644))
	var load strings.Builder
	for _, m := range append(nginxLuaModules, mod) {
		fmt.Fprintf(&load, "load_module %s;\n", m)
	}
	WriteNginxConf(t, dir, load.String(), "notice", "")
	s := &NgxModuleServer{
		cmd: exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;"),
		URL: fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port),
		Log: filepath.Join(dir, "error.log"),
	}
	RunProxy(t, s.cmd, port, filepath.Join(dir, "stderr.log"))
	// The port accepts once the master listens; a request answered means
	// a worker runs, and has attached.
	if res := SharedGet(t, s.URL+"?tag=", "", s.Log); res.StatusCode != http.StatusOK {
		t.Fatalf("an empty tag: %s, want 200", res.Status)
	}
	return s
}

// Output returns nginx's error log.
func (s *NgxModuleServer) Output() string {
	b, _ := os.ReadFile(s.Log)
	return string(b)
}

// Stats returns what dthrottle_stats answers: the worker's counters.
func (s *NgxModuleServer) Stats(t *testing.T) string {
	t.Helper()
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get(strings.TrimSuffix(s.URL, "hello.txt") + "dthrottle-stats")
	if err != nil {
		t.Fatalf("GET /dthrottle-stats: %v\n%s", err, s.Output())
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	Must(t, err)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /dthrottle-stats: %s %s", res.Status, b)
	}
	return strings.TrimSpace(string(b))
}

// StatsField returns the counter name of stats.
func (s *NgxModuleServer) StatsField(t *testing.T, name string) int {
	t.Helper()
	st := s.Stats(t)
	for _, f := range strings.Fields(st) {
		if k, v, _ := strings.Cut(f, "="); k == name {
			n, err := strconv.Atoi(v)
			Must(t, err)
			return n
		}
	}
	t.Fatalf("no %s in dthrottle_stats: %s", name, st)
	return 0
}

// Worker returns the pid of the master's one worker, polling until there
// is one (and only one: a worker killed is being replaced).
func (s *NgxModuleServer) Worker(t *testing.T) int {
	t.Helper()
	var pids []int
	testkit.WaitFor(t, 10*time.Second, "nginx to run one worker", func() bool {
		pids = childPIDs(t, s.cmd.Process.Pid)
		return len(pids) == 1
	})
	return pids[0]
}

// childPIDs returns the pids of ppid's living children.
func childPIDs(t *testing.T, ppid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	Must(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ")".
		st := string(b)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) && f[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// NgxGet fetches u for tag (as X-Tag, percent-encoded as hsEscape does)
// and returns the response, its body read, and how long it took.
func NgxGet(t *testing.T, s *NgxModuleServer, u, tag string) (*http.Response, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := HSGet(u, tag, true)
	if err != nil {
		t.Fatalf("GET %s (tag %q): %v\n%s", u, tag, err, s.Output())
	}
	return res, time.Since(start)
}

// NgxStatuses sends n requests for tag and returns their statuses and
// what decided each (X-DThrottle).
func NgxStatuses(t *testing.T, s *NgxModuleServer, tag string, n int) (string, string) {
	t.Helper()
	var codes, how []string
	for range n {
		res, _ := NgxGet(t, s, s.URL, tag)
		codes = append(codes, strconv.Itoa(res.StatusCode))
		how = append(how, res.Header.Get("X-DThrottle"))
	}
	return strings.Join(codes, " "), strings.Join(how, " ")
}

// ngxBadTags are tags the line protocol cannot carry, sent as the query's
// tag argument (an HTTP header cannot hold CR or LF).
var ngxBadTags = []string{
	"a\nb",                    // a newline
	"a\r",                     // a trailing CR
	"c\rd",                    // a CR inside
	strings.Repeat("x", 1025), // over 1024 bytes
	strings.Repeat("x", 2000),
}

// CheckNgxBadTags sends the empty tag and each of ngxBadTags twice. The
// empty tag must be served (EMPTY); the bad ones must get status (200 with
// dthrottle_bad_tag allow, else the refusal's, with Retry-After: 1 and no
// bucket), decided BAD, and each must count in the worker's bad. None
// may reach d, and nginx's error log must say what was done with them.
func CheckNgxBadTags(t *testing.T, s *NgxModuleServer, d *Daemon, status int) {
	t.Helper()
	socket0, decided0 := SharedCounts(t, d)
	bad0 := s.StatsField(t, "bad")
	for _, tag := range append([]string{""}, ngxBadTags...) {
		want, how := status, "BAD"
		if tag == "" {
			want, how = http.StatusOK, "EMPTY"
		}
		for range 2 {
			res := SharedGet(t, s.URL+"?tag="+url.QueryEscape(tag), "", s.Log)
			if res.StatusCode != want || res.Header.Get("X-DThrottle") != how {
				t.Fatalf("tag %q: %s, decided %q; want %d, %s\n%s", tag, res.Status, res.Header.Get("X-DThrottle"), want, how, s.Output())
			}
			retry := ""
			if want != http.StatusOK {
				retry = "1"
			}
			if got := res.Header.Get("Retry-After"); got != retry {
				t.Errorf("tag %q: %s with Retry-After %q, want %q", tag, res.Status, got, retry)
			}
			if got := res.Header.Get("RateLimit-Policy"); got != "" {
				t.Errorf("tag %q: %s with RateLimit-Policy %q: no bucket to state", tag, res.Status, got)
			}
		}
	}
	if socket, decided := SharedCounts(t, d); socket != socket0 || decided != decided0 {
		t.Errorf("bad and empty tags reached the daemon: asked %v, decided %v", socket-socket0, decided-decided0)
	}
	if got, want := s.StatsField(t, "bad")-bad0, 2*len(ngxBadTags); got != want {
		t.Errorf("bad tags counted %d, want %d", got, want)
	}
	done := "refused"
	if status == http.StatusOK {
		done = "served"
	}
	if log, want := s.Output(), "a tag with CR or LF, or over 1024 bytes, cannot be asked over the line protocol: "+done; !strings.Contains(log, want) {
		t.Errorf("nginx's error log does not say %q:\n%s", want, log)
	}
}

// StopDaemon stops d with SIGSTOP, and returns once every thread of it
// has stopped: the signal is delivered before the threads stop, and a
// thread still running would answer what the test means to go
// unanswered. It resumes d when the test ends.
func StopDaemon(t *testing.T, d *Daemon) {
	t.Helper()
	pid := d.Cmd.Process.Pid
	Must(t, d.Cmd.Process.Signal(syscall.SIGSTOP))
	resumeOnCleanup(t, d)
	testkit.WaitFor(t, 5*time.Second, "every thread of dthrottled to stop", func() bool {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				return false
			}
			// The state follows the command's closing parenthesis.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				return false
			}
		}
		return true
	})
}

// resumeOnCleanup resumes d (stopped with SIGSTOP) when the test ends, so
// that its own cleanup can stop it.
func resumeOnCleanup(t *testing.T, d *Daemon) {
	t.Cleanup(func() { d.Cmd.Process.Signal(syscall.SIGCONT) })
}
