package tests

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// cliBinary builds cmd/dthrottle once, beside the daemon's binary (so the
// harness removes it at the end).
func cliBinary(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		cliPath = filepath.Join(filepath.Dir(binary), "dthrottle")
		out, err := exec.Command("go", "build", "-o", cliPath, "../cmd/dthrottle").CombinedOutput()
		if err != nil {
			cliErr = errors.New("building cmd/dthrottle: " + err.Error() + "\n" + string(out))
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

// runCLI runs dthrottle with args and stdin, returning its exit status and
// output.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("dthrottle %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// TestCLIQuery is docs/integrations/shell.md's example: burst 3, so the fourth a is
// refused and the command exits 1; b alone exits 0.
func TestCLIQuery(t *testing.T) {
	d := startDaemon(t, burst3)
	code, out, errs := runCLI(t, "", "query", "-socket", d.sock, "-timeout", "2s", "a", "a", "a", "a", "b")
	if want := "a OK\na OK\na OK\na NO\nb OK\n"; code != 1 || out != want {
		t.Fatalf("query a a a a b: exit %d, stdout %q, stderr %q; want 1, %q", code, out, errs, want)
	}
	if code, out, _ := runCLI(t, "", "query", "-socket", d.sock, "-timeout", "2s", "b"); code != 0 || out != "b OK\n" {
		t.Fatalf("query b: exit %d, stdout %q; want 0, %q", code, out, "b OK\n")
	}
	d.stop(t)
	code, out, errs = runCLI(t, "", "query", "-socket", d.sock, "-timeout", "50ms", "b")
	if code != 2 || out != "" || !strings.Contains(errs, "dialing unix") {
		t.Fatalf("query with the daemon stopped: exit %d, stdout %q, stderr %q; want 2 and the error", code, out, errs)
	}
}

// TestCLIRewriteMap feeds keys as Apache does and checks the answers, then
// that the map fails open once the daemon is gone.
func TestCLIRewriteMap(t *testing.T) {
	d := startDaemon(t, burst3)
	code, out, errs := runCLI(t, "k\nk\nk\nk\nj\n", "rewritemap", "-socket", d.sock, "-timeout", "1s")
	if want := "OK\nOK\nOK\nNO\nOK\n"; code != 0 || out != want {
		t.Fatalf("rewritemap: exit %d, stdout %q, stderr %q; want 0, %q", code, out, errs, want)
	}
	d.stop(t)
	code, out, errs = runCLI(t, "k\nk\n", "rewritemap", "-socket", d.sock)
	if code != 0 || out != "OK\nOK\n" || !strings.Contains(errs, "failing open") {
		t.Fatalf("rewritemap, daemon stopped: exit %d, stdout %q, stderr %q; want OK twice, logged", code, out, errs)
	}
}

// TestCLIAdminAgainstDaemon reads the real daemon's admin endpoint with
// the shell command: tag, stats, forget.
func TestCLIAdminAgainstDaemon(t *testing.T) {
	d := startDaemon(t, burst3+"[admin]\nhttp = \"127.0.0.1:0\"\n")
	addr := d.adminAddr(t)
	nc(t, "a\na\na\na\n", "-U", d.sock)
	code, out, errs := runCLI(t, "", "tag", "-admin", addr, "a")
	if code != 0 || !strings.Contains(out, "tokens      0 of 3") || !strings.Contains(out, "tracked     yes") {
		t.Fatalf("dthrottle tag a: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "", "stats", "-admin", addr)
	if code != 0 || !strings.Contains(out, "3 OK, 1 NO") || !regexp.MustCompile(`gossip +off`).MatchString(out) {
		t.Fatalf("dthrottle stats: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs = runCLI(t, "", "forget", "-admin", addr, "a"); code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("dthrottle forget a: exit %d\n%s%s", code, out, errs)
	}
	if got := nc(t, "a\n", "-U", d.sock); got != "OK\n" {
		t.Fatalf("a after forget: %q", got)
	}
}
