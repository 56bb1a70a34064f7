package daemon

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestNcBurst is the first thing a newcomer tries: with burst 3, the
// queries a a a a b get OK OK OK NO OK.
func TestNcBurst(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	got := harness.NC(t, "a\na\na\na\nb\n", "-U", d.Sock)
	if want := "OK\nOK\nOK\nNO\nOK\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// CR stripped (nc -C), empty tag served and not accounted.
	got = harness.NC(t, "b\r\n\n\nb\r\nb\n", "-U", d.Sock)
	if want := "OK\nOK\nOK\nOK\nNO\n"; got != want {
		t.Fatalf("CR and empty lines: got %q, want %q", got, want)
	}
}

func TestNcTCP(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t)))
	d := harness.StartDaemon(t, strings.Replace(harness.Burst3, "[listen]\n", fmt.Sprintf("[listen]\ntcp = %q\n", addr), 1))
	host, port, _ := net.SplitHostPort(addr)
	got := harness.NC(t, "t\nt\nt\nt\n", host, port)
	if want := "OK\nOK\nOK\nNO\n"; got != want {
		t.Fatalf("tcp: got %q, want %q", got, want)
	}
	// The Unix socket shares the same table.
	if got := harness.NC(t, "t\n", "-U", d.Sock); got != "NO\n" {
		t.Fatalf("unix after tcp: got %q, want NO", got)
	}
}

// TestNcPipelined100k sends 100,000 queries in one stream and counts the
// replies: exactly one per query, in order.
func TestNcPipelined100k(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	var in, want strings.Builder
	for i := 0; i < 100000; i++ {
		fmt.Fprintf(&in, "tag%d\n", i%25000)
		if i < 75000 {
			want.WriteString("OK\n")
		} else {
			want.WriteString("NO\n")
		}
	}
	// Tags 0..24999 four times over: the first three rounds are served.
	got := harness.NC(t, in.String(), "-U", d.Sock)
	if n := strings.Count(got, "\n"); n != 100000 {
		t.Fatalf("got %d replies, want 100000", n)
	}
	if got != want.String() {
		t.Fatalf("replies out of step with the queries")
	}
}

func TestCheckFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte("[limit]\nrate = 2.5\nburst = 3\n"), 0o644)
	os.WriteFile(bad, []byte("[limit]\nrate = 2.5\nbrust = 3\n"), 0o644)

	out, err := exec.Command(harness.Binary, "-check", "-config", good).CombinedOutput()
	if err != nil {
		t.Fatalf("-check on a good config: %v\n%s", err, out)
	}
	out, err = exec.Command(harness.Binary, "-check", "-config", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("-check on a misspelt key: exit %v, want 1\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("brust")) || !bytes.Contains(out, []byte(":3")) {
		t.Fatalf("-check output does not name the key and its line: %s", out)
	}
	out, err = exec.Command(harness.Binary, "-check", "-config", "../../dthrottle.toml").CombinedOutput()
	if err != nil {
		t.Fatalf("-check on the shipped dthrottle.toml: %v\n%s", err, out)
	}
	out, err = exec.Command(harness.Binary, "-version").CombinedOutput()
	if err != nil || !bytes.HasPrefix(out, []byte("dthrottled ")) {
		t.Fatalf("-version: %v %q", err, out)
	}
}

// TestDefaults runs dthrottled with no flags at all, as a newcomer would,
// with its runtime directory pointed at a temp dir.
func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "dthrottle.sock")
	d := harness.RunDaemon(t, sock, []string{"XDG_RUNTIME_DIR=" + dir})
	if got := harness.NC(t, strings.Repeat("x\n", 11), "-U", sock); got != strings.Repeat("OK\n", 10)+"NO\n" {
		t.Fatalf("defaults (burst 10): got %q", got)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("default socket mode %#o, want 0660", fi.Mode().Perm())
	}
	d.AwaitLog(t, "unix="+sock)
	d.Stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after SIGTERM: %v", err)
	}
}

func TestSocketOwnership(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	fi, err := os.Stat(d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %#o, want 0600 as configured", fi.Mode().Perm())
	}

	// A second instance on the same path exits with a clear error and
	// leaves the first one serving.
	second := exec.Command(harness.Binary, "-config", filepath.Join(filepath.Dir(d.Sock), "dthrottle.toml"))
	out, err := second.CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("already running")) {
		t.Fatalf("second instance: err %v, output %s", err, out)
	}
	if got := harness.NC(t, "still\n", "-U", d.Sock); got != "OK\n" {
		t.Fatalf("first instance after a second tried: %q", got)
	}
	d.Stop(t)

	// A socket file left by a crash is replaced.
	l, err := net.Listen("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(d.Sock); err != nil {
		t.Fatalf("stale socket not in place: %v", err)
	}
	d2 := harness.RunDaemon(t, d.Sock, nil, "-config", filepath.Join(filepath.Dir(d.Sock), "dthrottle.toml"))
	if got := harness.NC(t, "after\n", "-U", d2.Sock); got != "OK\n" {
		t.Fatalf("after replacing a stale socket: %q", got)
	}
}

// TestStopAnswersPendingQueries checks that SIGTERM closes client
// connections cleanly after answering what they sent.
func TestStopAnswersPendingQueries(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("p\np\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := harness.ReadFull(c, buf); err != nil || string(buf) != "OK\nOK\n" {
		t.Fatalf("replies before stop: %q %v", buf, err)
	}
	d.Stop(t)
	if _, err := c.Read(buf); err == nil {
		t.Fatalf("connection still open after stop")
	}
}
