package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/client"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// newClient returns a client.Client for the daemon at sock, with a timeout
// no healthy query reaches even on a loaded machine.
func newClient(t testing.TB, sock string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Address: sock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClientBurst: many goroutines spend 200 tags, each asked five times,
// pipelined on the client's one connection: exactly three OK per tag
// (burst 3), whatever the interleaving.
func TestClientBurst(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	c := newClient(t, d.Sock)
	const tags, asks = 200, 5
	var served [tags]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, tags*asks)
	for i := range tags * asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := c.Allow(context.Background(), "tag"+strconv.Itoa(i%tags))
			if err != nil {
				errs <- err
			}
			if ok {
				served[i%tags].Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range served {
		if n := served[i].Load(); n != 3 {
			t.Fatalf("tag%d served %d times, want 3 (burst)", i, n)
		}
	}
	if s := c.Stats(); s.OK != tags*3 || s.NO != tags*2 || s.Dials != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestClientDaemonRestart: the daemon stops (queries fail open at once),
// then comes back on the same socket; the client finds it again by itself.
func TestClientDaemonRestart(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	c := newClient(t, d.Sock)
	if ok, err := c.Allow(context.Background(), "a"); !ok || err != nil {
		t.Fatalf("first query: %v, %v", ok, err)
	}
	d.Stop(t)
	ok, err := c.Allow(context.Background(), "a")
	if !ok || err == nil {
		t.Fatalf("daemon stopped: got %v, %v; want true (fail open) and an error", ok, err)
	}
	harness.RunDaemon(t, d.Sock, nil, d.Cmd.Args[1:]...)
	// The client backs off (10 ms, doubling) after the failure: poll.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err = c.Allow(context.Background(), "b")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from the restarted daemon within 10s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := c.Stats(); !ok || s.Reconnects == 0 {
		t.Fatalf("after the restart: %v, stats %+v; want OK on a new connection", ok, s)
	}
}

// TestClientMiddleware is docs/integrations/go.md's example: an HTTP server throttled
// by client address; burst 3, so the fourth request gets 429.
func TestClientMiddleware(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	// As in docs/integrations/go.md:
	c, err := client.New(client.Config{Address: d.Sock, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(c.Middleware(client.RemoteIP)(app))
	defer srv.Close()

	for i, want := range []int{200, 200, 200, 429} {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
		// Asked over the socket, the client knows no more than the
		// answer: Retry-After: 1. Decided in process (once the client has
		// attached in the background), the bucket's: a token every
		// 1000 s, and the RateLimit headers.
		ra, pol := resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit-Policy")
		if want == 429 && ra != "1" && (ra != "1000" || pol != `"default";q=3;w=3000`) {
			t.Fatalf("429 without Retry-After: 1, or the bucket's headers: %v", resp.Header)
		}
	}
	d.Stop(t)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("daemon stopped: status %d, want 200 (fail open)", resp.StatusCode)
	}
}

// BenchmarkClientRealDaemon: 64 goroutines per CPU asking the dthrottled
// binary (another process) through one client over a Unix socket, over
// 10,000 tags, with 1 and 2 pooled connections. One op is one query.
func BenchmarkClientRealDaemon(b *testing.B) {
	sock := benchDaemon(b)
	tags := make([]string, 10000)
	for i := range tags {
		tags[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
	}
	for _, conns := range []int{1, 2} {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) {
			c, err := client.New(client.Config{Address: sock, Timeout: 2 * time.Second, Conns: conns})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var seq atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := seq.Add(7919)
				for pb.Next() {
					if _, err := c.Allow(ctx, tags[i%uint64(len(tags))]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}

// benchDaemon runs the dthrottled binary with limits no benchmark reaches
// and returns its socket. (startDaemon needs a *testing.T.)
func benchDaemon(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "dthrottle-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	conf := filepath.Join(dir, "dthrottle.toml")
	toml := fmt.Sprintf("[listen]\nunix = %q\n[limit]\nrate = 1000000000\nburst = 1000000\n", sock)
	if err := os.WriteFile(conf, []byte(toml), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(harness.Binary, "-config", conf)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return sock
		}
		if time.Now().After(deadline) {
			b.Fatalf("dthrottled not listening after 10s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
