package daemon

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestCLIQuery is docs/integrations/shell.md's example: burst 3, so the fourth a is
// refused and the command exits 1; b alone exits 0.
func TestCLIQuery(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	code, out, errs := harness.RunCLI(t, "", "query", "-socket", d.Sock, "-timeout", "2s", "a", "a", "a", "a", "b")
	if want := "a OK\na OK\na OK\na NO\nb OK\n"; code != 1 || out != want {
		t.Fatalf("query a a a a b: exit %d, stdout %q, stderr %q; want 1, %q", code, out, errs, want)
	}
	if code, out, _ := harness.RunCLI(t, "", "query", "-socket", d.Sock, "-timeout", "2s", "b"); code != 0 || out != "b OK\n" {
		t.Fatalf("query b: exit %d, stdout %q; want 0, %q", code, out, "b OK\n")
	}
	d.Stop(t)
	code, out, errs = harness.RunCLI(t, "", "query", "-socket", d.Sock, "-timeout", "50ms", "b")
	if code != 2 || out != "" || !strings.Contains(errs, "dialing unix") {
		t.Fatalf("query with the daemon stopped: exit %d, stdout %q, stderr %q; want 2 and the error", code, out, errs)
	}
}

// TestCLIRewriteMap feeds keys as Apache does and checks the answers, then
// that the map fails open once the daemon is gone.
func TestCLIRewriteMap(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	code, out, errs := harness.RunCLI(t, "k\nk\nk\nk\nj\n", "rewritemap", "-socket", d.Sock, "-timeout", "1s")
	if want := "OK\nOK\nOK\nNO\nOK\n"; code != 0 || out != want {
		t.Fatalf("rewritemap: exit %d, stdout %q, stderr %q; want 0, %q", code, out, errs, want)
	}
	d.Stop(t)
	code, out, errs = harness.RunCLI(t, "k\nk\n", "rewritemap", "-socket", d.Sock)
	if code != 0 || out != "OK\nOK\n" || !strings.Contains(errs, "failing open") {
		t.Fatalf("rewritemap, daemon stopped: exit %d, stdout %q, stderr %q; want OK twice, logged", code, out, errs)
	}
}

// TestCLIAdminAgainstDaemon reads the real daemon's admin endpoint with
// the shell command: tag, stats, forget.
func TestCLIAdminAgainstDaemon(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3+"[admin]\nhttp = \"127.0.0.1:0\"\n")
	addr := d.AdminAddr(t)
	harness.NC(t, "a\na\na\na\n", "-U", d.Sock)
	code, out, errs := harness.RunCLI(t, "", "tag", "-admin", addr, "a")
	if code != 0 || !strings.Contains(out, "tokens      0 of 3") || !strings.Contains(out, "tracked     yes") {
		t.Fatalf("dthrottle tag a: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = harness.RunCLI(t, "", "stats", "-admin", addr)
	if code != 0 || !strings.Contains(out, "3 OK, 1 NO") || !regexp.MustCompile(`gossip +off`).MatchString(out) {
		t.Fatalf("dthrottle stats: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs = harness.RunCLI(t, "", "forget", "-admin", addr, "a"); code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("dthrottle forget a: exit %d\n%s%s", code, out, errs)
	}
	if got := harness.NC(t, "a\n", "-U", d.Sock); got != "OK\n" {
		t.Fatalf("a after forget: %q", got)
	}
}
