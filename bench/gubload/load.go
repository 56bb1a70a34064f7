package main

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"

	"github.com/dthrottle/dthrottle/internal/procstat"
)

// Load is one throughput measurement: Inflight goroutines, each calling
// GetRateLimits with one call at a time, the calls of each going round
// robin over the addresses, each call asking about Batch consecutive
// keys, taken in turn from Keys.
type Load struct {
	common
	Keys     int
	Batch    int // rate limits per call
	Inflight int
	Conns    int // clients per address
	Warmup   time.Duration
	Duration time.Duration
	Pids     []int // server processes whose CPU time is measured
}

// Result is what a Load measured in its window.
type Result struct {
	Decisions uint64 // rate limits answered without error
	Under     uint64 // of them UNDER_LIMIT
	Errors    uint64 // rate limits answered with an error, or not answered
	FirstErr  string // the first such error, for the record
	Elapsed   time.Duration
	P50, P99  time.Duration // of one call
	ServerCPU time.Duration // used by the processes of Pids together
	LoadCPU   time.Duration // used by this process
}

// Rate is the decisions a second.
func (r Result) Rate() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

type worker struct {
	decisions, under, errors uint64
	firstErr                 string
	rtt                      []time.Duration
}

// Run performs l.
func (l Load) Run() (Result, error) {
	if l.Keys < 1 || l.Inflight < 1 || l.Batch < 1 || l.Batch > l.Keys {
		return Result{}, errors.New("keys, inflight and batch must be >= 1, batch at most keys")
	}
	clients, err := l.dial(l.Conns)
	if err != nil {
		return Result{}, err
	}
	// Every request is built before the load, so that the load tool
	// spends nothing per call but the call.
	name := "bench-" + strings.ToLower(l.behavior.String())
	reqs := make([]*guber.GetRateLimitsReq, l.Keys/l.Batch)
	for i := range reqs {
		keys := make([]string, l.Batch)
		for j := range keys {
			keys[j] = "k" + strconv.Itoa(i*l.Batch+j)
		}
		reqs[i] = l.request(name, keys...)
	}

	workers := make([]worker, l.Inflight)
	w, err := procstat.Run(l.Inflight, l.Warmup, l.Duration, l.Pids, func(ctx context.Context, w int, f *procstat.Flags) error {
		st := &workers[w]
		key := w * len(reqs) / l.Inflight
		for i := w; !f.Stopped(); i++ {
			t0 := time.Now()
			resp, err := clients[i%len(clients)].GetRateLimits(ctx, reqs[key])
			if err != nil {
				return err
			}
			if key++; key == len(reqs) {
				key = 0
			}
			if !f.Measuring() {
				continue
			}
			st.rtt = append(st.rtt, time.Since(t0))
			r := resp.GetResponses()
			st.errors += uint64(max(l.Batch-len(r), 0))
			for _, a := range r {
				switch {
				case a.GetError() != "":
					if st.errors++; st.firstErr == "" {
						st.firstErr = a.GetError()
					}
				case a.GetStatus() == guber.Status_UNDER_LIMIT:
					st.under++
					st.decisions++
				default:
					st.decisions++
				}
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Elapsed: w.Elapsed, ServerCPU: w.ServerCPU, LoadCPU: w.LoadCPU}
	var rtt []time.Duration
	for i := range workers {
		res.Decisions += workers[i].decisions
		res.Under += workers[i].under
		res.Errors += workers[i].errors
		res.FirstErr = cmp.Or(res.FirstErr, workers[i].firstErr)
		rtt = append(rtt, workers[i].rtt...)
	}
	res.P50, res.P99 = quantile(rtt, 0.5), quantile(rtt, 0.99)
	return res, nil
}

// quantile returns the q-quantile of d (sorting d), 0 when d is empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}
