package netns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// here returns the network namespace of the calling goroutine's thread.
func here(t *testing.T) string {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	id, err := os.Readlink(threadNS())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// ip runs iproute2's ip with args, in the calling thread's namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, Command("ip"), args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestNew makes a namespace, checks it is empty and apart, joins it to
// this one with a veth pair, and sends a datagram across.
func TestNew(t *testing.T) {
	if !Run(t) {
		return
	}
	outer := here(t)
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	id, err := os.Readlink(ns.Path())
	if err != nil || id == outer || !strings.HasPrefix(id, "net:[") {
		t.Fatalf("Path %s links to %q (%v); this namespace is %q", ns.Path(), id, err, outer)
	}
	if got := here(t); got != outer {
		t.Fatalf("New left this goroutine's thread in %s, want %s", got, outer)
	}

	// Inside Do, the thread and the processes it starts are in ns.
	var inner, child string
	err = ns.Do(func() error {
		inner = here(t)
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp != 0 {
			t.Errorf("interfaces in a new namespace: %v, want only lo, down", ifs)
		}
		out, err := exec.Command("readlink", "/proc/self/ns/net").Output()
		child = strings.TrimSpace(string(out))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if inner != id || child != id {
		t.Fatalf("in Do: thread in %s, child process in %s; want both in %s", inner, child, id)
	}
	if got := here(t); got != outer {
		t.Fatalf("after Do, thread in %s, want %s", got, outer)
	}
	wantErr := errors.New("from f")
	if err := ns.Do(func() error { return wantErr }); err != wantErr {
		t.Fatalf("Do returned %v, want f's error", err)
	}

	// A veth pair made here with its peer in ns, by Path.
	ip(t, "link", "add", "vx", "type", "veth", "peer", "name", "vy", "netns", ns.Path())
	ip(t, "addr", "add", "10.99.0.1/24", "dev", "vx")
	ip(t, "link", "set", "vx", "up")
	var c *net.UDPConn
	err = ns.Do(func() error {
		ip(t, "link", "set", "lo", "up")
		ip(t, "addr", "add", "10.99.0.2/24", "dev", "vy")
		ip(t, "link", "set", "vy", "up")
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.99.0.2:0")))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := net.InterfaceByName("vy"); err == nil {
		t.Fatal("vy is visible outside ns")
	}
	// The socket lives in ns whichever thread reads it; this side reaches
	// it over the veth pair only.
	s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, 16)
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The first datagrams may go while the neighbour is resolved.
		if _, err := s.Write([]byte("across")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, from, err := c.ReadFromUDP(buf)
		if err == nil {
			if string(buf[:n]) != "across" || from.IP.String() != "10.99.0.1" {
				t.Fatalf("got %q from %v, want \"across\" from 10.99.0.1", buf[:n], from)
			}
			return
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || time.Now().After(deadline) {
			t.Fatalf("no datagram across the veth pair: %v", err)
		}
	}
}

func TestCommand(t *testing.T) {
	if p := Command("sh"); p == "" || Tool(t, "sh") != p {
		t.Fatalf("Command(\"sh\") = %q, Tool found %q", p, Tool(t, "sh"))
	}
	if p := Command("no-such-tool-dthrottle"); p != "" {
		t.Fatalf("Command found %q for a tool that does not exist", p)
	}
}
