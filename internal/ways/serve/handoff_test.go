package serve

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A connection handed over is accepted, and Serve returns once it is
// closed; after Close, Accept says so and Serve returns at once.
func TestHandoff(t *testing.T) {
	l := NewHandoff()
	a, b := net.Pipe()
	defer b.Close()
	served := make(chan struct{})
	go func() { l.Serve(a); close(served) }()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
		t.Fatal("Serve returned before the connection was closed")
	case <-time.After(20 * time.Millisecond):
	}
	c.Close()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return once the connection was closed")
	}
	if l.Addr().String() != "handoff" {
		t.Errorf("Addr %q", l.Addr())
	}
	l.Close()
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	done := make(chan struct{})
	go func() { l.Serve(x); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve on a closed Handoff did not return")
	}
}
