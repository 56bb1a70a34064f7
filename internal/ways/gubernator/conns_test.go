package gubernator

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
	guber "github.com/gubernator-io/gubernator/v2"
	"golang.org/x/net/http2"
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

// TestTimeouts, on fake time: on either listener, a connection whose
// handshake (gRPC's preface and SETTINGS, HTTP's request head) does not
// come is closed exactly HandshakeTimeout after it was made, and one with
// no request exactly IdleTimeout after its last answer.
func TestTimeouts(t *testing.T) {
	const handshake, idle = 100 * time.Millisecond, 300 * time.Millisecond
	closedAfter := func(t *testing.T, c net.Conn, start time.Time, want time.Duration, what string) {
		t.Helper()
		io.Copy(io.Discard, c)
		if took := time.Since(start); took != want {
			t.Errorf("%s: closed after %v, want %v", what, took, want)
		}
	}
	for _, tc := range []struct {
		name string
		grpc bool
		sent string
	}{
		{"gRPC, nothing sent", true, ""},
		{"gRPC, the preface without SETTINGS", true, http2.ClientPreface},
		{"HTTP, nothing sent", false, ""},
		{"HTTP, a head cut short", false, "POST /v1/GetRateLimits HTTP/1.1\r\nHost:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, grpcL, httpL := startMem(t, counting(3), Config{HandshakeTimeout: handshake, IdleTimeout: idle})
				l := httpL
				if tc.grpc {
					l = grpcL
				}
				start := time.Now()
				c, err := l.Dial()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, tc.sent)
				closedAfter(t, c, start, handshake, "a handshake not done")
				synctest.Wait()
				if n := s.Stats().Active; n != 0 {
					t.Errorf("%d connections active", n)
				}
			})
		})
	}
	t.Run("gRPC, idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, grpcL, _ := startMem(t, counting(3), Config{HandshakeTimeout: handshake, IdleTimeout: idle})
			c := h2test.DialMem(t, grpcL)
			req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{Name: "n", UniqueKey: "k", Hits: 1, Limit: 3, Duration: 1000}}}
			c.Call(1, guber.V1_GetRateLimits_FullMethodName, req)
			data := 0
			if _, err := c.NextEnd(1, &data); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for {
				f, err := c.Next()
				if err != nil {
					t.Fatalf("closed without GOAWAY: %v", err)
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					if took := time.Since(start); g.ErrCode != http2.ErrCodeNo || took != idle {
						t.Errorf("GOAWAY %v after %v, want NO_ERROR after the idle timeout (%v)", g.ErrCode, took, idle)
					}
					break
				}
			}
		})
	})
	t.Run("HTTP, idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, _, httpL := startMem(t, counting(3), Config{HandshakeTimeout: handshake, IdleTimeout: idle})
			c, err := httpL.Dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			body := `{"requests":[{"name":"n","unique_key":"k","hits":"1","limit":"3","duration":"1000"}]}`
			io.WriteString(c, "POST /v1/GetRateLimits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
			r := bufio.NewReader(c)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			start := time.Now()
			if _, err := r.ReadByte(); err != io.EOF {
				t.Errorf("an idle connection: read %v, want EOF", err)
			}
			if took := time.Since(start); took != idle {
				t.Errorf("an idle connection: closed after %v, want the idle timeout (%v)", took, idle)
			}
		})
	})
}
