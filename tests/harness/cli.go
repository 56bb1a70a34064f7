package harness

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CLIBinary builds cmd/dthrottle once for every test package, and
// returns its path.
func CLIBinary(t *testing.T) string {
	t.Helper()
	return filepath.Join(Build(t, "dthrottle", func(dir string) error {
		return goBuild(dir, "dthrottle", "./cmd/dthrottle")
	}), "dthrottle")
}

// RunCLI runs dthrottle with args and stdin, returning its exit status and
// output.
func RunCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(CLIBinary(t), args...)
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
