package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// This file owns the ports the tests give servers to listen on. A port
// the kernel picked with ":0" is an ephemeral one: between closing it and
// the server binding it, any outgoing connection of the same network
// namespace (a test polling a daemon, a daemon asking a peer) may take it
// as its local port, and the server's bind then fails. So a port is
// picked below the namespace's ephemeral range, where only a deliberate
// bind can take it, and checked free.

// ephemeralStart is the first port of the calling namespace's ephemeral
// range (net.ipv4.ip_local_port_range), 32768 when it cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 10000 {
		return 32768
	}
	return n
}

// pickPort returns a TCP port on host below the ephemeral range that was
// free a moment ago.
func pickPort(t testing.TB, host string) int {
	t.Helper()
	hi := ephemeralStart()
	const lo, tries = 10000, 200
	var last error
	for range tries {
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		return port
	}
	t.Fatal(fmt.Errorf("no free port on %s below %d in %d tries: %w", host, hi, tries, last))
	return 0
}

// FreePort returns a loopback TCP port that was free a moment ago, below
// the ephemeral range.
func FreePort(t *testing.T) int {
	t.Helper()
	return pickPort(t, "127.0.0.1")
}
