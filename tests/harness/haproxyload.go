package harness

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// hsLoad counts what a load of requests got: served, refused, failed.
type hsLoad struct {
	Ok, Refused, Errs atomic.Int64
	Wg                sync.WaitGroup
}

// StartHSLoad sends requests to u from n goroutines, each on a new
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
