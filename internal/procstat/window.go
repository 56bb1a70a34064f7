package procstat

import (
	"os"
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
