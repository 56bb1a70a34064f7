package procstat

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeasure measures a window over this process spinning, and ends
// one early on a worker's error.
func TestMeasure(t *testing.T) {
	var measuring atomic.Bool
	var spun atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if measuring.Load() {
				spun.Add(1)
			}
		}
	}()
	w, err := Measure(make(chan error), &measuring, 10*time.Millisecond, 200*time.Millisecond, []int{os.Getpid()})
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if w.Elapsed < 200*time.Millisecond || spun.Load() == 0 || measuring.Load() {
		t.Errorf("window %+v, %d spins counted, measuring still %v", w, spun.Load(), measuring.Load())
	}
	// The process measured is this one: both figures count the spinning,
	// read a moment apart (more than one tick apart if the reader is
	// preempted between them, beside a spinning core).
	if d := w.ServerCPU - w.LoadCPU; w.ServerCPU <= 0 || w.LoadCPU <= 0 || d > 100*time.Millisecond || d < -100*time.Millisecond {
		t.Errorf("CPU: server %v, load %v", w.ServerCPU, w.LoadCPU)
	}

	errs := make(chan error, 1)
	boom := errors.New("boom")
	go func() {
		time.Sleep(50 * time.Millisecond)
		errs <- boom
	}()
	start := time.Now()
	if _, err := Measure(errs, &measuring, 10*time.Millisecond, time.Minute, nil); !errors.Is(err, boom) || time.Since(start) > 30*time.Second {
		t.Errorf("a worker's error: %v after %v", err, time.Since(start))
	}
	if measuring.Load() {
		t.Error("measuring left set after an error")
	}
	if _, err := Measure(nil, &measuring, 0, 0, []int{0}); err == nil {
		t.Error("pid 0 measured without an error")
	}
}

// TestRun: workers count only while the window measures and return once
// it is over; one worker's error cancels the others and is returned.
func TestRun(t *testing.T) {
	counts := make([]int, 3)
	w, err := Run(3, 20*time.Millisecond, 50*time.Millisecond, nil, func(ctx context.Context, i int, f *Flags) error {
		for !f.Stopped() {
			if f.Measuring() {
				counts[i]++
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	if err != nil || w.Elapsed < 50*time.Millisecond {
		t.Fatalf("window %+v, %v", w, err)
	}
	// A step sleeps at least 1 ms: no more steps than the window's
	// milliseconds, and a window kept open late is longer.
	for i, n := range counts {
		if most := int(w.Elapsed/time.Millisecond) + 2; n == 0 || n > most {
			t.Errorf("worker %d counted %d times in a %v window of 1 ms steps, want 1 to %d", i, n, w.Elapsed, most)
		}
	}

	failed := errors.New("worker failed")
	var cancelled atomic.Int32
	_, err = Run(3, time.Hour, time.Hour, nil, func(ctx context.Context, i int, f *Flags) error {
		if i == 0 {
			return failed
		}
		<-ctx.Done()
		cancelled.Add(1)
		return ctx.Err()
	})
	if !errors.Is(err, failed) || cancelled.Load() != 2 {
		t.Fatalf("Run returned %v with %d workers cancelled, want the worker's error and 2", err, cancelled.Load())
	}
}
