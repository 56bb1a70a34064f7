package install

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// This file owns the test of the Debian packages: build, lintian,
// install, the installed daemon, nginx and Apache through the installed
// modules, HAProxy's check of the shipped configuration, an upgrade that
// keeps the operator's edits, remove, and purge.

// packages are the binary packages of packaging/debian/control.
var packages = []string{"dthrottle", "libnginx-mod-http-dthrottle", "libapache2-mod-dthrottle", "haproxy-dthrottle"}

// installedSock is the socket of the installed configuration.
const installedSock = "/run/dthrottle/dthrottle.sock"

// leftovers are paths that installing or running the packages may make
// outside the packages' own files: Debian's nginx and Apache make them
// when checked, a2enmod's state when purged. Those absent before the test
// are removed after it.
var leftovers = []string{"/run/apache2", "/run/lock/apache2", "/run/nginx.pid",
	"/var/lib/apache2/module/disabled_by_admin", "/var/lib/apache2/module/disabled_by_maint",
	"/var/lib/apache2/module/enabled_by_maint", "/var/lib/apache2/module/enabled_by_admin"}

// madePaths are what the packages make beside their files, gone after a
// purge.
var madePaths = []string{"/etc/dthrottle", "/var/lib/dthrottle", "/run/dthrottle",
	"/etc/nginx/modules-enabled/50-mod-http-dthrottle.conf",
	"/etc/apache2/mods-enabled/dthrottle.load", "/etc/apache2/mods-enabled/dthrottle.conf",
	"/etc/systemd/system/multi-user.target.wants/dthrottled.service",
	"/etc/systemd/system/sockets.target.wants/dthrottled.socket"}

// buildDebs runs `make deb` once for every test of a run (the build
// directory is keyed by the tree) and returns the .deb files.
func buildDebs(t *testing.T) []string {
	t.Helper()
	for _, tool := range []string{"make", "dpkg-buildpackage", "dh", "apxs", "gcc"} {
		harness.RequireTool(t, tool)
	}
	dir := harness.Build(t, "deb", func(dir string) error {
		cmd := exec.Command("make", "deb", "DIST="+dir)
		cmd.Dir = harness.Path(".")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make deb: %v\n%s", err, out)
		}
		return nil
	})
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	harness.Must(t, err)
	if len(debs) != len(packages) {
		t.Fatalf("make deb made %d packages, want %d: %v", len(debs), len(packages), debs)
	}
	return debs
}

// run runs a command with a policy that refuses every service start
// (no distribution service is started, whatever /usr/sbin/policy-rc.d
// says) and returns its combined output; it fails t on an error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runErr(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "POLICYRCD="+policy(t))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// policy writes, once per test, a policy-rc.d that refuses everything.
func policy(t *testing.T) string {
	p := filepath.Join(os.TempDir(), "dthrottle-test-policy-rc.d")
	if !harness.FileExists(p) {
		harness.Must(t, os.WriteFile(p, []byte("#!/bin/sh\nexit 101\n"), 0o755))
	}
	return p
}

func TestLintian(t *testing.T) {
	t.Parallel() // lintian reads the .deb files while TestDebInstall installs them
	lintian := harness.RequireTool(t, "lintian")
	debs := buildDebs(t)
	out, _ := exec.Command(lintian, debs...).CombinedOutput()
	t.Logf("lintian:\n%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") {
			t.Errorf("lintian error: %s", line)
		}
	}
}

// TestDebInstall installs the packages as an operator does, runs what
// they installed, upgrades, removes and purges them, and checks that
// nothing of them is left. It changes the machine, so it runs alone, and
// purges whatever happens.
func TestDebInstall(t *testing.T) {
	t.Parallel() // beside TestLintian; harness.Alone keeps the rest of the suite away
	if os.Getuid() != 0 {
		t.Skip("installing packages needs root")
	}
	for _, tool := range []string{"apt-get", "dpkg", "setpriv", "adduser", "apache2ctl", "nc"} {
		harness.RequireTool(t, tool)
	}
	nginx := harness.RequireSbin(t, "nginx")
	apache := harness.RequireApache(t)
	haproxy := harness.RequireSbin(t, "haproxy")
	debs := buildDebs(t)
	harness.Alone(t)
	for _, p := range packages {
		if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output(); err == nil && strings.Contains(string(out), "installed") {
			t.Fatalf("%s is already installed (%s): the test would not leave the machine as it was", p, out)
		}
	}
	var absent []string
	for _, p := range leftovers {
		if _, err := os.Lstat(p); err != nil {
			absent = append(absent, p)
		}
	}
	t.Cleanup(func() {
		// Purge even when the test failed half way; then put back what
		// the servers made.
		exec.Command("apt-get", append([]string{"purge", "-y"}, packages...)...).Run()
		for _, p := range absent {
			os.RemoveAll(p)
		}
	})

	install := append([]string{"install", "-y", "--no-install-recommends"}, debs...)
	t.Log(run(t, "apt-get", install...))
	files := packageFiles(t)

	// What the dthrottle package set up.
	conffiles := run(t, "dpkg-query", "-W", "-f=${Conffiles}", "dthrottle")
	if !strings.Contains(conffiles, "/etc/dthrottle/dthrottle.toml") {
		t.Errorf("dthrottle.toml is not a conffile: %q", conffiles)
	}
	run(t, "getent", "passwd", "dthrottle")
	for _, p := range madePaths[:6] {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	run(t, "/usr/sbin/dthrottled", "-check", "-config", "/etc/dthrottle/dthrottle.toml")
	if out := run(t, "/usr/bin/dthrottle", "-h"); !strings.Contains(out, "query") {
		t.Errorf("dthrottle -h does not list its commands:\n%s", out)
	}

	// The installed daemon, from the installed configuration, as the
	// installed user, as the unit runs it; the servers' users join its
	// group (docs/install.md).
	run(t, "adduser", "www-data", "dthrottle")
	d := startInstalled(t)

	// nginx with the module's load file as Debian enabled it.
	run(t, nginx, "-t", "-q")
	checkNginx(t, nginx)
	// Apache: Debian's configuration lists it, and a site of the test's
	// own includes the load and configuration files a2enmod enabled.
	if out := run(t, "apache2ctl", "-M"); !strings.Contains(out, "dthrottle_module (shared)") {
		t.Errorf("apache2ctl -M does not list dthrottle_module:\n%s", out)
	}
	checkApache(t, apache)
	// HAProxy loads the Lua and the C module with the shipped example.
	run(t, haproxy, "-c", "-f", "/usr/share/doc/haproxy-dthrottle/examples/haproxy-shared.cfg")
	d.Stop(t)
	state, err := os.ReadFile("/var/lib/dthrottle/state")
	if err != nil {
		t.Fatalf("no state file after a clean stop: %v\n%s", err, d.Stderr)
	}

	// An upgrade (a reinstall runs the same scripts) and a removal keep
	// the operator's configuration and the state file.
	const edit = "\n# edited by the operator\n"
	f, err := os.OpenFile("/etc/dthrottle/dthrottle.toml", os.O_APPEND|os.O_WRONLY, 0)
	harness.Must(t, err)
	_, err = f.WriteString(edit)
	harness.Must(t, err)
	harness.Must(t, f.Close())
	t.Log(run(t, "apt-get", append([]string{"install", "-y", "--reinstall"}, debs...)...))
	checkKept(t, edit, state)
	t.Log(run(t, "apt-get", append([]string{"remove", "-y"}, packages...)...))
	checkKept(t, edit, state)
	for _, p := range []string{"/usr/sbin/dthrottled", "/etc/nginx/modules-enabled/50-mod-http-dthrottle.conf", "/etc/apache2/mods-enabled/dthrottle.load"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after remove", p)
		}
	}

	// Purge: nothing of the packages is left, nor their user.
	t.Log(run(t, "apt-get", append([]string{"purge", "-y"}, packages...)...))
	for _, p := range append(files, madePaths...) {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after purge", p)
		}
	}
	if _, err := runErr(t, "getent", "passwd", "dthrottle"); err == nil {
		t.Errorf("user dthrottle is left after purge")
	}
	if _, err := runErr(t, "getent", "group", "dthrottle"); err == nil {
		t.Errorf("group dthrottle is left after purge")
	}
}

// packageFiles lists the files (not directories) the packages installed.
func packageFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, line := range strings.Split(run(t, "dpkg", append([]string{"-L"}, packages...)...), "\n") {
		if st, err := os.Stat(line); err == nil && !st.IsDir() {
			files = append(files, line)
		}
	}
	if len(files) < 10 {
		t.Fatalf("the packages installed %d files: %v", len(files), files)
	}
	return files
}

// checkKept fails t unless the configuration still holds the edit and the
// state file is unchanged.
func checkKept(t *testing.T, edit string, state []byte) {
	t.Helper()
	b, err := os.ReadFile("/etc/dthrottle/dthrottle.toml")
	if err != nil || !strings.HasSuffix(string(b), edit) {
		t.Errorf("the operator's edit of dthrottle.toml is lost (%v)", err)
	}
	if b, err := os.ReadFile("/var/lib/dthrottle/state"); err != nil || !bytes.Equal(b, state) {
		t.Errorf("the state file is lost or changed (%v)", err)
	}
}

// startInstalled runs /usr/sbin/dthrottled on the installed configuration
// as user dthrottle, with the unit's command line.
func startInstalled(t *testing.T) *harness.Daemon {
	t.Helper()
	cmd := exec.Command("setpriv", "--reuid=dthrottle", "--regid=dthrottle", "--init-groups",
		"/usr/sbin/dthrottled", "-config", "/etc/dthrottle/dthrottle.toml")
	d := harness.RunDaemonCmd(t, installedSock, cmd)
	st, err := os.Stat(installedSock)
	harness.Must(t, err)
	if st.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %#o, want 0660", st.Mode().Perm())
	}
	if out := harness.NC(t, "probe\n", "-U", installedSock); out != "OK\n" {
		t.Errorf("installed daemon answered %q", out)
	}
	return d
}

// burst asks url 11 times with X-Tag: tag and checks that the default
// burst of 10 is served and the 11th refused with 429.
func burst(t *testing.T, url, tag, log string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	var got []int
	for range 11 {
		code, err := harness.GetTagged(t, hc, url, tag)
		harness.Must(t, err)
		got = append(got, code)
	}
	want := "[200 200 200 200 200 200 200 200 200 200 429]"
	if fmt.Sprint(got) != want {
		b, _ := os.ReadFile(log)
		t.Errorf("%s: statuses %v, want %s\nlog:\n%s", url, got, want, b)
	}
}

// checkNginx runs Debian's nginx on a configuration of the test's own that
// includes the load file Debian's modules-enabled holds.
func checkNginx(t *testing.T, nginx string) {
	t.Helper()
	dir, www := harness.ProxySite(t)
	port := harness.FreePort(t)
	head := "user www-data;\ninclude /etc/nginx/modules-enabled/50-mod-http-dthrottle.conf;\n"
	body := fmt.Sprintf(`    dthrottle_socket %s;
    server {
        listen 127.0.0.1:%d;
        root %s;
        location / {
            dthrottle $http_x_tag;
        }
    }
`, installedSock, port, www)
	conf := harness.WriteNginxConf(t, dir, head, "", body)
	run(t, nginx, "-t", "-q", "-c", conf)
	log := filepath.Join(dir, "nginx.out")
	harness.RunProxy(t, exec.Command(nginx, "-c", conf, "-g", "daemon off;"), port, log)
	burst(t, fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), "nginx-burst", filepath.Join(dir, "error.log"))
}

// checkApache runs Debian's apache2 on a configuration of the test's own
// that includes what a2enmod enabled.
func checkApache(t *testing.T, apache string) {
	t.Helper()
	dir, www := harness.ProxySite(t)
	port := harness.FreePort(t)
	conf := fmt.Sprintf(`ServerRoot %[1]s
ServerName 127.0.0.1
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
Include /etc/apache2/mods-enabled/dthrottle.load
Include /etc/apache2/mods-enabled/dthrottle.conf
User www-data
Group www-data
Listen 127.0.0.1:%[2]d
PidFile %[1]s/httpd.pid
ErrorLog %[1]s/error.log
DefaultRuntimeDir %[1]s
Mutex file:%[1]s default
DocumentRoot %[3]s
<Location />
	DThrottleTag %%{HTTP:X-Tag}
</Location>
`, dir, port, www)
	path := filepath.Join(dir, "httpd.conf")
	harness.Must(t, os.WriteFile(path, []byte(conf), 0o644))
	log := filepath.Join(dir, "apache.out")
	harness.RunProxy(t, exec.Command(apache, "-f", path, "-DFOREGROUND"), port, log)
	burst(t, fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), "apache-burst", filepath.Join(dir, "error.log"))
}
