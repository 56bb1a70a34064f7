package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// BuildCaddyShared builds Caddy with the dthrottle module, as the README
// says to, once for every test package, and returns its path. The build
// goes through the Go module proxy; it takes a minute or two on a cold
// build cache.
func BuildCaddyShared(t *testing.T) string {
	t.Helper()
	RequireTool(t, "go")
	bash := RequireTool(t, "bash")
	dir := Build(t, "caddy-dthrottle", func(dir string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		cmd := exec.CommandContext(ctx, bash, Path("contrib/caddy/build.sh"), filepath.Join(dir, "caddy-dthrottle"))
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("contrib/caddy/build.sh: %v\n%s", err, b)
		}
		t.Logf("built Caddy with the dthrottle module in %v", time.Since(start).Round(time.Second))
		return nil
	})
	return filepath.Join(dir, "caddy-dthrottle")
}

// caddySharedConfig is contrib/caddy/Caddyfile.shared re-pointed at sock
// and www, with three sites on 127.0.0.1: on ports[0] the shipped site
// (the client's address as the tag); on ports[1] the same with the X-Tag
// header, else the query's tag argument, as the tag; on ports[2] that
// with fail closed. A query asked over the socket may take 2 s: on a
// loaded machine a slow answer must not turn into a fail-mode one.
// Request headers may be 256 KB (Caddy's default: 16 KB), for a tag
// longer than the line protocol's 64 KiB.
func caddySharedConfig(t *testing.T, sock, www string, ports [3]int) string {
	t.Helper()
	file := ContribConfig(t, "caddy/Caddyfile.shared",
		"\tadmin off\n", "\tadmin off\n\tservers {\n\t\tmax_header_size 256KB\n\t}\n",
		"/run/dthrottle/dthrottle.sock", sock,
		"root * /var/www/html", "root * "+www,
		"# timeout 5ms", "timeout 2s")
	i := strings.Index(file, ":8080 {")
	if i < 0 {
		t.Fatal("contrib/caddy/Caddyfile.shared has no :8080 site")
	}
	head, site := file[:i], file[i:]
	replace := func(s, old, new string) string {
		t.Helper()
		if !strings.Contains(s, old) {
			t.Fatalf("contrib/caddy/Caddyfile.shared has no %q to replace", old)
		}
		return strings.Replace(s, old, new, 1)
	}
	on := func(s string, port int) string {
		return replace(s, ":8080 {", fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1", port))
	}
	tagged := replace(site, "dthrottle {remote_host} {", "dthrottle {header.X-Tag}{query.tag} {")
	closed := replace(tagged, "fail open", "fail closed")
	return head + on(site, ports[0]) + "\n" + on(tagged, ports[1]) + "\n" + on(closed, ports[2])
}

// caddyProc is a Caddy run by a test.
type caddyProc struct {
	cmd  *exec.Cmd
	done chan error
	Log  string
}

// runCaddyShared runs bin on the Caddyfile conf, its files in dir and its
// output appended to log, until the test ends, and waits until port
// accepts connections.
func runCaddyShared(t *testing.T, bin, conf, dir, log string, port int) *caddyProc {
	t.Helper()
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Must(t, err)
	p := &caddyProc{cmd: exec.Command(bin, "run", "--config", conf, "--adapter", "caddyfile"), done: make(chan error, 1), Log: log}
	p.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	Must(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait(); out.Close() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState != nil {
			return
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return p
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("caddy exited before listening: %v\n%s", err, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy not listening on %d after 10s\n%s", port, p.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *caddyProc) Kill(t *testing.T) {
	t.Helper()
	Must(t, p.cmd.Process.Kill())
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("caddy still running 10s after SIGKILL")
	}
}

func (p *caddyProc) output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// StartCaddyShared runs the Caddy built with the module on
// caddySharedConfig for the daemon's socket sock, and returns the URLs
// of its three sites' /hello.txt, the process, and a function that runs
// it again on the same ports.
func StartCaddyShared(t *testing.T, sock string) (urls [3]string, p *caddyProc, restart func() *caddyProc) {
	t.Helper()
	bin := BuildCaddyShared(t)
	dir, www := ProxySite(t)
	var ports [3]int
	for i := range ports {
		ports[i] = FreePort(t)
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d/hello.txt", ports[i])
	}
	conf := filepath.Join(dir, "Caddyfile")
	Must(t, os.WriteFile(conf, []byte(caddySharedConfig(t, sock, www, ports)), 0o644))
	log := filepath.Join(dir, "caddy.log")
	restart = func() *caddyProc {
		t.Helper()
		p := runCaddyShared(t, bin, conf, dir, log, ports[0])
		for _, port := range ports[1:] {
			awaitPort(t, port, p)
		}
		return p
	}
	return urls, restart(), restart
}

// awaitPort waits until the Caddy p accepts connections on port.
func awaitPort(t *testing.T, port int, p *caddyProc) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("caddy to listen on %d", port), func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// AwaitInProcess waits until the Caddy behind u decides in process: a
// request that the daemon d counts as decided without being asked over
// its socket.
func AwaitInProcess(t *testing.T, u string, d *Daemon, log string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "caddy to decide in process", func() bool {
		socket0, decided0 := SharedCounts(t, d)
		SharedGet(t, u, "warm-up", log)
		socket1, decided1 := SharedCounts(t, d)
		return socket1 == socket0 && decided1 == decided0+1
	})
}
