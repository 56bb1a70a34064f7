package harness

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dthrottle/dthrottle/internal/netns"
)

// Alone runs the rest of t with no other test that called Alone running
// beside it, in this package or in any other test binary of the suite:
// `go test ./...` runs packages side by side, and a test that times its
// steps (the worked example's timeline) must not share two cores with a
// flood. It holds an exclusive lock on a file in the temporary directory
// until t ends. Inside a test's own network namespace it does nothing:
// the test that made the namespace holds the lock for it.
func Alone(t testing.TB) {
	t.Helper()
	if netns.Inside() {
		return
	}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "dthrottle-tests-alone.lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}
