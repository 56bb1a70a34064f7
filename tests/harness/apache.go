package harness

import (
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireApache returns the path of Debian's apache2 binary, which lives in
// /usr/sbin (not on every user's PATH). Without it the test is skipped, or
// fails under CI=true.
func RequireApache(t *testing.T) string {
	t.Helper()
	return RequireSbin(t, "apache2")
}

// apacheModules are loaded by full path: the test's config stands alone,
// without Debian's /etc/apache2.
var apacheModules = map[string]string{
	"mpm_prefork_module": "mod_mpm_prefork.so",
	"authz_core_module":  "mod_authz_core.so",
	"rewrite_module":     "mod_rewrite.so",
	"headers_module":     "mod_headers.so",
	"dir_module":         "mod_dir.so",
}

// ApacheServer is an Apache httpd started by a test.
type ApacheServer struct {
	URL    string
	ErrLog string
}

// StartApache runs apache2 in the foreground on a free loopback port with
// contrib/apache's two files, the map pointed at cli and sock, serving a
// one-file site.
func StartApache(t *testing.T, cli, sock string) *ApacheServer {
	t.Helper()
	apache := RequireApache(t)
	// A world-readable dir: Apache's children run as User, not as the test.
	dir, err := os.MkdirTemp("", "dthrottle-apache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	www := filepath.Join(dir, "www")
	Must(t, os.Chmod(dir, 0o755))
	Must(t, os.Mkdir(www, 0o755))
	Must(t, os.WriteFile(filepath.Join(www, "index.html"), []byte("hello\n"), 0o644))

	shipped, err := os.ReadFile(Path("contrib/apache/dthrottle.conf"))
	Must(t, err)
	// A long timeout: on a loaded CI machine a slow reply must not turn
	// into a fail-open answer. An absent daemon still fails at once.
	server := strings.NewReplacer("/usr/local/bin/dthrottle rewritemap", cli+" rewritemap -timeout 2s",
		"/run/dthrottle/dthrottle.sock", sock).Replace(string(shipped))
	if server == string(shipped) {
		t.Fatal("contrib/apache/dthrottle.conf no longer names /usr/local/bin/dthrottle and /run/dthrottle/dthrottle.sock")
	}
	Must(t, os.WriteFile(filepath.Join(dir, "dthrottle.conf"), []byte(server), 0o644))
	vhost, err := Path("contrib/apache/dthrottle-vhost.conf"), error(nil)
	Must(t, err)

	port := FreePort(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "ServerRoot %s\nServerName 127.0.0.1\n", dir)
	for name, file := range apacheModules {
		fmt.Fprintf(&conf, "LoadModule %s /usr/lib/apache2/modules/%s\n", name, file)
	}
	if os.Getuid() == 0 {
		// Apache refuses to serve as root: its children switch to User.
		u := "www-data"
		if _, err := user.Lookup(u); err != nil {
			u = "nobody"
		}
		fmt.Fprintf(&conf, "User %s\nGroup #%s\n", u, lookupGID(t, u))
	}
	fmt.Fprintf(&conf, `Listen 127.0.0.1:%d
PidFile %[2]s/httpd.pid
ErrorLog %[2]s/error.log
DefaultRuntimeDir %[2]s
Mutex file:%[2]s default
StartServers 1
DocumentRoot %[3]s
DirectoryIndex index.html
Include %[2]s/dthrottle.conf
<VirtualHost 127.0.0.1:%[1]d>
	DocumentRoot %[3]s
	Include %[4]s
</VirtualHost>
`, port, dir, www, vhost)
	confPath := filepath.Join(dir, "httpd.conf")
	Must(t, os.WriteFile(confPath, []byte(conf.String()), 0o644))

	return runApache(t, apache, confPath, port, filepath.Join(dir, "error.log"))
}

// Get fetches the site's root and returns the status and Retry-After.
func (a *ApacheServer) Get(t *testing.T) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(a.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lookupGID returns the primary group of user name.
func lookupGID(t *testing.T, name string) string {
	t.Helper()
	u, err := user.Lookup(name)
	Must(t, err)
	return u.Gid
}
