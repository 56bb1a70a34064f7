package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// libdthrottleDir is the C library's source, from this package.
var libdthrottleDir = Path("libdthrottle")

// CopyLibdthrottleTo copies the library's sources (not what was built in
// the tree) into dst, made if need be.
func CopyLibdthrottleTo(dst string) error {
	return copySources(libdthrottleDir, dst, "Makefile", ".c", ".h", ".supp")
}

// copySources copies the regular files of src whose names are among
// names or end in one of them (".c") into dst, which it makes; a source
// directory with none of them is an error.
func copySources(src, dst string, names ...string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !slices.ContainsFunc(names, func(s string) bool {
			return name == s || strings.HasPrefix(s, ".") && strings.HasSuffix(name, s)
		}) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, name), b, 0o644)
		}
		if err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no sources in %s", src)
	}
	return nil
}

// RunMake runs make with args in dir, failing the test with its output.
func RunMake(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"-C", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// RunMakeIn runs make -s target in dir, for a build.
func RunMakeIn(dir, target string) error {
	cmd := exec.Command("make", "-s", target)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make %s: %v\n%s", target, err, out)
	}
	return nil
}
