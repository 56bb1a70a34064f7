package serve

import (
	"errors"
	"net"
	"testing"
	"testing/synctest"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// TestHandoff: a connection handed over is accepted, and Serve returns
// once it is closed, not before; after Close, Accept says so and Serve
// returns at once.
func TestHandoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewHandoff()
		a, b := testkit.Pipe()
		defer b.Close()
		served := make(chan struct{})
		go func() { l.Serve(a); close(served) }()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-served:
			t.Fatal("Serve returned before the connection was closed")
		default:
		}
		c.Close()
		<-served
		if l.Addr().String() != "handoff" {
			t.Errorf("Addr %q", l.Addr())
		}
		l.Close()
		l.Close()
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
		x, y := testkit.Pipe()
		defer x.Close()
		defer y.Close()
		done := make(chan struct{})
		go func() { l.Serve(x); close(done) }()
		<-done // a deadlock, reported by the bubble, if Serve waits
	})
}
