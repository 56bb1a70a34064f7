package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

// startDaemon serves the daemon's line server in process on a Unix socket,
// deciding like dthrottled with burst 2 and no refill: each tag is served
// twice, and "deny:" tags never.
func startDaemon(t *testing.T) string {
	t.Helper()
	path := shortSock(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := protocol.NewServer(&burstTwo{spent: map[string]int{}}, protocol.Config{})
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return path
}

// burstTwo is a decide.Allower: two tokens per tag, never refilled.
type burstTwo struct {
	mu    sync.Mutex
	spent map[string]int
}

func (b *burstTwo) Allow(_ time.Time, tag []byte) bool {
	if bytes.HasPrefix(tag, []byte("deny:")) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.spent[string(tag)] >= 2 {
		return false
	}
	b.spent[string(tag)]++
	return true
}

// shortSock returns a socket path short enough for a Unix socket.
func shortSock(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dtq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

func TestQuery(t *testing.T) {
	sock := startDaemon(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"a", "b"}, exitOK, "a OK\nb OK\n", ""},
		{[]string{"a", "a", "b"}, exitRefused, "a OK\na NO\nb OK\n", ""},
		{[]string{"deny:x"}, exitRefused, "deny:x NO\n", ""},
		{nil, exitError, "", "no tag given"},
	} {
		code, out, errs := runCmd(t, "", append([]string{"query", "-socket", sock, "-timeout", "5s"}, tc.args...)...)
		if code != tc.code || out != tc.stdout || !strings.Contains(errs, tc.stderr) {
			t.Errorf("query %v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out, errs, tc.code, tc.stdout, tc.stderr)
		}
	}
	code, out, errs := runCmd(t, "", "query", "-socket", shortSock(t), "a")
	if code != exitError || out != "" || !strings.Contains(errs, "dialing unix") {
		t.Errorf("no daemon: exit %d, stdout %q, stderr %q; want 2 and the dial error", code, out, errs)
	}
}

func TestRewriteMap(t *testing.T) {
	sock := startDaemon(t)
	for _, tc := range []struct {
		args         []string
		stdin        string
		stdout       string
		stderrSubstr string
	}{
		{nil, "10.0.0.1\n10.0.0.1\n10.0.0.1\n10.0.0.2\r\n\n", "OK\nOK\nNO\nOK\nOK\n", ""},
		{[]string{"-prefix", "deny:"}, "10.0.0.3\n10.0.0.4", "NO\nNO\n", ""},
	} {
		code, out, errs := runCmd(t, tc.stdin, append([]string{"rewritemap", "-socket", sock, "-timeout", "5s"}, tc.args...)...)
		if code != exitOK || out != tc.stdout || errs != "" {
			t.Errorf("rewritemap %v: exit %d, stdout %q, stderr %q; want 0, %q", tc.args, code, out, errs, tc.stdout)
		}
	}
	// No daemon: every key is answered at once by the fail mode, and the
	// outage is logged once, not per key.
	absent := shortSock(t)
	code, out, errs := runCmd(t, "a\nb\nc\n", "rewritemap", "-socket", absent)
	if code != exitOK || out != "OK\nOK\nOK\n" || strings.Count(errs, "unreachable, failing open") != 1 {
		t.Errorf("no daemon: exit %d, stdout %q, stderr %q; want OK thrice and one log line", code, out, errs)
	}
	code, out, _ = runCmd(t, "a\nb\n", "rewritemap", "-socket", absent, "-fail", "closed")
	if code != exitOK || out != "NO\nNO\n" {
		t.Errorf("no daemon, -fail closed: exit %d, stdout %q; want NO twice", code, out)
	}
	if code, _, errs := runCmd(t, "", "rewritemap", "-fail", "maybe"); code != exitError || !strings.Contains(errs, "must be open or closed") {
		t.Errorf("-fail maybe: exit %d, stderr %q", code, errs)
	}
}

// TestRewriteMapFlushesEachAnswer plays Apache: it writes one key and
// waits for its answer before writing the next. An answer left in a
// buffer would hang here (and hang every Apache request behind it).
func TestRewriteMapFlushesEachAnswer(t *testing.T) {
	sock := startDaemon(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"rewritemap", "-socket", sock, "-timeout", "5s"},
			env{stdin: inR, stdout: outW, stderr: io.Discard, now: time.Now})
		outW.Close()
	}()
	answers := bufio.NewReader(outR)
	for i, want := range []string{"OK\n", "OK\n", "NO\n"} {
		got := make(chan string, 1)
		go func() {
			line, _ := answers.ReadString('\n')
			got <- line
		}()
		if _, err := io.WriteString(inW, "k\n"); err != nil {
			t.Fatal(err)
		}
		if line := testkit.Recv(t, got, 10*time.Second, fmt.Sprintf("key %d's answer (not flushed?)", i)); line != want {
			t.Fatalf("key %d: got %q, want %q", i, line, want)
		}
	}
	inW.Close()
	if code := testkit.Recv(t, done, 10*time.Second, "rewritemap to exit at end of input"); code != exitOK {
		t.Fatalf("exit %d at end of input, want 0", code)
	}
}
