package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// This file runs HAProxy on contrib/haproxy/haproxy-peers.cfg, its stick
// table's peer a dthrottled, and asks it as clients from several
// loopback addresses, each a tag of its own.

// PeersProxy is an HAProxy running haproxy-peers.cfg.
type PeersProxy struct {
	URL  string    // the frontend's URL
	Log  string    // HAProxy's output
	Cmd  *exec.Cmd // the HAProxy process (the master with MasterWorker)
	Conf string
}

// PeersOptions changes the shipped configuration for a test.
type PeersOptions struct {
	Bind         string // the frontend's address; "" picks a free port on 127.0.0.1
	Dthrottled   string // dthrottled's haproxy.listen
	Local        string // HAProxy's own peer address; "" picks a free port on 127.0.0.1
	MasterWorker bool   // run with -W, so that SIGUSR2 reloads
}

// StartHAProxyPeers runs HAProxy on haproxy-peers.cfg re-pointed by o,
// until the test ends, and waits until it listens.
func StartHAProxyPeers(t *testing.T, o PeersOptions) *PeersProxy {
	t.Helper()
	haproxy := RequireSbin(t, "haproxy")
	dir, _ := ProxySite(t)
	if o.Bind == "" {
		o.Bind = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	}
	if o.Local == "" {
		o.Local = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	}
	cfg := ContribConfig(t, "haproxy/haproxy-peers.cfg",
		"bind :8080", "bind "+o.Bind,
		"peer haproxy 127.0.0.1:7077", "peer haproxy "+o.Local,
		"peer dthrottled 127.0.0.1:7076", "peer dthrottled "+o.Dthrottled)
	p := &PeersProxy{URL: "http://" + o.Bind + "/", Log: filepath.Join(dir, "haproxy.log"), Conf: filepath.Join(dir, "haproxy.cfg")}
	Must(t, os.WriteFile(p.Conf, []byte(cfg), 0o644))
	args := []string{"-db", "-f", p.Conf}
	if o.MasterWorker {
		args = append([]string{"-W"}, args...)
	}
	p.Cmd = exec.Command(haproxy, args...)
	_, port, _ := net.SplitHostPort(o.Bind)
	if host, _, _ := net.SplitHostPort(o.Bind); host == "127.0.0.1" {
		var n int
		fmt.Sscan(port, &n)
		RunProxy(t, p.Cmd, n, p.Log)
	} else {
		runProxyAt(t, p.Cmd, o.Bind, p.Log)
	}
	return p
}

// runProxyAt is RunProxy for a proxy listening on addr.
func runProxyAt(t *testing.T, cmd *exec.Cmd, addr, log string) {
	t.Helper()
	out, err := os.Create(log)
	Must(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); out.Close() })
	testkit.WaitFor(t, 10*time.Second, "HAProxy listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// Output is what HAProxy logged.
func (p *PeersProxy) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// ClientFrom is an HTTP client whose connections come from the loopback
// address src (127.0.0.2, ...): a tag of its own in a table keyed by src.
func ClientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:         func(ctx context.Context, n, a string) (net.Conn, error) { return d.DialContext(ctx, n, a) },
		MaxIdleConnsPerHost: 4,
	}}
}

// Status sends one request to u with c and returns its status and
// Retry-After.
func Status(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Retry-After")
}

// Statuses sends n requests to u with c, one after another, and returns
// their statuses as "200 200 429".
func Statuses(t *testing.T, c *http.Client, u string, n int) string {
	t.Helper()
	var s []string
	for range n {
		code, _ := Status(t, c, u)
		s = append(s, fmt.Sprint(code))
	}
	return strings.Join(s, " ")
}
