package harness

import (
	"net"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// StartHTTPDaemon starts dthrottled on config and returns it and the HTTP
// endpoint's address once it answers.
func StartHTTPDaemon(t *testing.T, config string) (*Daemon, string) {
	t.Helper()
	config, addr := PinPort(t, config, "listen")
	d := StartDaemon(t, config)
	testkit.WaitFor(t, 10*time.Second, "the http endpoint to answer on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return d, addr
}
