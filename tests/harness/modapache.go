package harness

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
	"syscall"
	"testing"
	"time"
)

// modSources are the files apxs compiles into mod_dthrottle, in
// contrib/apache: its own, and libdthrottle as one file.
var modSources = []string{"mod_dthrottle.c", "dthrottle_client.c", "dthrottle_target.c",
	"dthrottle_status.c", "dthrottle_shared.c", "../../libdthrottle/libdthrottle.c"}

// BuildModDthrottle builds contrib/apache's module once for every test
// package, with apxs -Wall -Werror, in a copy of contrib/apache and
// libdthrottle laid out as in the tree (so that apxs leaves nothing in the
// tree), and returns the .so's path. Without apxs (Debian's apache2-dev)
// the test is skipped, or fails under CI=true.
func BuildModDthrottle(t *testing.T) string {
	t.Helper()
	apxs := RequireTool(t, "apxs")
	dir := Build(t, "mod_dthrottle", func(dir string) error {
		dir = filepath.Join(dir, "contrib", "apache")
		// The module's sources, headers and version script (which keeps
		// every symbol but the module record inside).
		if err := copySources(Path("contrib/apache"), dir, ".c", ".h", ".map"); err != nil {
			return err
		}
		if err := CopyLibdthrottleTo(filepath.Join(dir, "..", "..", "libdthrottle")); err != nil {
			return err
		}
		cmd := exec.Command(apxs, append([]string{"-c", "-Wc,-Wall", "-Wc,-Werror", "-Wl,-Wl,--version-script=mod_dthrottle.map"}, modSources...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apxs: %v\n%s", err, out)
		}
		_, err := os.Stat(filepath.Join(dir, ".libs", "mod_dthrottle.so"))
		return err
	})
	return filepath.Join(dir, "contrib", "apache", ".libs", "mod_dthrottle.so")
}

// SharedDaemon starts dthrottled with config (%SOCK% replaced) on a socket
// that Apache's children can reach when they run as another user: in a
// directory anyone may enter, with mode 0666. An admin endpoint on port 0
// gets a free port, as startDaemon's does. It returns the daemon and the
// config's path, to start it again.
func SharedDaemon(t *testing.T, config string) (*Daemon, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dthrottle-mod-")
	Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	Must(t, os.Chmod(dir, 0o755))
	sock := filepath.Join(dir, "d.sock")
	path := filepath.Join(dir, "dthrottle.toml")
	config, admin := PinPort(t, strings.ReplaceAll(config, "%SOCK%", sock), "http")
	Must(t, os.WriteFile(path, []byte(config), 0o644))
	d := RunDaemon(t, sock, nil, "-config", path)
	d.Admin = admin
	return d, path
}

// StartModApache runs apache2 in the foreground with the given MPM
// ("event", "worker", "prefork"), mod_dthrottle and the directives in
// body, serving www/index.html ("hello"), www/h/index.html and an
// ErrorDocument for 429 at /errors/429.html.
func StartModApache(t *testing.T, mpm, body string) *ApacheServer {
	t.Helper()
	apache := RequireApache(t)
	mod := BuildModDthrottle(t)
	dir, err := os.MkdirTemp("", "dthrottle-modapache-")
	Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	Must(t, os.Chmod(dir, 0o755))
	www := filepath.Join(dir, "www")
	for _, d := range []string{"", "h", "free", "errors"} {
		Must(t, os.Mkdir(filepath.Join(www, d), 0o755))
	}
	for path, text := range map[string]string{
		"index.html": "hello\n", "h/index.html": "h\n", "free/index.html": "free\n",
		"errors/429.html": "slow down\n",
	} {
		Must(t, os.WriteFile(filepath.Join(www, path), []byte(text), 0o644))
	}

	port := FreePort(t)
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
	Must(t, os.WriteFile(confPath, []byte(conf.String()), 0o644))
	return runApache(t, apache, confPath, port, filepath.Join(dir, "error.log"))
}

// runApache starts apache2 -f conf in the foreground, stops it when the
// test ends, and waits until it listens on port.
func runApache(t *testing.T, apache, conf string, port int, errLog string) *ApacheServer {
	t.Helper()
	cmd := exec.Command(apache, "-f", conf, "-DFOREGROUND")
	var out LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	a := &ApacheServer{URL: fmt.Sprintf("http://127.0.0.1:%d", port), ErrLog: errLog}
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

// Fetch GETs path with the header X-Client: client (none if ""), and
// returns the status, Retry-After and body.
func (a *ApacheServer) Fetch(t *testing.T, hc *http.Client, path, client string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", a.URL+path, nil)
	Must(t, err)
	if client != "" {
		req.Header.Set("X-Client", client)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Must(t, err)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
}

// Expect fetches path once per wanted status, failing with the error log.
func (a *ApacheServer) Expect(t *testing.T, hc *http.Client, path, client string, want ...int) {
	t.Helper()
	for i, w := range want {
		if got, _, body := a.Fetch(t, hc, path, client); got != w {
			log, _ := os.ReadFile(a.ErrLog)
			t.Fatalf("%s (X-Client %q) request %d: status %d, want %d\n%s\nerror log:\n%s", path, client, i+1, got, w, body, log)
		}
	}
}

// Counters reads the dthrottle-status page into a map.
func (a *ApacheServer) Counters(t *testing.T, hc *http.Client) map[string]string {
	t.Helper()
	status, _, body := a.Fetch(t, hc, "/dthrottle-status", "")
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

// RawRequest sends req as is on a new connection and returns the status
// line of the answer ("" if Apache closed without one).
func RawRequest(t *testing.T, a *ApacheServer, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(a.URL, "http://"))
	Must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, req)
	Must(t, err)
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// AskDaemon sends tags straight to dthrottled and returns its replies.
func AskDaemon(t *testing.T, sock string, tags ...string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	Must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, strings.Join(tags, "\n")+"\n")
	Must(t, err)
	buf := make([]byte, 3*len(tags))
	_, err = io.ReadFull(c, buf)
	Must(t, err)
	return string(buf)
}
