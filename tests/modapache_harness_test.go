package tests

// Helpers of the mod_dthrottle tests (modapache_test.go): building the
// module, a daemon whose socket Apache's children can reach, an Apache
// with the module, and requests to both.

import (
	"bufio"
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

// modSources are the files apxs compiles into mod_dthrottle, in
// contrib/apache: its own, and libdthrottle as one file.
var modSources = []string{"mod_dthrottle.c", "dthrottle_client.c", "dthrottle_target.c",
	"dthrottle_status.c", "dthrottle_shared.c", "../../libdthrottle/libdthrottle.c"}

var (
	modOnce sync.Once
	modPath string
	modErr  error
)

// buildModDthrottle builds contrib/apache's module once per test binary,
// with apxs -Wall -Werror, into the directory TestMain removes (a copy of
// contrib/apache and libdthrottle laid out as in the tree, so that apxs
// leaves nothing in the tree), and returns the .so's path. Without apxs
// (Debian's apache2-dev) the test is skipped, or fails under CI=true.
func buildModDthrottle(t *testing.T) string {
	t.Helper()
	apxs := requireTool(t, "apxs")
	modOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(binary), "mod_dthrottle", "contrib", "apache")
		// The module's sources, headers and version script (which keeps
		// every symbol but the module record inside).
		if modErr = copySources(filepath.Join("..", "contrib", "apache"), dir, ".c", ".h", ".map"); modErr != nil {
			return
		}
		if modErr = copyLibdthrottleTo(filepath.Join(dir, "..", "..", "libdthrottle")); modErr != nil {
			return
		}
		cmd := exec.Command(apxs, append([]string{"-c", "-Wc,-Wall", "-Wc,-Werror", "-Wl,-Wl,--version-script=mod_dthrottle.map"}, modSources...)...)
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
// directory anyone may enter, with mode 0666. An admin endpoint on port 0
// gets a free port, as startDaemon's does. It returns the daemon and the
// config's path, to start it again.
func sharedDaemon(t *testing.T, config string) (*daemon, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dthrottle-mod-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	sock := filepath.Join(dir, "d.sock")
	path := filepath.Join(dir, "dthrottle.toml")
	config, admin := pinPort(t, strings.ReplaceAll(config, "%SOCK%", sock), "http")
	must(t, os.WriteFile(path, []byte(config), 0o644))
	d := runDaemon(t, sock, nil, "-config", path)
	d.admin = admin
	return d, path
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
