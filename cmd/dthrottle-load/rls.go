package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dthrottle/dthrottle/internal/procstat"
)

// cmdRLS drives a rate limit service (envoy.service.ratelimit.v3
// ShouldRateLimit: dthrottled's [rls], or any other) over one gRPC
// connection with -inflight calls in flight, each asking about one
// descriptor of one entry, -key=<value>, the values taken from -values
// distinct ones in random order. It prints one line for bench/rls.sh:
//
//	rls LABEL rate=<calls/s> ok=<fraction allowed> p50_us=.. p99_us=.. cpu_ns=.. load_cpu_ns=..
//
// cpu_ns is the CPU time (user and system) the processes of -pids spent
// per call during the measured window, load_cpu_ns this tool's own.
func cmdRLS(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "server: unix:/path or tcp:host:port")
	domain := fs.String("domain", "bench", "rate limit domain")
	key := fs.String("key", "open", "the descriptor entry's key")
	values := fs.Int("values", 1000, "distinct descriptor values")
	inflight := fs.Int("inflight", 64, "calls in flight on the connection")
	warmup := fs.Duration("warmup", time.Second, "load before measuring")
	dur := fs.Duration("duration", 5*time.Second, "measured time")
	pids := fs.String("pids", "", "comma-separated process ids of the server whose CPU time is measured")
	label := fs.String("label", "", "what to call this measurement on the result line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var serverPids []int
	for _, s := range strings.FieldsFunc(*pids, func(r rune) bool { return r == ',' }) {
		p, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("-pids: %w", err)
		}
		serverPids = append(serverPids, p)
	}
	res, err := RLSLoad{Addr: *addr, Domain: *domain, Key: *key, Values: *values, Inflight: *inflight,
		Warmup: *warmup, Duration: *dur, Pids: serverPids}.Run()
	if err != nil {
		return err
	}
	name := *label
	if name == "" {
		name = *addr
	}
	fmt.Fprintf(stdout, "rls %s rate=%.0f ok=%.4f p50_us=%.1f p99_us=%.1f cpu_ns=%.0f load_cpu_ns=%.0f\n",
		name, res.Rate(), float64(res.OK)/float64(max(res.Queries, 1)),
		float64(res.P50)/1e3, float64(res.P99)/1e3, perCall(res.ServerCPU, res.Queries), perCall(res.LoadCPU, res.Queries))
	return nil
}

func perCall(d time.Duration, n uint64) float64 { return float64(d) / float64(max(n, 1)) }

// RLSLoad is one measurement of a rate limit service.
type RLSLoad struct {
	Addr        string // unix:/path or tcp:host:port
	Domain, Key string
	Values      int // distinct descriptor values
	Inflight    int // calls in flight on the one connection
	Warmup      time.Duration
	Duration    time.Duration
	Pids        []int // server processes whose CPU time is measured
}

// Run performs l. In the Result, P50 and P99 are those of one call, and
// ServerCPU and LoadCPU the CPU time spent in the measured window by the
// processes of Pids and by this one.
func (l RLSLoad) Run() (Result, error) {
	if l.Values < 1 || l.Inflight < 1 {
		return Result{}, errors.New("values and inflight must be >= 1")
	}
	network, a, err := splitAddr(l.Addr)
	if err != nil {
		return Result{}, err
	}
	target := "passthrough:///" + a
	if network == "unix" {
		target = "unix:" + a
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)

	// Every request is built before the load, so the load tool spends
	// nothing per call but the call.
	reqs := make([]*rlsv3.RateLimitRequest, l.Values)
	var tag []byte
	for i := range reqs {
		tag = appendTag(tag[:0], 'v', i)
		reqs[i] = &rlsv3.RateLimitRequest{Domain: l.Domain, HitsAddend: 1,
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: l.Key, Value: string(tag)}}}}}
	}
	order := rand.New(rand.NewPCG(uint64(l.Values), 'v')).Perm(l.Values)

	stats := make([]connStats, l.Inflight)
	w, err := procstat.Run(l.Inflight, l.Warmup, l.Duration, l.Pids, func(ctx context.Context, w int, f *procstat.Flags) error {
		st := &stats[w]
		for i := w * len(order) / l.Inflight; !f.Stopped(); i++ {
			req := reqs[order[i%len(order)]]
			t0 := time.Now()
			resp, err := client.ShouldRateLimit(ctx, req)
			if err != nil {
				return err
			}
			if f.Measuring() {
				st.rtt.add(time.Since(t0))
				st.queries++
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					st.ok++
				}
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	var res Result
	var h histogram
	for i := range stats {
		res.Queries += stats[i].queries
		res.OK += stats[i].ok
		h.merge(&stats[i].rtt)
	}
	res.Elapsed, res.P50, res.P99 = w.Elapsed, h.quantile(0.5), h.quantile(0.99)
	res.ServerCPU, res.LoadCPU = w.ServerCPU, w.LoadCPU
	return res, nil
}
