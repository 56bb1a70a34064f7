// Package daemontest runs a real dthrottled in a test's own process, on a
// Unix socket, for the tests of the packages that talk to one: inproc,
// client and the Caddy module.
package daemontest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/daemon"
)

// Run runs a daemon on the configuration text (TOML, written to a file of
// the test's), whose [listen] unix is sock, and waits at most 10 s until
// sock accepts connections. The daemon stops when stop is called, or at
// the test's end; stop is safe to call more than once.
func Run(t testing.TB, sock, text string) (stop func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("dthrottled not listening on %s after 10 s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			d.Close(time.Second)
		})
	}
	t.Cleanup(stop)
	return stop
}
