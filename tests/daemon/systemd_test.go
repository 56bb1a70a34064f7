package daemon

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// notifySocket listens where dthrottled sends its systemd notifications
// and returns the path and a channel of the messages.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return path, ch
}

// awaitNotify waits for a notification containing want.
func awaitNotify(t *testing.T, ch <-chan string, want string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatalf("notify socket closed waiting for %q", want)
			}
			if strings.Contains(msg, want) {
				return msg
			}
		case <-deadline:
			t.Fatalf("no %q notification within 10s", want)
		}
	}
}

// TestNotifyAndReload is the systemd life cycle: READY=1 when serving;
// on SIGHUP, RELOADING=1 then READY=1 with the new limits applied and the
// buckets kept; a bad file changes nothing; STOPPING=1 on SIGTERM; the
// watchdog fed while WATCHDOG_USEC is set.
func TestNotifyAndReload(t *testing.T) {
	notify, msgs := notifySocket(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	cfgPath := filepath.Join(dir, "dthrottle.toml")
	writeConfig := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("[listen]\nunix = %q\n%s", sock, body)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig("[limit]\nrate = 0.001\nburst = 3\n")
	d := harness.RunDaemon(t, sock, []string{"NOTIFY_SOCKET=" + notify, "WATCHDOG_USEC=200000"}, "-config", cfgPath)
	awaitNotify(t, msgs, "READY=1")
	awaitNotify(t, msgs, "WATCHDOG=1")

	if got := harness.NC(t, "spent\nspent\nspent\nspent\n", "-U", sock); got != "OK\nOK\nOK\nNO\n" {
		t.Fatalf("burst 3: %q", got)
	}
	writeConfig("[limit]\nrate = 0.001\nburst = 10\n")
	d.Cmd.Process.Signal(syscall.SIGHUP)
	if msg := awaitNotify(t, msgs, "RELOADING=1"); !strings.Contains(msg, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", msg)
	}
	awaitNotify(t, msgs, "READY=1")
	// A tag already spent stays spent; a new tag gets the new burst.
	if got := harness.NC(t, "spent\n", "-U", sock); got != "NO\n" {
		t.Fatalf("spent tag after raising the burst: %q, want NO", got)
	}
	if got := harness.NC(t, strings.Repeat("new\n", 11), "-U", sock); got != strings.Repeat("OK\n", 10)+"NO\n" {
		t.Fatalf("new tag after raising the burst to 10: %q", got)
	}

	// A file that fails validation is rejected with its error logged.
	writeConfig("[limit]\nrate = 0.001\nburst = 0\n")
	d.Cmd.Process.Signal(syscall.SIGHUP)
	awaitNotify(t, msgs, "RELOADING=1")
	awaitNotify(t, msgs, "READY=1")
	d.AwaitLog(t, "reload failed: keeping the running config")
	d.AwaitLog(t, "limit.burst = 0: must be between 1 and 1000000")
	if got := harness.NC(t, strings.Repeat("other\n", 11), "-U", sock); got != strings.Repeat("OK\n", 10)+"NO\n" {
		t.Fatalf("after a bad reload the running burst of 10 must hold: %q", got)
	}
	// A listener change needs a restart, and says so.
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("[listen]\nunix = %q\ntcp = \"127.0.0.1:0\"\n[limit]\nrate = 0.001\nburst = 10\n", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Cmd.Process.Signal(syscall.SIGHUP)
	awaitNotify(t, msgs, "RELOADING=1")
	awaitNotify(t, msgs, "READY=1")
	d.AwaitLog(t, `needs a restart to take effect" key=listen.tcp`)
	d.Stop(t)
	awaitNotify(t, msgs, "STOPPING=1")
}

// TestSocketActivation serves on sockets made by the test and passed as
// systemd does (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES), Unix and TCP.
func TestSocketActivation(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "activated.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	uf, _ := ul.File()
	tf, _ := tl.File()
	ul.SetUnlinkOnClose(false)
	ul.Close()
	tl.Close()
	cfg := filepath.Join(dir, "dthrottle.toml")
	// The configured socket differs: with sockets passed, it is not used.
	os.WriteFile(cfg, []byte(fmt.Sprintf("[listen]\nunix = %q\n[limit]\nrate = 0.001\nburst = 2\n", filepath.Join(dir, "unused.sock"))), 0o644)
	// LISTEN_PID must be the daemon's own pid: a shell sets it and execs.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, harness.Binary, "-config", cfg)
	cmd.ExtraFiles = []*os.File{uf, tf}
	cmd.Env = append(os.Environ(), "LISTEN_FDS=2", "LISTEN_FDNAMES=query:query-tcp")
	var stderr harness.LockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	uf.Close()
	tf.Close()
	d := &harness.Daemon{Cmd: cmd, Sock: sock, Stderr: &stderr, Done: make(chan error, 1)}
	go func() { d.Done <- cmd.Wait() }()
	t.Cleanup(func() { d.Stop(t) })

	if got := harness.NC(t, "x\nx\nx\n", "-U", sock); got != "OK\nOK\nNO\n" {
		t.Fatalf("inherited unix socket: %q\n%s", got, stderr.String())
	}
	host, port, _ := net.SplitHostPort(tl.Addr().String())
	if got := harness.NC(t, "x\ny\n", host, port); got != "NO\nOK\n" {
		t.Fatalf("inherited tcp socket (same table): %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "unused.sock")); !os.IsNotExist(err) {
		t.Errorf("configured socket created although sockets were passed: %v", err)
	}
	for _, want := range []string{"name=query ", "name=query-tcp "} {
		d.AwaitLog(t, want)
	}
	d.Stop(t)
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the daemon removed a socket it did not create: %v", err)
	}
}

// TestSystemdSocketActivate runs the daemon under Debian's
// systemd-socket-activate, as an operator would try it.
func TestSystemdSocketActivate(t *testing.T) {
	tool := harness.RequireTool(t, "systemd-socket-activate")
	dir := t.TempDir()
	sock := filepath.Join(dir, "sa.sock")
	cfg := filepath.Join(dir, "dthrottle.toml")
	os.WriteFile(cfg, []byte("[limit]\nrate = 0.001\nburst = 1\n"), 0o644)
	notify, msgs := notifySocket(t)
	// systemd-socket-activate passes on only the environment it is told to.
	d := harness.RunDaemonCmd(t, sock, exec.Command(tool, "-l", sock, "-E", "NOTIFY_SOCKET="+notify, harness.Binary, "-config", cfg))
	if got := harness.NC(t, "a\na\n", "-U", sock); got != "OK\nNO\n" {
		t.Fatalf("under systemd-socket-activate: %q\n%s", got, d.Stderr)
	}
	awaitNotify(t, msgs, "READY=1")
}

// TestUnitsVerify checks both units with systemd-analyze verify, with
// ExecStart pointed at the binary built for the tests.
func TestUnitsVerify(t *testing.T) {
	tool := harness.RequireTool(t, "systemd-analyze")
	dir := t.TempDir()
	for _, unit := range []string{"dthrottled.service", "dthrottled.socket"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/dthrottled"), []byte(harness.Binary))
		if err := os.WriteFile(filepath.Join(dir, unit), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(tool, "verify", filepath.Join(dir, "dthrottled.socket"), filepath.Join(dir, "dthrottled.service")).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The shipped config is what the unit runs: it must pass -check.
	if out, err := exec.Command(harness.Binary, "-check", "-config", "../../dthrottle.toml").CombinedOutput(); err != nil {
		t.Fatalf("dthrottle.toml: %v\n%s", err, out)
	}
}
