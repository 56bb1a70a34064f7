package caddydthrottle

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/dthrottle/dthrottle/client"
)

// TestCaddyRun runs Caddy in the test's process on a Caddyfile with the
// directive outside a route, against a real daemon: burst 3, then 429
// with the headers; a reload keeps the client (still attached, no new
// attach) and applies the new status; stopping Caddy closes it.
func TestCaddyRun(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"} {
		t.Setenv(k, dir)
	}
	sock := filepath.Join(dir, "d.sock")
	runDaemon(t, sock, "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	load := func(status int) {
		t.Helper()
		file := fmt.Sprintf(`{
	admin off
	persist_config off
}

http://%s {
	dthrottle {header.X-Tag} {
		socket %s
		timeout 1s
		status %d
	}
	respond "hello"
}
`, addr, sock, status)
		cfg, err := adapt(t, file)
		must(t, err)
		must(t, caddy.Load([]byte(cfg), true))
	}
	load(429)
	t.Cleanup(func() { caddy.Stop() })

	hc := &http.Client{Timeout: 5 * time.Second}
	try := func(tag string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Header.Set("X-Tag", tag)
		res, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res, nil
	}
	get := func(tag string) *http.Response {
		t.Helper()
		res, err := try(tag)
		must(t, err)
		return res
	}
	// The client attaches to the shared table in the background after
	// its first answer from the socket; wait for it (bounded), so that
	// the burst below is decided in process and carries the headers.
	get("warm")
	key := poolKey{socket: sock, timeout: time.Second}
	c := pooledClient(t, key)
	for deadline := time.Now().Add(5 * time.Second); c.Stats().Attaches == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	var codes []int
	var res *http.Response
	for range 4 {
		res = get("r")
		codes = append(codes, res.StatusCode)
	}
	if fmtInts(codes) != "200 200 200 429" {
		t.Fatalf("four requests: %v", codes)
	}
	if got := res.Header.Get("RateLimit-Policy"); got != `"default";q=3;w=3000` {
		t.Errorf("RateLimit-Policy %q", got)
	}

	attaches := c.Stats().Attaches
	if attaches != 1 {
		t.Errorf("%d attaches, want 1: %+v", attaches, c.Stats())
	}
	load(503)
	// The old configuration's server closes its connections as it
	// shuts down; one the client holds, or one it accepted just before,
	// ends in EOF. Ask again on a new connection, a few times at most.
	hc.CloseIdleConnections()
	res, err = try("r")
	for i := 0; err != nil && i < 50; i++ {
		time.Sleep(100 * time.Millisecond)
		hc.CloseIdleConnections()
		res, err = try("r")
	}
	must(t, err)
	if res.StatusCode != 503 {
		t.Errorf("after a reload with status 503: %s", res.Status)
	}
	if c2 := pooledClient(t, key); c2 != c || c.Stats().Attaches != attaches || c.Stats().InProcess == 0 {
		t.Errorf("the reload changed the client or attached again: %+v", c2.Stats())
	}
	must(t, caddy.Stop())
	if n, ok := clients.References(key); ok {
		t.Errorf("Caddy stopped, the client still has %d references", n)
	}
}

// pooledClient returns the pool's client for k, which must be there.
func pooledClient(t *testing.T, k poolKey) *client.Client {
	t.Helper()
	var found *client.Client
	clients.Range(func(key, v any) bool {
		if key == k {
			found = v.(pooled).Client
		}
		return true
	})
	if found == nil {
		t.Fatalf("no client for %+v in the pool", k)
	}
	return found
}
