package protocol

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// needTool returns the path of a command line tool, skipping the test when
// it is missing, or failing it under CI=true (where .ci/run installs it).
func needTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required: %v", name, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
	return path
}

// TestNetcat checks the documented shell use: nc sends the lines, closes its
// sending side, prints every reply and exits.
func TestNetcat(t *testing.T) {
	nc := needTool(t, "nc")
	ts := startServer(t, &recordDecider{}, Config{}, "unix", "tcp")
	cases := []struct {
		name string
		args []string
		in   string
		want string
	}{
		{"unix", []string{"-N", "-U", ts.addr(0).String()}, "aa\nb\n", "OK\nNO\n"},
		{"unix unterminated", []string{"-N", "-U", ts.addr(0).String()}, "aa\nb", "OK\nNO\n"},
		{"tcp CRLF", []string{"-N", "-C", "127.0.0.1", portOf(t, ts.addr(1).String())}, "aa\nb\n", "OK\nNO\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, nc, tc.args...)
			cmd.Stdin = strings.NewReader(tc.in)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("nc %s: %v", strings.Join(tc.args, " "), err)
			}
			if string(out) != tc.want {
				t.Errorf("nc printed %q, want %q", out, tc.want)
			}
		})
	}
}

func portOf(t *testing.T, hostport string) string {
	t.Helper()
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		t.Fatalf("no port in %q", hostport)
	}
	return hostport[i+1:]
}
