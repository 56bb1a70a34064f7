package daemon

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestSecretFileReadableByOthersRefused: a gossip secret others can read
// is no secret; the daemon refuses to start with it.
func TestSecretFileReadableByOthersRefused(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "dthrottle.toml")
	body := fmt.Sprintf("[listen]\nunix = %q\n[gossip]\npeers = [\"127.0.0.1:9\"]\nbind = \"127.0.0.1:0\"\nsecret_file = %q\n",
		filepath.Join(dir, "d.sock"), secret)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(harness.Binary, "-config", cfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("lets others read it")) {
		t.Fatalf("secret readable by others: exit %v\n%s", err, out)
	}
	// Readable by the owner only, it starts.
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	d := harness.RunDaemon(t, filepath.Join(dir, "d.sock"), nil, "-config", cfg)
	d.AwaitLog(t, "signed=true")
}

// TestTCPOnOtherHostsWarned: a TCP listener reachable from other hosts is
// only ever opened when configured, and then warned about.
func TestTCPOnOtherHostsWarned(t *testing.T) {
	d := harness.StartDaemon(t, "[listen]\nunix = \"%SOCK%\"\ntcp = \"0.0.0.0:0\"\n")
	d.AwaitLog(t, "tcp listener is reachable from other hosts")
	d2 := harness.StartDaemon(t, "[listen]\nunix = \"%SOCK%\"\ntcp = \"127.0.0.1:0\"\n")
	d2.AwaitLog(t, "tcp=127.0.0.1:")
	d2.Stop(t)
	if strings.Contains(d2.Stderr.String(), "reachable from other hosts") {
		t.Fatalf("loopback listener warned about:\n%s", d2.Stderr)
	}
}

// TestNoTagsInLogs: at the default level nothing a client sent appears in
// the log, not even for an over-long line.
func TestNoTagsInLogs(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	const secretTag = "user:7f3a9c-private"
	harness.NC(t, strings.Repeat(secretTag+"\n", 5), "-U", d.Sock)
	harness.NC(t, strings.Repeat("Z", 70000), "-U", d.Sock) // no newline within 64 KiB: closed
	d.AwaitLog(t, "request line too long")
	d.Stop(t)
	if log := d.Stderr.String(); strings.Contains(log, secretTag) || strings.Contains(log, "ZZZZ") {
		t.Fatalf("client data in the log:\n%s", log)
	}
}
