package nginx

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestNginx runs nginx's auth_request way, which needs no build, with
// contrib/nginx/dthrottle.conf in front of the daemon's HTTP endpoint.
func TestNginx(t *testing.T) {
	nginx := harness.RequireSbin(t, "nginx")
	d, httpAddr := harness.StartHTTPDaemon(t, fmt.Sprintf(harness.ProxyDaemonConfig, 403))
	dir, www := harness.ProxySite(t)
	port := harness.FreePort(t)
	site := harness.ContribConfig(t, "nginx/dthrottle.conf",
		"listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"root /var/www/html;", "root "+www+";",
		"server 127.0.0.1:7072;", "server "+httpAddr+";")
	harness.Must(t, os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o644))
	harness.WriteNginxConf(t, dir, "", "", "")
	log := filepath.Join(dir, "error.log")
	harness.RunProxy(t, exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;"), port, filepath.Join(dir, "stderr.log"))
	harness.CheckThrottled(t, fmt.Sprintf("http://127.0.0.1:%d/hello.txt", port), d, log)
}
