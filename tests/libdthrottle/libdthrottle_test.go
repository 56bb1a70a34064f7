package libdthrottle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// goldenDir holds the Go side's conformance cases, which dt_conform must
// pass byte for byte.
var goldenDir = filepath.Join("..", "..", "internal", "bucket", "testdata", "shared")

// copyLibdthrottle copies the library's sources (not whatever was built
// in the tree) into a new temp dir and returns it, so that each make runs
// on build products of its own and the tree is left as it was.
func copyLibdthrottle(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "libdthrottle")
	if err := harness.CopyLibdthrottleTo(dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestLibdthrottle runs the C library's own tests as CI runs the Go ones:
// make test (the C tests, the conformance driver on a throwaway case and
// on the Go side's golden cases), the same under AddressSanitizer and
// UBSan, under ThreadSanitizer when clang is installed, the benchmark's
// build on a small table, and the install's layout. Each in a copy of the
// sources of its own: the tree is never built in.
func TestLibdthrottle(t *testing.T) {
	harness.RequireTool(t, "cc")
	harness.RequireTool(t, "make")
	golden, err := filepath.Abs(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(golden, "shards.table")); err != nil {
		t.Fatalf("the golden cases: %v", err)
	}

	t.Run("test", func(t *testing.T) {
		t.Parallel()
		out := harness.RunMake(t, copyLibdthrottle(t), "test", "GOLDEN="+golden)
		for _, want := range []string{"dt_conform failed the broken case, as it should", "ok   shards", "ok   policies"} {
			if !strings.Contains(out, want) {
				t.Errorf("make test printed no %q:\n%s", want, out)
			}
		}
	})
	t.Run("sanitize", func(t *testing.T) {
		t.Parallel()
		out := harness.RunMake(t, copyLibdthrottle(t), "sanitize", "GOLDEN="+golden)
		if !strings.Contains(out, "-fsanitize=address,undefined") || !strings.Contains(out, "ok   shards") {
			t.Errorf("make sanitize ran no sanitized conformance:\n%s", out)
		}
	})
	t.Run("tsan", func(t *testing.T) {
		harness.RequireTool(t, "clang") // the library's ThreadSanitizer build uses clang
		t.Parallel()
		harness.RunMake(t, copyLibdthrottle(t), "tsan")
	})
	t.Run("bench", func(t *testing.T) {
		t.Parallel()
		dir := copyLibdthrottle(t)
		harness.RunMake(t, dir, "dt_bench")
		cmd := exec.Command("./dt_bench", "-s", "0.05", "1000")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "1000 tags, 2 threads") {
			t.Fatalf("dt_bench: %v\n%s", err, out)
		}
	})
	t.Run("install", func(t *testing.T) {
		t.Parallel()
		dir := copyLibdthrottle(t)
		dest := t.TempDir()
		harness.RunMake(t, dir, "install", "DESTDIR="+dest, "PREFIX=/opt/dt")
		for _, f := range []string{"lib/libdthrottle.so", "lib/libdthrottle.a", "include/dthrottle_table.h"} {
			if _, err := os.Stat(filepath.Join(dest, "opt", "dt", f)); err != nil {
				t.Errorf("make install: %v", err)
			}
		}
		// A program built against the installed copy only.
		prog := filepath.Join(dest, "hash.c")
		src := "#include <dthrottle_table.h>\n#include <stdio.h>\n" +
			"int main(void) { printf(\"%016llx\\n\", (unsigned long long)dt_hash(0, \"abc\", 3)); return 0; }\n"
		if err := os.WriteFile(prog, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dest, "hash")
		root := filepath.Join(dest, "opt", "dt")
		if out, err := exec.Command("cc", "-Wall", "-Werror", "-I"+filepath.Join(root, "include"), "-o", bin, prog,
			filepath.Join(root, "lib", "libdthrottle.a"), "-lpthread").CombinedOutput(); err != nil {
			t.Fatalf("building against the installed library: %v\n%s", err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil || strings.TrimSpace(string(out)) != "978ba3b3702b31a0" {
			t.Fatalf("dt_hash(0, abc) = %q (%v), want 978ba3b3702b31a0", out, err)
		}
	})
}
