// Package netns runs a test inside a fresh user and network namespace, so
// that it can send multicast, bind any port and start daemons without a
// single packet reaching the host's own interfaces.
//
// Run re-executes the current test binary, running only the calling test,
// in a child created with CLONE_NEWUSER|CLONE_NEWNET: the caller's uid and
// gid are mapped to 0 inside, which gives the child CAP_NET_ADMIN over its
// own network namespace and nothing more, so it works for an unprivileged
// user where the kernel allows user namespaces. The child's output is
// streamed into the parent's t.Log, and the parent test fails (or skips)
// when the child does. Inside, Run brings lo up, routes 224.0.0.0/4 to it
// and returns true:
//
//	func TestCluster(t *testing.T) {
//		if !netns.Run(t) {
//			return // the test ran in the child
//		}
//		// Only lo exists here; multicast goes over it.
//	}
//
// Processes the test starts inside share its namespace. In a subtest, the
// enclosing tests' bodies run again in the child up to the subtest.
//
// Inside, New makes further network namespaces, one per host of a
// simulated network joined by veth pairs, and NS.Do runs code and starts
// processes in them.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// marker is set in the child's environment to the parent's network
	// namespace (the /proc/self/ns/net link), so the child can check it
	// really is somewhere else.
	marker = "DTHROTTLE_NETNS_PARENT"

	childTimeout = 120 * time.Second // the child's -test.timeout
	killAfter    = 15 * time.Second  // further grace before the parent kills it
	waitDelay    = 5 * time.Second   // for output pipes held open by grandchildren
	ipTimeout    = 10 * time.Second  // per ip command
)

// Inside reports whether this process is the child started by Run, inside
// its own user and network namespace.
func Inside() bool { return os.Getenv(marker) != "" }

// Run runs the calling test inside a new user and network namespace and
// reports whether the caller is inside it.
//
// In the parent, Run starts the child, waits for it (at most about two
// minutes), logs its output and returns false: the caller should return.
// It fails t if the child failed, and skips t if the child skipped. If the
// kernel does not allow unprivileged user namespaces, or iproute2's ip is
// missing, Run skips t, or fails it when the environment has CI=true.
//
// In the child, Run first checks that it is isolated (its network namespace
// differs from the parent's and has no interface but lo), then runs
// "ip link set lo up" and "ip route replace 224.0.0.0/4 dev lo", and
// returns true.
func Run(t *testing.T) (inside bool) {
	t.Helper()
	if Inside() {
		setUp(t)
		return true
	}
	runChild(t)
	return false
}

// runChild runs t.Name() in a child in new namespaces and reports its result.
func runChild(t *testing.T) {
	t.Helper()
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		need(t, "netns: cannot identify this network namespace: %v", err)
	}
	deadline := time.Now().Add(childTimeout + killAfter)
	if d, ok := t.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	cmd := exec.CommandContext(ctx, os.Args[0],
		"-test.run="+runPattern(t.Name()),
		"-test.v",
		"-test.count=1",
		"-test.timeout="+childTimeout.String(),
	)
	cmd.Env = append(os.Environ(), marker+"="+ns)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	out := &logWriter{t: t}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = waitDelay

	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
			errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES) {
			need(t, "netns: cannot create a user and network namespace (are unprivileged user namespaces disabled?): %v", err)
		}
		t.Fatalf("netns: starting %s in a new namespace: %v", os.Args[0], err)
	}
	err = cmd.Wait()
	out.flush()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("netns: %s did not finish inside the namespace by %v; killed", t.Name(), deadline.Format(time.TimeOnly))
	case err != nil:
		t.Fatalf("netns: %s failed inside the namespace: %v", t.Name(), err)
	case out.noTests:
		t.Fatalf("netns: -test.run=%s matched no test in the child", runPattern(t.Name()))
	case out.skipped:
		t.Skipf("netns: %s skipped inside the namespace (see the log above)", t.Name())
	}
}

// runPattern returns the -test.run pattern that matches exactly the test
// or subtest called name: each element of the path anchored and quoted.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// setUp checks the child is isolated and readies lo for multicast.
func setUp(t *testing.T) {
	t.Helper()
	parent := os.Getenv(marker)
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil || ns == parent {
		t.Fatalf("netns: %s is set but this process is not in a network namespace of its own (%q, parent %q, %v); refusing to run", marker, ns, parent, err)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatalf("netns: listing interfaces: %v", err)
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" {
		names := make([]string, len(ifs))
		for i, ifi := range ifs {
			names[i] = ifi.Name
		}
		t.Fatalf("netns: expected only lo in a fresh namespace, found %v; refusing to run", names)
	}
	ip := Tool(t, "ip")
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"route", "replace", "224.0.0.0/4", "dev", "lo"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
		out, err := exec.CommandContext(ctx, ip, args...).CombinedOutput()
		cancel()
		if err != nil {
			msg := fmt.Sprintf("netns: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
			if bytes.Contains(out, []byte("Operation not permitted")) {
				// The namespace exists but grants no capabilities, as
				// under an AppArmor policy restricting user namespaces.
				need(t, "%s", msg)
			}
			t.Fatal(msg)
		}
	}
}

// need reports a missing prerequisite: a failure under CI=true, where
// .ci/run installs everything, else a skip.
func need(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// logWriter passes the child's output to t.Log line by line and notes
// whether the child skipped its test or found none to run.
type logWriter struct {
	t       *testing.T
	mu      sync.Mutex
	buf     []byte
	skipped bool
	noTests bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// flush logs a last line that had no newline.
func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
}

func (w *logWriter) line(s string) {
	w.t.Log("netns child: " + s)
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "--- SKIP: "+w.t.Name()+" ") {
		w.skipped = true
	}
	if strings.HasPrefix(s, "testing: warning: no tests to run") {
		w.noTests = true
	}
}
