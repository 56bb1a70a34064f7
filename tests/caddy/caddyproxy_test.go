package caddy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestCaddy runs Caddy's forward_auth way, which needs no build, with
// contrib/caddy/Caddyfile in front of the daemon's HTTP endpoint.
func TestCaddy(t *testing.T) {
	caddy := harness.RequireTool(t, "caddy")
	d, httpAddr := harness.StartHTTPDaemon(t, fmt.Sprintf(harness.ProxyDaemonConfig, 429))
	dir, www := harness.ProxySite(t)
	port, open := harness.FreePort(t), harness.FreePort(t)
	file := harness.ContribConfig(t, "caddy/Caddyfile",
		":8080 {", fmt.Sprintf("http://127.0.0.1:%d {", port),
		"root * /var/www/html", "root * "+www,
		"127.0.0.1:7073", fmt.Sprintf("127.0.0.1:%d", open),
		"forward_auth 127.0.0.1:7072 ", "forward_auth "+httpAddr+" ")
	conf := filepath.Join(dir, "Caddyfile")
	harness.Must(t, os.WriteFile(conf, []byte(file), 0o644))
	cmd := exec.Command(caddy, "run", "--config", conf, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	log := filepath.Join(dir, "caddy.log")
	harness.RunProxy(t, cmd, port, log)
	harness.CheckThrottled(t, fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), d, log)
}
