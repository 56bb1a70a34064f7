// Command gubload drives servers of Gubernator's API (pb.gubernator.V1
// GetRateLimits over gRPC: a Gubernator cluster, or dthrottled's
// [gubernator]) through Gubernator's own Go client, for
// bench/gubernator.sh. Every call asks about one key under a limit the
// request states (LEAKY_BUCKET: -limit hits per -period, up to -burst),
// and successive calls go round robin over the -addrs.
//
//	gubload run -addrs A,B,C [-pids P,Q,R] [-behavior batching|global]
//	gubload accuracy -addrs A,B,C [-behavior ...]
//	gubload ready -addrs A,B,C [-peers 3]
//
// run keeps -inflight calls in flight, each asking about -batch keys
// (one by default), over -keys keys for -duration and prints
//
//	run LABEL rate=<decisions/s> under=<fraction UNDER_LIMIT> p50_us=.. p99_us=.. cpu_ns=.. load_cpu_ns=.. errors=..
//
// where cpu_ns is the CPU time (user and system, /proc/PID/stat) the
// processes of -pids spent together per decision, load_cpu_ns this
// tool's own. accuracy offers one fresh key -over times its rate for
// -duration, spread over the nodes, and prints
//
//	accuracy LABEL sent=.. served=.. exact=.. bound=.. errors=..
//
// where exact is what one exact bucket serves of the same requests at
// the same instants, and bound its burst plus what it earns over the
// run. ready waits until every address answers a call (and, with
// -peers, reports that many peers in its health check).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gubload:", err)
		os.Exit(1)
	}
}

// common holds the flags every mode shares.
type common struct {
	addrs    []string
	limit    Limit
	behavior guber.Behavior
	label    string
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: gubload run|accuracy|ready [flags]")
	}
	mode, args := args[0], args[1:]
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrs := fs.String("addrs", "", "comma-separated gRPC addresses, host:port, called round robin")
	limit := fs.Int64("limit", 1000, "hits the stated limit allows per -period")
	period := fs.Duration("period", time.Second, "the stated limit's period")
	burst := fs.Int64("burst", 0, "the stated limit's burst (0: -limit)")
	behavior := fs.String("behavior", "batching", "Gubernator behavior: batching (its default) or global")
	label := fs.String("label", "", "what to call this measurement on the result line")
	// run
	keys := fs.Int("keys", 10000, "run: distinct keys, taken in turn")
	inflight := fs.Int("inflight", 64, "run: calls in flight")
	conns := fs.Int("conns", 1, "run: gRPC connections (clients) per address")
	batch := fs.Int("batch", 1, "run: rate limits asked per call, of consecutive keys")
	warmup := fs.Duration("warmup", time.Second, "run: load before measuring")
	dur := fs.Duration("duration", 5*time.Second, "measured time (run), or offered time (accuracy)")
	pids := fs.String("pids", "", "run: comma-separated process ids of the servers whose CPU time is measured")
	// accuracy
	over := fs.Float64("over", 10, "accuracy: the offered load, in times the limit's rate")
	// ready
	peers := fs.Int("peers", 0, "ready: peers each health check must report (0: not asked)")
	wait := fs.Duration("wait", 20*time.Second, "ready: how long to wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := common{label: *label, limit: Limit{Hits: *limit, Period: *period, Burst: *burst}}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.addrs = append(c.addrs, a)
		}
	}
	if len(c.addrs) == 0 {
		return fmt.Errorf("-addrs: no address")
	}
	if c.label == "" {
		c.label = strings.Join(c.addrs, ",")
	}
	if err := c.limit.check(); err != nil {
		return err
	}
	switch *behavior {
	case "batching":
		c.behavior = guber.Behavior_BATCHING
	case "global":
		c.behavior = guber.Behavior_GLOBAL
	default:
		return fmt.Errorf("-behavior %q: want batching or global", *behavior)
	}
	switch mode {
	case "run":
		serverPids, err := parsePids(*pids)
		if err != nil {
			return err
		}
		res, err := Load{common: c, Keys: *keys, Batch: *batch, Inflight: *inflight, Conns: *conns,
			Warmup: *warmup, Duration: *dur, Pids: serverPids}.Run()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "run %s rate=%.0f under=%.4f p50_us=%.1f p99_us=%.1f cpu_ns=%.0f load_cpu_ns=%.0f errors=%d\n",
			c.label, res.Rate(), float64(res.Under)/float64(max(res.Decisions, 1)),
			us(res.P50), us(res.P99), perDecision(res.ServerCPU, res.Decisions), perDecision(res.LoadCPU, res.Decisions), res.Errors)
		if res.Errors > 0 {
			fmt.Fprintf(stderr, "gubload: %s: %d rate limits answered with an error, the first: %s\n", c.label, res.Errors, res.FirstErr)
		}
	case "accuracy":
		res, err := Accuracy{common: c, Over: *over, Duration: *dur}.Run()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "accuracy %s sent=%d served=%d exact=%d bound=%.0f errors=%d\n",
			c.label, res.Sent, res.Served, res.Exact, res.Bound, res.Errors)
	case "ready":
		return ready(c, *peers, *wait)
	default:
		return fmt.Errorf("unknown mode %q: want run, accuracy or ready", mode)
	}
	return nil
}

// Limit is the limit every request states: Hits per Period, a leaky
// bucket of capacity Burst (Gubernator's LEAKY_BUCKET).
type Limit struct {
	Hits   int64
	Period time.Duration
	Burst  int64 // 0: Hits
}

func (l Limit) check() error {
	if l.Hits < 1 || l.Period < time.Millisecond || l.Burst < 0 {
		return fmt.Errorf("limit %d per %v, burst %d: want at least 1 per 1ms and a burst of 0 or more", l.Hits, l.Period, l.Burst)
	}
	return nil
}

// Rate is the limit's tokens per second.
func (l Limit) Rate() float64 { return float64(l.Hits) / l.Period.Seconds() }

// Capacity is the bucket's capacity: Burst, or Hits when Burst is 0.
func (l Limit) Capacity() int64 {
	if l.Burst == 0 {
		return l.Hits
	}
	return l.Burst
}

// request is one call's request: one hit on each of keys under c's
// limit.
func (c common) request(name string, keys ...string) *guber.GetRateLimitsReq {
	req := &guber.GetRateLimitsReq{Requests: make([]*guber.RateLimitReq, len(keys))}
	for i, k := range keys {
		req.Requests[i] = &guber.RateLimitReq{
			Name:      name,
			UniqueKey: k,
			Hits:      1,
			Limit:     c.limit.Hits,
			Duration:  c.limit.Period.Milliseconds(),
			Burst:     c.limit.Burst,
			Algorithm: guber.Algorithm_LEAKY_BUCKET,
			Behavior:  c.behavior,
		}
	}
	return req
}

// dial returns n clients of each address, in the order of c.addrs
// repeated n times, so that taking them in turn goes round robin.
func (c common) dial(n int) ([]guber.V1Client, error) {
	var out []guber.V1Client
	for range max(n, 1) {
		for _, a := range c.addrs {
			cl, err := guber.DialV1Server(a, nil)
			if err != nil {
				return nil, fmt.Errorf("dialing %s: %w", a, err)
			}
			out = append(out, cl)
		}
	}
	return out, nil
}

func parsePids(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("-pids: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func perDecision(d time.Duration, n uint64) float64 { return float64(d) / float64(max(n, 1)) }
