package daemon

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestSIGTERMAsSoonAsListening: a SIGTERM that comes the moment the
// daemon's socket appears, before it has logged that it is ready, stops
// it cleanly (exit 0, the socket removed), as a service manager or a
// script may send it: the daemon catches signals before it opens a
// socket. Repeated, since the moment is a race.
func TestSIGTERMAsSoonAsListening(t *testing.T) {
	const runs = 20
	for i := range runs {
		dir := t.TempDir()
		sock := filepath.Join(dir, "d.sock")
		cfg := filepath.Join(dir, "dthrottle.toml")
		// A TCP listener and an admin endpoint too: more to open after the
		// first socket, so a longer moment before the daemon is ready.
		body := "[listen]\nunix = \"" + sock + "\"\ntcp = \"127.0.0.1:0\"\n[admin]\nhttp = \"127.0.0.1:0\"\n"
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(harness.Binary, "-config", cfg)
		var stderr harness.LockedBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Lstat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-done
				t.Fatalf("run %d: no socket after 10s:\n%s", i, stderr.String())
			}
			time.Sleep(50 * time.Microsecond)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: SIGTERM as the socket appeared: %v, want exit 0\n%s", i, err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("run %d: not stopped 10s after SIGTERM:\n%s", i, stderr.String())
		}
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("run %d: socket left behind after a clean stop: %v", i, err)
		}
	}
}
