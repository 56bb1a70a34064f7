package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireRLS checks that this tree's dthrottled knows [rls] in config.
// Before the rls package exists the test is skipped, saying so; once it
// exists, a config it does not accept fails the test.
func RequireRLS(t *testing.T, config string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "check.toml")
	config = strings.ReplaceAll(config, "%SOCK%", filepath.Join(filepath.Dir(path), "d.sock"))
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(Binary, "-check", "-config", path).CombinedOutput()
	if err == nil {
		return
	}
	if strings.Contains(string(out), `unknown key "rls`) && !FileExists(Path("rls")) {
		t.Skipf("the rate limit service is not in this tree yet (no rls package; dthrottled: %s)", bytes.TrimSpace(out))
	}
	t.Fatalf("dthrottled -check rejects the [rls] config: %v\n%s", err, out)
}
