package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

// Accuracy is one accuracy measurement: one key, fresh for the run,
// offered Over times its limit's rate for Duration, request k sent at
// k/(Over*rate) seconds from the start and to address k mod N, from
// enough goroutines that a slow answer delays no other request.
type Accuracy struct {
	common
	Over     float64
	Duration time.Duration
}

// AccuracyResult is what the cluster served of the key against one
// exact bucket.
type AccuracyResult struct {
	Sent, Served int
	Errors       int     // calls that failed or answers that carried an error
	Exact        int     // what one exact bucket serves of the same requests at the same instants
	Bound        float64 // the exact bucket's burst plus what it earns over Duration
}

// accuracySenders is the goroutines sending; each waits for its
// request's instant, so this many may wait on answers at once.
const accuracySenders = 32

// Run performs a.
func (a Accuracy) Run() (AccuracyResult, error) {
	if !(a.Over > 0) || a.Duration <= 0 {
		return AccuracyResult{}, fmt.Errorf("accuracy: -over %v and -duration %v must be above 0", a.Over, a.Duration)
	}
	clients, err := a.dial(1)
	if err != nil {
		return AccuracyResult{}, err
	}
	gap := time.Duration(float64(time.Second) / (a.Over * a.limit.Rate()))
	n := int(a.Duration / gap)
	if n < 1 {
		return AccuracyResult{}, fmt.Errorf("accuracy: -duration %v sends no request", a.Duration)
	}
	req := a.request("accuracy", fmt.Sprintf("%s-%d", a.label, time.Now().UnixNano()))
	sentAt := make([]time.Duration, n)
	var next, served, failed atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), a.Duration+30*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range accuracySenders {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(k) * gap)))
				sentAt[k] = time.Since(start)
				resp, err := clients[k%len(clients)].GetRateLimits(ctx, req)
				r := resp.GetResponses()
				switch {
				case err != nil || len(r) != 1 || r[0].GetError() != "":
					failed.Add(1)
				case r[0].GetStatus() == guber.Status_UNDER_LIMIT:
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return AccuracyResult{}, fmt.Errorf("accuracy: the run took longer than %v", a.Duration+30*time.Second)
	}
	// The senders took requests in order but may have reached the
	// server a little out of it; the exact bucket sees them at their
	// own instants, in order.
	sorted := slices.Clone(sentAt)
	slices.Sort(sorted)
	elapsed := sorted[len(sorted)-1]
	return AccuracyResult{
		Sent:   n,
		Served: int(served.Load()),
		Errors: int(failed.Load()),
		Exact:  exactServed(sorted, a.limit.Rate(), int(a.limit.Capacity())),
		Bound:  exactBound(elapsed, a.limit.Rate(), int(a.limit.Capacity())),
	}, nil
}
