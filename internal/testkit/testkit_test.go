package testkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitForFakeTime: inside a bubble WaitFor's pauses and bound are
// fake time: a condition that holds after a second of it is awaited at
// once, and seen at the pause it holds (20 ms ones, from start, after
// the first 50 ms; 1 ms ones before).
func TestWaitForFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		WaitFor(t, time.Minute, "a second", func() bool { return time.Since(start) >= time.Second })
		if took := time.Since(start); took != time.Second {
			t.Errorf("WaitFor returned after %v, want 1s", took)
		}
		start = time.Now()
		WaitFor(t, time.Minute, "7 ms", func() bool { return time.Since(start) >= 7*time.Millisecond })
		if took := time.Since(start); took != 7*time.Millisecond {
			t.Errorf("WaitFor returned after %v, want 7ms", took)
		}
		start = time.Now()
		WaitFor(t, time.Minute, "61 ms", func() bool { return time.Since(start) >= 61*time.Millisecond })
		if took := time.Since(start); took != 80*time.Millisecond {
			t.Errorf("WaitFor returned after %v, want 80ms (the pause after 60 ms)", took)
		}
	})
}

// TestWaitForFails: a condition that never holds fails the test, after
// the bound and not before.
func TestWaitForFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fatalTB{TB: t}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			WaitFor(ft, time.Minute, "nothing", func() bool { return false })
		}()
		<-done
		if ft.msg != "waited 1m0s for nothing" || time.Since(start) != time.Minute {
			t.Errorf("failed %q after %v, want the bound named after 1m", ft.msg, time.Since(start))
		}
	})
}

// fatalTB notes the message of Fatalf and ends the goroutine, as a
// test's Fatalf does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestRecv: a value sent is returned; none within the bound fails the
// test after it, on fake time.
func TestRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int, 1)
		ch <- 7
		if v := Recv(t, ch, time.Second, "a value"); v != 7 {
			t.Errorf("Recv = %d, want 7", v)
		}
		ft := &fatalTB{TB: t}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			Recv(ft, ch, time.Minute, "nothing")
		}()
		<-done
		if ft.msg != "waited 1m0s for nothing" || time.Since(start) != time.Minute {
			t.Errorf("failed %q after %v, want the bound named after 1m", ft.msg, time.Since(start))
		}
	})
}

func TestClock(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := NewClock(t0)
	if got := c.Add(time.Second); !got.Equal(t0.Add(time.Second)) || !c.Now().Equal(got) {
		t.Errorf("after Add: %v, %v", got, c.Now())
	}
	c.Set(t0)
	if !c.Now().Equal(t0) {
		t.Errorf("after Set: %v", c.Now())
	}
}

// TestPipeBuffers: a write returns before anything is read, so that both
// ends may write first; what is written is read in order.
func TestPipeBuffers(t *testing.T) {
	a, b := Pipe()
	for _, c := range []*Conn{a, b} {
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Conn{a, b} {
		got := make([]byte, 5)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
			t.Fatalf("read %q, %v", got, err)
		}
	}
}

// TestPipeReadDeadline: a read fails at its deadline, on the bubble's
// clock, not a nanosecond before; a deadline moved later holds the read
// until then; a deadline in the past fails a read with data buffered.
func TestPipeReadDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe()
		start := time.Now()
		a.SetReadDeadline(start.Add(time.Second))
		go func() {
			time.Sleep(500 * time.Millisecond)
			a.SetReadDeadline(start.Add(3 * time.Second))
		}()
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != 3*time.Second {
			t.Errorf("read: %v after %v, want the deadline after 3s", err, time.Since(start))
		}
		var ne net.Error
		if _, err := a.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("read past the deadline: %v, want a timeout", err)
		}
		b.Write([]byte("x"))
		a.SetReadDeadline(time.Time{})
		if n, err := a.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Errorf("read with no deadline: %d, %v", n, err)
		}
		b.Write([]byte("y"))
		a.SetReadDeadline(time.Unix(1, 0))
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read with a deadline passed: %v, want it exceeded", err)
		}
	})
}

// TestPipeWriteBound: with buffers set, a writer waits once they are full
// and fails at its write deadline with what was buffered counted; a read
// makes room.
func TestPipeWriteBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe()
		a.SetWriteBuffer(3)
		b.SetReadBuffer(2)
		start := time.Now()
		a.SetWriteDeadline(start.Add(time.Minute))
		if n, err := a.Write([]byte("0123456")); n != 5 || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Minute {
			t.Errorf("write: %d, %v after %v; want 5 bytes and the deadline after 1m", n, err, time.Since(start))
		}
		a.SetWriteDeadline(time.Time{})
		wrote := make(chan error)
		go func() { _, err := a.Write([]byte("56")); wrote <- err }()
		synctest.Wait()
		select {
		case err := <-wrote:
			t.Fatalf("a write to full buffers returned: %v", err)
		default:
		}
		got := make([]byte, 7)
		if _, err := io.ReadFull(b, got); err != nil || string(got) != "0123456" {
			t.Errorf("read %q, %v", got, err)
		}
		if err := <-wrote; err != nil {
			t.Errorf("write after room was made: %v", err)
		}
	})
}

// TestPipeClose: the other end reads what was written, then io.EOF, and
// cannot write; the closed end cannot read or write; CloseWrite leaves
// reading open.
func TestPipeClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe()
		a.Write([]byte("last"))
		read := make(chan error)
		go func() {
			if n, err := b.Read(make([]byte, 10)); n != 4 || err != nil {
				t.Errorf("read of what was written: %d bytes, %v; want 4, nil", n, err)
			}
			_, err := b.Read(make([]byte, 1))
			read <- err
		}()
		synctest.Wait()
		a.Close()
		if err := <-read; err != io.EOF {
			t.Errorf("read after the other end closed: %v, want io.EOF", err)
		}
		if _, err := b.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("write to a closed end: %v, want EPIPE", err)
		}
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("read of a closed end: %v, want net.ErrClosed", err)
		}

		c, d := Pipe()
		c.CloseWrite()
		if _, err := d.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("read after CloseWrite: %v, want io.EOF", err)
		}
		d.Write([]byte("y"))
		if n, err := c.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Errorf("read after CloseWrite: %d, %v; want the byte", n, err)
		}
	})
}

// TestListener: Dial's other end is accepted; after Close, Accept and
// Dial fail with net.ErrClosed, and a connection not accepted is closed.
func TestListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewListener()
		c, err := l.Dial()
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		if n, err := s.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Fatalf("read what the client wrote: %d, %v", n, err)
		}
		pending, _ := l.Dial()
		l.Close()
		l.Close()
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
		if _, err := l.Dial(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Dial after Close: %v", err)
		}
		if _, err := pending.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("a connection not accepted: %v, want io.EOF", err)
		}
	})
}
