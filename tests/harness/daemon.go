package harness

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireTool returns the path of an external tool. Without it the test is
// skipped on a developer's machine and fails under CI=true, where .ci/run
// was meant to install it.
func RequireTool(t *testing.T, name string) string {
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

// RequireSbin returns the path of a Debian server binary, which lives in
// /usr/sbin (not on every user's PATH), or fails as requireTool does.
func RequireSbin(t *testing.T, name string) string {
	t.Helper()
	if p := "/usr/sbin/" + name; FileExists(p) {
		return p
	}
	return RequireTool(t, name)
}

func FileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Daemon is a dthrottled process started by a test.
type Daemon struct {
	Cmd    *exec.Cmd
	Sock   string
	Stderr *LockedBuffer
	Done   chan error
	// admin and tcp are the admin endpoint's and the TCP listener's
	// addresses, when the config asked for a port of 0: the test picks a
	// free port instead, so that it knows the address without reading the
	// log.
	Admin, TCP string
	adminUp    sync.Once
}

// StartDaemon writes config (with %SOCK% replaced by a socket path in a
// temp dir) and runs dthrottled on it until the test ends.
func StartDaemon(t *testing.T, config string) *Daemon {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	path := filepath.Join(dir, "dthrottle.toml")
	config, admin := PinPort(t, strings.ReplaceAll(config, "%SOCK%", sock), "http")
	config, tcp := PinPort(t, config, "tcp")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	d := RunDaemon(t, sock, nil, "-config", path)
	d.Admin, d.TCP = admin, tcp
	return d
}

// PinPort replaces the first `key = "host:0"` of config with a port free
// now on host, and returns the config and that address ("" when there is
// none). The port could be taken in between, but only by a process that
// binds ports it was not given.
func PinPort(t *testing.T, config, key string) (string, string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + ` = "([^"]*):0"`).FindStringSubmatchIndex(config)
	if m == nil {
		return config, ""
	}
	host := config[m[2]:m[3]]
	addr := net.JoinHostPort(host, strconv.Itoa(pickPort(t, host)))
	return config[:m[0]] + fmt.Sprintf("%s = %q", key, addr) + config[m[1]:], addr
}

// RunDaemon starts dthrottled with args and waits until sock answers.
func RunDaemon(t *testing.T, sock string, env []string, args ...string) *Daemon {
	t.Helper()
	return RunDaemonCmd(t, sock, exec.Command(Binary, args...), env...)
}

// RunDaemonCmd starts cmd, a dthrottled or a command that runs one, and
// waits until sock answers.
func RunDaemonCmd(t *testing.T, sock string, cmd *exec.Cmd, env ...string) *Daemon {
	t.Helper()
	d := &Daemon{Cmd: cmd, Sock: sock, Stderr: &LockedBuffer{}, Done: make(chan error, 1)}
	d.Cmd.Stderr = d.Stderr
	d.Cmd.Env = append(os.Environ(), env...)
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.Done <- d.Cmd.Wait() }()
	t.Cleanup(func() { d.Stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return d
		}
		select {
		case err := <-d.Done:
			d.Done <- err
			t.Fatalf("dthrottled exited before listening: %v\n%s", err, d.Stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dthrottled not listening on %s after 10s: %v\n%s", sock, err, d.Stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LockedBuffer collects a process's output while tests read it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// AwaitLog waits until the daemon has logged a line containing want: its
// output arrives through a pipe, after whatever it did before writing it.
func (d *Daemon) AwaitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.Stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("dthrottled did not log %q within 10s:\n%s", want, d.Stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits for a clean exit. Safe to call twice.
func (d *Daemon) Stop(t *testing.T) {
	t.Helper()
	if d.Cmd.ProcessState != nil {
		return
	}
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.Done:
		d.Done <- err
		if err != nil {
			t.Errorf("dthrottled exited uncleanly: %v\n%s", err, d.Stderr)
		}
	case <-time.After(10 * time.Second):
		d.Cmd.Process.Kill()
		t.Errorf("dthrottled did not stop within 10s of SIGTERM\n%s", d.Stderr)
	}
}

// NC runs netcat-openbsd with input on stdin and returns what it printed.
func NC(t *testing.T, input string, args ...string) string {
	t.Helper()
	path := RequireTool(t, "nc")
	cmd := exec.Command(path, append([]string{"-N", "-w", "10"}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("nc %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}
