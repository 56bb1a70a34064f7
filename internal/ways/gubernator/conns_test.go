package gubernator

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	guber "github.com/gubernator-io/gubernator/v2"
)

// rawConn dials addr and sends b.
func rawConn(t *testing.T, addr, b string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, b); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBadInput: garbage on either listener gets a defined answer or a
// clean close, and the server goes on answering.
func TestBadInput(t *testing.T) {
	_, grpcAddr, httpAddr := startServer(t, counting(3), Config{})
	// Not HTTP/2 on the gRPC listener: the connection is closed (reset,
	// as the request was not read), well before the read's deadline.
	c := rawConn(t, grpcAddr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("garbage on the gRPC listener: %v, want it closed", err)
	}
	// Not HTTP on the HTTP listener: 400.
	c = rawConn(t, httpAddr, "\x00\x01garbage\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Errorf("garbage on the HTTP listener: %q, %v; want 400", line, err)
	}
	// HTTP/2's preface on the HTTP listener is no way in to the gRPC
	// server: net/http answers it as HTTP/1.1 would.
	c = rawConn(t, httpAddr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || strings.Contains(line, " 200 ") {
		t.Errorf("HTTP/2 preface on the HTTP listener: %q, %v", line, err)
	}
	// An unknown path and a wrong method: grpc-gateway's answers, as
	// Gubernator's gateway gives them.
	for _, tc := range []struct{ req, status string }{
		{"GET /v1/Nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 404"},
		{"GET /v1/GetRateLimits HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 501"},
	} {
		c = rawConn(t, httpAddr, tc.req)
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, tc.status) {
			t.Errorf("%q: %q, %v; want %s", tc.req, line, err, tc.status)
		}
	}
	resp, err := dial(t, grpcAddr).GetRateLimits(ctx(t), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
		{Name: "n", UniqueKey: "k", Hits: 1, Limit: 3, Duration: 1000}}})
	if err != nil || resp.Responses[0].Status != guber.Status_UNDER_LIMIT {
		t.Errorf("after the garbage: %v, %v", resp, err)
	}
}

// TestMaxConns: a connection over MaxConns, on either listener, is
// closed at once.
func TestMaxConns(t *testing.T) {
	s, grpcAddr, httpAddr := startServer(t, counting(3), Config{MaxConns: 1})
	rawConn(t, httpAddr, "") // holds the one place, sending nothing
	testkit.WaitFor(t, 5*time.Second, "the first connection taken into service", func() bool { return s.Stats().Active == 1 })
	for _, addr := range []string{grpcAddr, httpAddr} {
		c := rawConn(t, addr, "")
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Errorf("a connection over max_conns to %s: read %d, %v; want closed", addr, n, err)
		}
	}
	if st := s.Stats(); st.Rejected != 2 {
		t.Errorf("Rejected = %d, want 2", st.Rejected)
	}
}
