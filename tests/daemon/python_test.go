package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// pythonEnv keeps Python from writing bytecode into the source tree.
var pythonEnv = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")

// TestPythonUnit runs contrib/python's unittest suite (fake daemons, no
// network beyond Unix sockets in temp dirs).
func TestPythonUnit(t *testing.T) {
	py := harness.RequireTool(t, "python3")
	cmd := exec.Command(py, "-W", "error::ResourceWarning", "-m", "unittest", "-v", "test_dthrottle_wsgi")
	cmd.Dir = "../../contrib/python"
	cmd.Env = pythonEnv
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("\nOK")) {
		t.Fatalf("unittest did not report OK:\n%s", out)
	}
}

// TestPythonWSGI serves contrib/python/example.py with wsgiref in front of
// a real dthrottled: burst 3 for GET / by client address, burst 1 for POST
// /login under the "login:" policy; then, with dthrottled stopped, every
// request is served (fail open).
func TestPythonWSGI(t *testing.T) {
	py := harness.RequireTool(t, "python3")
	d := harness.StartDaemon(t, harness.Burst3+`
[[policy]]
name = "login"
prefix = "login:"
rate = 0.001
burst = 1
`)
	base := startExample(t, py, d.Sock)
	hc := http.Client{Timeout: 10 * time.Second}
	do := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		harness.Must(t, err)
		resp, err := hc.Do(req)
		harness.Must(t, err)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for i, step := range []struct {
		method, path string
		status       int
	}{
		{"POST", "/login", 200},
		{"POST", "/login", 429}, // login: burst 1
		{"GET", "/", 200},       // the default bucket is another one
		{"GET", "/", 200},
		{"GET", "/login", 200}, // GET /login is not the login rule: default bucket
		{"GET", "/", 429},      // default: burst 3
	} {
		status, retry := do(step.method, step.path)
		wantRetry := ""
		if step.status == 429 {
			wantRetry = "1"
		}
		if status != step.status || retry != wantRetry {
			t.Fatalf("step %d: %s %s: status %d, Retry-After %q; want %d, %q", i, step.method, step.path, status, retry, step.status, wantRetry)
		}
	}
	d.Stop(t)
	for i := range 3 {
		if status, _ := do("POST", "/login"); status != 200 {
			t.Fatalf("dthrottled stopped, request %d: status %d, want 200 (fail open)", i, status)
		}
	}
}

// startExample runs example.py on a free port against sock and returns
// its base URL once it listens.
func startExample(t *testing.T, py, sock string) string {
	t.Helper()
	// A long timeout: a loaded CI machine must not turn an answer into a
	// fail-open by a slow reply. An absent daemon still fails at once.
	cmd := exec.Command(py, "example.py", "-socket", sock, "-port", "0", "-timeout", "2")
	cmd.Dir = "../../contrib/python"
	cmd.Env = pythonEnv
	stderr := &harness.LockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	harness.Must(t, err)
	harness.Must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("example.py did not stop within 10s of SIGTERM")
		}
	})
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		var url string
		if _, err := fmt.Sscanf(line, "listening on %s", &url); err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
			t.Fatalf("example.py printed %q, want its address\n%s", line, stderr)
		}
		return strings.TrimSuffix(url, "/")
	case <-time.After(10 * time.Second):
		t.Fatalf("example.py did not start within 10s\n%s", stderr)
		return ""
	}
}
