// Command dthrottle-load measures a dthrottle server side by side with the
// I/O ceiling and Redis.
//
// It opens C connections, each keeping D requests in flight (written
// together, then every reply read), over K distinct tags asked in random
// order, and reports decisions per second and the p50 and p99 round trip
// of one batch:
//
//	dthrottle-load run -addr unix:/run/dthrottle/dthrottle.sock -conns 4 -depth 64 -tags 10000
//	dthrottle-load run -proto redis -addr unix:/tmp/redis.sock -conns 32 -depth 1
//
// compare runs the benchmark of README.md's Performance section against a dthrottled and a
// redis-server already running (bench/compare.sh starts both) and a bare
// echo server it starts itself as a child process: every scenario three
// times, the systems interleaved, then prints medians and ratios as a
// Markdown table. echo serves the echo server alone; flood sends millions
// of distinct tags and prints the daemon's resident memory as it goes; rls
// calls a rate limit service (Envoy's ShouldRateLimit over gRPC) with
// many calls in flight on one connection (bench/rls.sh).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: dthrottle-load run|compare|flood|echo|rls [flags] (-h for each)")
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(args[1:], stdout, stderr)
	case "compare":
		err = cmdCompare(args[1:], stdout, stderr)
	case "flood":
		err = cmdFlood(args[1:], stdout, stderr)
	case "echo":
		err = cmdEcho(args[1:], stderr)
	case "rls":
		err = cmdRLS(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "dthrottle-load: unknown command %q\n", args[0])
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "dthrottle-load: %v\n", err)
		return 1
	}
	return 0
}

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "server: unix:/path or tcp:host:port")
	proto := fs.String("proto", "line", "line (dthrottle, echo) or redis (EVALSHA of the leaky-bucket script)")
	conns := fs.Int("conns", 4, "connections")
	depth := fs.Int("depth", 64, "requests in flight per connection")
	tags := fs.Int("tags", 10000, "distinct tags")
	prefill := fs.Bool("prefill", false, "ask about every tag once before measuring")
	rate := fs.Float64("rate", 0.01, "redis: tokens per second")
	burst := fs.Int("burst", 1000000, "redis: bucket capacity")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "load before measuring")
	dur := fs.Duration("duration", 3*time.Second, "measured time")
	cpuProfile := fs.String("cpuprofile", "", "write the load tool's own CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	network, a, err := splitAddr(*addr)
	if err != nil {
		return err
	}
	var p Proto = lineProto{}
	if *proto == "redis" {
		if _, err := redisCommand(network, a, "SCRIPT", "LOAD", luaBucket); err != nil {
			return err
		}
		p = newRedisProto(*rate, *burst)
	} else if *proto != "line" {
		return fmt.Errorf("unknown -proto %q", *proto)
	}
	if *prefill {
		if err := Prefill(network, a, p, 'r', 0, *tags, 4, 256); err != nil {
			return err
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := Load{Network: network, Addr: a, Proto: p, Conns: *conns, Depth: *depth, Tags: *tags,
		NS: 'r', Warmup: *warmup, Duration: *dur}.Run()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d conns x %d in flight, %d tags: %.0f decisions/s (%.1f%% OK), round trip p50 %v p99 %v\n",
		*conns, *depth, *tags, res.Rate(), 100*float64(res.OK)/float64(max(res.Queries, 1)), res.P50, res.P99)
	return nil
}

// cmdEcho serves the echo server, or with -map the map+mutex table, or
// with -burn the echo server spending CPU on every query, on -listen until
// SIGTERM or SIGINT.
func cmdEcho(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("listen", "", "unix:/path or tcp:host:port")
	withMap := fs.Bool("map", false, "decide from a Go map behind a mutex instead of answering OK")
	rate := fs.Float64("rate", 0.01, "-map: tokens per second")
	burst := fs.Int("burst", 1000000, "-map: bucket capacity")
	burn := fs.Duration("burn", 0, "spend this much CPU time on every query, then answer OK (a calibration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	network, a, err := splitAddr(*addr)
	if err != nil {
		return err
	}
	l, err := net.Listen(network, a)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		l.Close()
	}()
	var decide decideFunc
	switch {
	case *withMap && *burn > 0:
		return errors.New("-map and -burn exclude each other")
	case *withMap:
		decide = newMapTable(*rate, *burst).decide
	case *burn > 0:
		decide = burner(*burn)
	}
	return serveLines(l, decide)
}
