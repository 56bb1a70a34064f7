package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// A socket path that something else already has is refused at start with
// one line naming the key, the path and why, exit status 1, the thing
// itself untouched and nothing of the daemon's left behind: for every key
// that takes a socket path and every kind of taken path.
func TestTakenSocketPathRefused(t *testing.T) {
	keys := []struct {
		name string
		set  func(path string) string // the config's lines naming path
	}{
		{"listen.unix", func(p string) string { return fmt.Sprintf("[listen]\nunix = %q\n", p) }},
		{"listen.charge_unix", func(p string) string { return fmt.Sprintf("[listen]\nunix = \"MAIN\"\ncharge_unix = %q\n", p) }},
		{"http.listen", func(p string) string {
			return fmt.Sprintf("[listen]\nunix = \"MAIN\"\n[http]\nlisten = \"unix:%s\"\n", p)
		}},
		{"spoe.listen", func(p string) string {
			return fmt.Sprintf("[listen]\nunix = \"MAIN\"\n[spoe]\nlisten = \"unix:%s\"\n", p)
		}},
		{"rls.listen", func(p string) string {
			return fmt.Sprintf("[listen]\nunix = \"MAIN\"\n[rls]\nlisten = \"unix:%s\"\n", p)
		}},
	}
	kinds := []struct {
		name string
		// take makes the taken path in dir and returns it, with a check
		// that it is as it was.
		take func(t *testing.T, dir, cfg string) (path string, intact func() error)
		why  string // in the error line
	}{
		{"regular file", func(t *testing.T, dir, _ string) (string, func() error) {
			return file(t, filepath.Join(dir, "v.txt"), "data\n")
		}, "exists and is not a socket (a regular file)"},
		{"directory", func(t *testing.T, dir, _ string) (string, func() error) {
			p := filepath.Join(dir, "d")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p, func() error {
				if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
					return fmt.Errorf("directory gone: %v", err)
				}
				return nil
			}
		}, "exists and is not a socket (a directory)"},
		{"symlink", func(t *testing.T, dir, _ string) (string, func() error) {
			target, intact := file(t, filepath.Join(dir, "target"), "kept\n")
			p := filepath.Join(dir, "link.sock")
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			return p, func() error {
				if l, err := os.Readlink(p); err != nil || l != target {
					return fmt.Errorf("link changed: %q, %v", l, err)
				}
				return intact()
			}
		}, "exists and is not a socket (a symbolic link)"},
		{"dangling symlink", func(t *testing.T, dir, _ string) (string, func() error) {
			p := filepath.Join(dir, "dangling.sock")
			if err := os.Symlink(filepath.Join(dir, "nowhere"), p); err != nil {
				t.Fatal(err)
			}
			return p, func() error {
				if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
					return fmt.Errorf("the link's target was made")
				}
				_, err := os.Readlink(p)
				return err
			}
		}, "exists and is not a socket (a symbolic link)"},
		{"the config file", func(t *testing.T, dir, cfg string) (string, func() error) {
			return cfg, func() error { return nil } // compared below with what was written
		}, "must be another file than the config file"},
		{"another socket's lock file", func(t *testing.T, dir, _ string) (string, func() error) {
			return file(t, filepath.Join(dir, "other.sock.lock"), "")
		}, "exists and is not a socket (a regular file)"},
		{"another process's live socket", func(t *testing.T, dir, _ string) (string, func() error) {
			p := filepath.Join(dir, "live.sock")
			l, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return p, func() error {
				c, err := net.DialTimeout("unix", p, time.Second)
				if err != nil {
					return fmt.Errorf("the live socket no longer answers: %v", err)
				}
				return c.Close()
			}
		}, "another process is listening on it"},
	}
	for _, k := range keys {
		for _, kind := range kinds {
			t.Run(k.name+"/"+kind.name, func(t *testing.T) {
				dir := t.TempDir()
				cfg := filepath.Join(dir, "dthrottle.toml")
				path, intact := kind.take(t, dir, cfg)
				text := strings.ReplaceAll(k.set(path), "MAIN", filepath.Join(dir, "main.sock"))
				if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				before := listDir(t, dir)
				code, stderr := runFor(t, "-config", cfg)
				if code != 1 {
					t.Errorf("exit status %d, want 1", code)
				}
				lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
				var errs []string
				for _, l := range lines {
					if strings.Contains(l, "level=ERROR") {
						errs = append(errs, l)
					}
				}
				switch {
				case strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine "):
					t.Fatalf("a stack trace:\n%s", stderr)
				case len(errs) != 1:
					t.Fatalf("%d error lines, want 1:\n%s", len(errs), stderr)
				case !strings.Contains(errs[0], k.name) || !strings.Contains(errs[0], path) || !strings.Contains(errs[0], kind.why):
					t.Errorf("the error line names not the key %s, the path %s and why (%s):\n%s", k.name, path, kind.why, errs[0])
				}
				if err := intact(); err != nil {
					t.Error(err)
				}
				if got, _ := os.ReadFile(cfg); string(got) != text {
					t.Errorf("the config file changed: %q", got)
				}
				if after := listDir(t, dir); !slices.Equal(before, after) {
					t.Errorf("the directory held %q before the start and %q after", before, after)
				}
			})
		}
	}
}

// A socket in a directory that does not exist is refused, and the
// directory is not made.
func TestSocketDirectoryMissing(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "dthrottle.toml")
	sock := filepath.Join(dir, "missing", "q.sock")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[listen]\nunix = %q\n", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr := runFor(t, "-config", cfg)
	if code != 1 || !strings.Contains(stderr, "directory "+filepath.Dir(sock)+" does not exist") {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Dir(sock)); err == nil {
		t.Errorf("the missing directory was made")
	}
}

// Two keys naming one file as the kernel sees it are refused by -check
// as by a start.
func TestCheckComparesResolvedPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(dir, "here")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "dthrottle.toml")
	text := fmt.Sprintf("[listen]\nunix = %q\ncharge_unix = %q\n[state]\nfile = %q\n",
		filepath.Join(dir, "q.sock"), filepath.Join(dir, "c.sock"), filepath.Join(dir, "here", "c.sock"))
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-check", "-config", cfg}, {"-config", cfg}} {
		code, stderr := runFor(t, args...)
		if code != 1 || !strings.Contains(stderr, "state.file") || !strings.Contains(stderr, "must be another file than listen.charge_unix") {
			t.Errorf("%q: exit status %d, stderr:\n%s", args, code, stderr)
		}
	}
}

// runFor runs the command with args, failing the test if it has not
// returned within ten seconds (a start that should fail serving instead).
func runFor(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, &out, &errOut) }()
	code = testkit.Recv(t, done, 10*time.Second, fmt.Sprintf("dthrottled %q to return", args))
	return code, errOut.String()
}

// file writes a file and returns its path with a check that its content
// is still text.
func file(t *testing.T, path, text string) (string, func() error) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, func() error {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != text {
			return fmt.Errorf("%s changed: %q, %v", path, got, err)
		}
		return nil
	}
}

// listDir names what dir holds, with each entry's type.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name()+" "+e.Type().String())
	}
	return names
}
