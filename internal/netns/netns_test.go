package netns

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestIsolated checks the child sees nothing of the host's network: lo is
// its only interface, and it is up with the multicast route on it.
func TestIsolated(t *testing.T) {
	if !Run(t) {
		return
	}
	if !Inside() {
		t.Fatal("Run returned true outside the namespace")
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 {
		t.Fatalf("got %d interfaces %v, want only lo", len(ifs), ifs)
	}
	lo := ifs[0]
	if lo.Name != "lo" || lo.Flags&net.FlagUp == 0 || lo.Flags&net.FlagLoopback == 0 {
		t.Fatalf("got interface %s flags %v, want lo up and loopback", lo.Name, lo.Flags)
	}
	if uid := os.Getuid(); uid != 0 {
		t.Errorf("uid inside = %d, want 0 (mapped from the caller's)", uid)
	}
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	// 224.0.0.0/4 in /proc/net/route: destination 000000E0, mask 000000F0
	// (little-endian hex), on lo.
	if !regexp.MustCompile(`(?m)^lo\s+000000E0\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+000000F0`).Match(routes) {
		t.Errorf("no 224.0.0.0/4 route on lo in /proc/net/route:\n%s", routes)
	}
}

// TestLoopbackWorks checks that lo carries traffic inside: an UDP datagram
// to 127.0.0.1 arrives.
func TestLoopbackWorks(t *testing.T) {
	if !Run(t) {
		return
	}
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteTo([]byte("ping"), c.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _, err := c.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("got %q, %v; want ping", buf[:n], err)
	}
}

// TestSubtest checks Run targets a subtest alone: its sibling must not run
// in the child, where it would fail.
func TestSubtest(t *testing.T) {
	t.Run("sibling", func(t *testing.T) {
		if Inside() {
			t.Fatal("sibling subtest ran inside the namespace")
		}
	})
	t.Run("in side[1]", func(t *testing.T) {
		if !Run(t) {
			return
		}
		if ifs, err := net.Interfaces(); err != nil || len(ifs) != 1 {
			t.Fatalf("interfaces %v, %v; want only lo", ifs, err)
		}
	})
}

func TestRunPattern(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"TestA", `^TestA$`},
		{"TestA/sub", `^TestA$/^sub$`},
		{"TestA/in_side[1]/x.y", `^TestA$/^in_side\[1\]$/^x\.y$`},
	} {
		if got := runPattern(c.name); got != c.want {
			t.Errorf("runPattern(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

// demo selects what TestDemo does inside; unset, TestDemo does nothing.
const demo = "DTHROTTLE_NETNS_DEMO"

// TestDemo is run by TestOutcome, in a separate process, to show how Run
// reports a child that fails or skips.
func TestDemo(t *testing.T) {
	mode := os.Getenv(demo)
	if mode == "" {
		t.Skip("run by TestOutcome")
	}
	if !Run(t) {
		return
	}
	switch mode {
	case "fail":
		t.Fatal("failing inside on purpose")
	case "skip":
		t.Skip("skipping inside on purpose")
	}
}

// TestOutcome checks that a failure inside the namespace fails the parent
// test and a skip inside skips it.
func TestOutcome(t *testing.T) {
	if Inside() {
		t.Fatal("TestOutcome ran inside")
	}
	for _, c := range []struct {
		mode    string
		wantErr bool
		want    string
	}{
		{"fail", true, "--- FAIL: TestDemo"},
		{"skip", false, "--- SKIP: TestDemo"},
		{"pass", false, "--- PASS: TestDemo"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), childTimeout+killAfter+10*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDemo$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), demo+"="+c.mode, "CI=")
		out, err := cmd.CombinedOutput()
		cancel()
		if strings.Contains(string(out), "cannot create a user and network namespace") {
			t.Skipf("no user namespaces here:\n%s", out)
		}
		if (err != nil) != c.wantErr {
			t.Errorf("%s: exit error %v, want error %v; output:\n%s", c.mode, err, c.wantErr, out)
		}
		// The parent's own verdict is the last line of that kind, not
		// indented (the child's lines are logged with a prefix).
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(c.want) + ` `).Match(out) {
			t.Errorf("%s: no %q line in output:\n%s", c.mode, c.want, out)
		}
		if !strings.Contains(string(out), "netns child: === RUN   TestDemo") {
			t.Errorf("%s: the child's output was not logged:\n%s", c.mode, out)
		}
	}
}
