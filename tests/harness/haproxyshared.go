package harness

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// HAProxy deciding in process: contrib/haproxy/haproxy-shared.cfg and
// dthrottle_shared.lua, with the Lua C module dthrottle_shared.so built
// from contrib/haproxy (libdthrottle compiled in), run from Debian's
// HAProxy 2.6 with four threads in master-worker mode, against a real
// dthrottled with a burst of 3. The daemon's counters tell what it
// decided, in process included (sharedCounts); HAProxy's own
// (/dthrottle-stats), what its threads decided and what they asked over
// the socket (the daemon's count of lines asked also holds the probes of
// a reattach, which a heartbeat late on a loaded machine may bring).

// hsLoad counts what a load of requests got: served, refused, failed.
type hsLoad struct {
	Ok, Refused, Errs atomic.Int64
	Wg                sync.WaitGroup
}

// startHSLoad sends requests to u from n goroutines, each on a new
// connection, the jth of goroutine i for tag(i, j), until stop is closed.
func StartHSLoad(u string, n int, tag func(i, j int) string, stop chan struct{}) *hsLoad {
	l := &hsLoad{}
	for i := range n {
		l.Wg.Add(1)
		go func() {
			defer l.Wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := HSGet(u, tag(i, j), true)
				switch {
				case err != nil:
					l.Errs.Add(1)
				case res.StatusCode == http.StatusOK:
					l.Ok.Add(1)
				case res.StatusCode == http.StatusTooManyRequests:
					l.Refused.Add(1)
				}
			}
		}()
	}
	return l
}
