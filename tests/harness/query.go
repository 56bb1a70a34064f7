package harness

import (
	"io"
	"net"
	"testing"
	"time"
)

// This file owns the two ways the cluster tests query a daemon's line
// protocol socket: one query on a fresh connection, and many pipelined.

// Ask sends one query over a fresh connection and returns the answer.
func Ask(t *testing.T, sock, tag string) bool {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(tag + "\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := ReadFull(c, buf); err != nil {
		t.Fatalf("query %q on %s: %v", tag, sock, err)
	}
	switch string(buf) {
	case "OK\n":
		return true
	case "NO\n":
		return false
	}
	t.Fatalf("query %q: reply %q", tag, buf)
	return false
}

// Pipeline writes in on one connection, half-closes it and returns every
// reply.
func Pipeline(t *testing.T, sock, in string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading replies: %v", err)
	}
	return string(out)
}
