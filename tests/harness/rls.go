package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The rate limit service's reference implementation, whose client asks
// dthrottled here and whose server bench/rls.sh measures beside it. It
// has no tagged release: one pseudo-version is pinned, here and in
// bench/rls.sh, and built from the Go module proxy's copy of its source
// (go mod download gives the directory; building in a writable copy of it
// honours its own go.mod and go.sum).
const (
	rlsRefModule  = "github.com/envoyproxy/ratelimit"
	rlsRefVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

var (
	rlsRefOnce sync.Once
	rlsRefDir  string
	rlsRefErr  error
)

// RLSReference returns the directory holding the reference's server
// (service_cmd) and client (client_cmd), building them the first time into
// the user's cache directory, where later runs find them. A failed build,
// such as one without the module proxy, skips the test, or fails it under
// CI=true.
func RLSReference(t *testing.T) string {
	t.Helper()
	rlsRefOnce.Do(func() { rlsRefDir, rlsRefErr = buildRLSReference() })
	if rlsRefErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("building %s@%s is required under CI=true: %v", rlsRefModule, rlsRefVersion, rlsRefErr)
		}
		t.Skipf("cannot build %s@%s: %v", rlsRefModule, rlsRefVersion, rlsRefErr)
	}
	return rlsRefDir
}

// rlsRefCache is where the built binaries are kept:
// $XDG_CACHE_HOME/dthrottle-rls-ref/VERSION, else ~/.cache/..., else the
// temporary directory's. bench/rls.sh uses the same place.
func rlsRefCache() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "dthrottle-rls-ref", rlsRefVersion)
}

func buildRLSReference() (string, error) {
	dir := rlsRefCache()
	if FileExists(filepath.Join(dir, "service_cmd")) && FileExists(filepath.Join(dir, "client_cmd")) {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")

	// go mod download, outside any module, prints where the source is.
	dl := exec.Command("go", "mod", "download", "-json", rlsRefModule+"@"+rlsRefVersion)
	dl.Dir, dl.Env = work, env
	out, err := dl.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Error != "" || err != nil {
		return "", fmt.Errorf("go mod download: %v %s %s", err, mod.Error, exitStderr(err))
	}
	// The module cache is read-only: build in a copy.
	src := filepath.Join(work, "src")
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", fmt.Errorf("copying %s: %w", mod.Dir, err)
	}
	bin := filepath.Join(work, "bin")
	build := exec.Command("go", "build", "-trimpath", "-o", bin+"/", "./src/service_cmd", "./src/client_cmd")
	build.Dir, build.Env = src, env
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	// Another run may have finished first: then its binaries serve.
	if err := os.Rename(bin, dir); err != nil && !FileExists(filepath.Join(dir, "client_cmd")) {
		return "", err
	}
	return dir, nil
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
