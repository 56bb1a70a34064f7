package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Binary is the dthrottled that Main built.
var Binary string

// buildEnv passes the build directory to a test re-executed inside a
// network namespace, which then builds nothing.
const buildEnv = "DTHROTTLE_TEST_BUILD"

// Main builds dthrottled (or finds it built), runs the package's tests and
// exits: a test package's TestMain is `func TestMain(m *testing.M) {
// harness.Main(m) }`.
func Main(m *testing.M) {
	dir, err := build("dthrottled", func(dir string) error {
		return goBuild(dir, "dthrottled", "./cmd/dthrottled")
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	Binary = filepath.Join(dir, "dthrottled")
	os.Exit(m.Run())
}

// Path returns the path of rel, slash-separated and relative to the
// repository's root, as an absolute path.
func Path(rel string) string {
	return filepath.Join(root(), filepath.FromSlash(rel))
}

// root is the repository's root: the nearest directory above the current
// one holding go.mod (a test runs in its package's directory).
var root = sync.OnceValue(func() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			panic("no go.mod above " + dir)
		}
	}
})

// builds holds what build made in this process, by name.
var builds sync.Map // name -> func() (string, error)

// build runs make in a directory of its own, name, under the build
// directory the test packages of one run share, unless a test binary has
// already done so; it returns that directory. Test binaries run at once
// (go test ./... runs packages in parallel) wait for each other on a lock
// file per name, so that each build runs once.
func build(name string, make func(dir string) error) (string, error) {
	f, _ := builds.LoadOrStore(name, sync.OnceValues(func() (string, error) {
		base, err := buildDir()
		if err != nil {
			return "", err
		}
		dir := filepath.Join(base, name)
		lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return "", err
		}
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
		}
		done := filepath.Join(dir, ".built")
		if _, err := os.Stat(done); err == nil {
			return dir, nil
		}
		// A build that failed or was killed half way starts again.
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := make(dir); err != nil {
			return "", fmt.Errorf("building %s: %w", name, err)
		}
		return dir, os.WriteFile(done, nil, 0o644)
	}))
	return f.(func() (string, error))()
}

// Build is build for a test: it fails t when the build fails.
func Build(t testing.TB, name string, make func(dir string) error) string {
	t.Helper()
	dir, err := build(name, make)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// goBuild builds the main package pkg (relative to the repository's root)
// into dir/out.
func goBuild(dir, out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
	cmd.Dir = root()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// systemInputs are what the builds take from the system besides the tree:
// a module built for another nginx, Apache or Lua would not load.
var systemInputs = []string{
	"/usr/share/nginx/src/configure", "/usr/sbin/nginx", "/usr/bin/apxs",
	"/usr/sbin/apache2", "/usr/include/lua5.3/lua.h", "/usr/sbin/haproxy",
}

// buildDir is the directory the builds of this tree go in:
// dthrottle-build-HASH under the temporary directory, HASH a digest of
// every file of the tree outside tests/ and .git, the Go version and the
// system inputs. A later run on the same tree finds its builds there; the
// directories of trees not tested for a day are removed.
var buildDir = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv(buildEnv); dir != "" {
		return dir, nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s %s\n", runtime.Version(), os.Getenv("GOFLAGS"), os.Getenv("CC"))
	for _, p := range systemInputs {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
		}
	}
	top := root()
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(top, p)
		if d.Name() == ".git" || rel == "tests" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "%s\x00", rel)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hashing the tree: %w", err)
	}
	dir := filepath.Join(os.TempDir(), "dthrottle-build-"+hex.EncodeToString(h.Sum(nil))[:16])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err != nil {
		return "", err
	}
	pruneBuilds(dir, now.Add(-24*time.Hour))
	os.Setenv(buildEnv, dir)
	return dir, nil
})

// pruneBuilds removes the build directories beside keep last used before
// cutoff, but for builds under way.
func pruneBuilds(keep string, cutoff time.Time) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(keep), "dthrottle-build-*"))
	for _, dir := range old {
		st, err := os.Stat(dir)
		if dir == keep || err != nil || !st.IsDir() || st.ModTime().After(cutoff) {
			continue
		}
		locks, _ := filepath.Glob(filepath.Join(dir, "*.lock"))
		busy := false
		for _, l := range locks {
			if f, err := os.Open(l); err == nil {
				busy = errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
				f.Close()
			}
			if busy {
				break
			}
		}
		if !busy && strings.HasPrefix(filepath.Base(dir), "dthrottle-build-") {
			os.RemoveAll(dir)
		}
	}
}
