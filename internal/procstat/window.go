package procstat

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Window is what a load tool measured over its window: how long the
// window lasted and the CPU time spent in it.
type Window struct {
	Elapsed time.Duration
	// ServerCPU is the measured processes' CPU time, together; LoadCPU
	// the calling process's own.
	ServerCPU, LoadCPU time.Duration
}

// Measure runs a load's measuring window, while the load's workers run:
// it waits warmup, reads the CPU time of pids and of this process, sets
// measuring for duration (the workers count only while it is set), and
// reads them again. The first error a worker sends on errs ends it early
// and is returned.
func Measure(errs <-chan error, measuring *atomic.Bool, warmup, duration time.Duration, pids []int) (Window, error) {
	select {
	case err := <-errs:
		return Window{}, err
	case <-time.After(warmup):
	}
	server0, load0, err := cpuOf(pids)
	if err != nil {
		return Window{}, err
	}
	start := time.Now()
	measuring.Store(true)
	select {
	case err := <-errs:
		measuring.Store(false)
		return Window{}, err
	case <-time.After(duration):
	}
	measuring.Store(false)
	elapsed := time.Since(start)
	server1, load1, err := cpuOf(pids)
	if err != nil {
		return Window{}, err
	}
	return Window{Elapsed: elapsed, ServerCPU: server1 - server0, LoadCPU: load1 - load0}, nil
}

// cpuOf returns the CPU time of pids together, and of this process.
func cpuOf(pids []int) (server, load time.Duration, err error) {
	for _, p := range pids {
		c, err := CPU(p)
		if err != nil {
			return 0, 0, err
		}
		server += c
	}
	load, err = CPU(os.Getpid())
	return server, load, err
}

// Flags are what a load's workers read: whether the window is measuring
// (count only then) and whether the load is over (return then).
type Flags struct{ measuring, stop atomic.Bool }

// Measuring reports whether the window is open.
func (f *Flags) Measuring() bool { return f.measuring.Load() }

// Stopped reports whether the load is over.
func (f *Flags) Stopped() bool { return f.stop.Load() }

// Run runs a load: n workers, each calling work(ctx, w, f) once and
// looping in it until f.Stopped, beside the measuring window of Measure.
// A worker's error ends the window early, cancels ctx for the others,
// and is returned. Run returns once every worker has returned.
func Run(n int, warmup, duration time.Duration, pids []int, work func(ctx context.Context, w int, f *Flags) error) (Window, error) {
	var f Flags
	errs := make(chan error, n)
	ctx, cancel := context.WithTimeout(context.Background(), warmup+duration+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			if err := work(ctx, w, &f); err != nil {
				errs <- err
			}
		})
	}
	win, err := Measure(errs, &f.measuring, warmup, duration, pids)
	f.stop.Store(true)
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err != nil {
		return Window{}, err
	}
	select {
	case err := <-errs:
		return Window{}, err
	default:
	}
	return win, nil
}
