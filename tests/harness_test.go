// Package tests holds end-to-end tests: they build the real dthrottled and
// talk to it with real clients.
package tests

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the dthrottled built once for the whole package.
var binary string

// binaryEnv passes the built binary to the test re-executed inside a
// network namespace, so it is built once.
const binaryEnv = "DTHROTTLE_TEST_BINARY"

func TestMain(m *testing.M) {
	if binary = os.Getenv(binaryEnv); binary != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "dthrottle-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dthrottled")
	build := exec.Command("go", "build", "-o", binary, "../cmd/dthrottled")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dthrottled:", err)
		os.Exit(1)
	}
	os.Setenv(binaryEnv, binary)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool returns the path of an external tool. Without it the test is
// skipped on a developer's machine and fails under CI=true, where .ci/run
// was meant to install it.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true: %v", name, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// requireSbin returns the path of a Debian server binary, which lives in
// /usr/sbin (not on every user's PATH), or fails as requireTool does.
func requireSbin(t *testing.T, name string) string {
	t.Helper()
	if p := "/usr/sbin/" + name; fileExists(p) {
		return p
	}
	return requireTool(t, name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// daemon is a dthrottled process started by a test.
type daemon struct {
	cmd    *exec.Cmd
	sock   string
	stderr *lockedBuffer
	done   chan error
	// admin and tcp are the admin endpoint's and the TCP listener's
	// addresses, when the config asked for a port of 0: the test picks a
	// free port instead, so that it knows the address without reading the
	// log.
	admin, tcp string
	adminUp    sync.Once
}

// startDaemon writes config (with %SOCK% replaced by a socket path in a
// temp dir) and runs dthrottled on it until the test ends.
func startDaemon(t *testing.T, config string) *daemon {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	path := filepath.Join(dir, "dthrottle.toml")
	config, admin := pinPort(t, strings.ReplaceAll(config, "%SOCK%", sock), "http")
	config, tcp := pinPort(t, config, "tcp")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runDaemon(t, sock, nil, "-config", path)
	d.admin, d.tcp = admin, tcp
	return d
}

// pinPort replaces the first `key = "host:0"` of config with a port free
// now on host, and returns the config and that address ("" when there is
// none). The port could be taken in between, but only by a process that
// binds ports it was not given.
func pinPort(t *testing.T, config, key string) (string, string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + ` = "([^"]*):0"`).FindStringSubmatchIndex(config)
	if m == nil {
		return config, ""
	}
	l, err := net.Listen("tcp", net.JoinHostPort(config[m[2]:m[3]], "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return config[:m[0]] + fmt.Sprintf("%s = %q", key, addr) + config[m[1]:], addr
}

// runDaemon starts dthrottled with args and waits until sock answers.
func runDaemon(t *testing.T, sock string, env []string, args ...string) *daemon {
	t.Helper()
	return runDaemonCmd(t, sock, exec.Command(binary, args...), env...)
}

// runDaemonCmd starts cmd, a dthrottled or a command that runs one, and
// waits until sock answers.
func runDaemonCmd(t *testing.T, sock string, cmd *exec.Cmd, env ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: cmd, sock: sock, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	d.cmd.Stderr = d.stderr
	d.cmd.Env = append(os.Environ(), env...)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return d
		}
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("dthrottled exited before listening: %v\n%s", err, d.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dthrottled not listening on %s after 10s: %v\n%s", sock, err, d.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockedBuffer collects a process's output while tests read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// awaitLog waits until the daemon has logged a line containing want: its
// output arrives through a pipe, after whatever it did before writing it.
func (d *daemon) awaitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("dthrottled did not log %q within 10s:\n%s", want, d.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit. Safe to call twice.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.cmd.ProcessState != nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Errorf("dthrottled exited uncleanly: %v\n%s", err, d.stderr)
		}
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		t.Errorf("dthrottled did not stop within 10s of SIGTERM\n%s", d.stderr)
	}
}

// nc runs netcat-openbsd with input on stdin and returns what it printed.
func nc(t *testing.T, input string, args ...string) string {
	t.Helper()
	path := requireTool(t, "nc")
	cmd := exec.Command(path, append([]string{"-N", "-w", "10"}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("nc %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}
