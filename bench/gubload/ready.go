package main

import (
	"context"
	"fmt"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

// ready waits, at most wait, until every address of c answers a call
// without error and, when peers > 0, reports at least that many peers in
// its health check (a Gubernator node that has found the others).
func ready(c common, peers int, wait time.Duration) error {
	clients, err := c.dial(1)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	req := c.request("ready", "ready")
	for i, cl := range clients {
		var last error
		for {
			last = readyOnce(cl, req, peers)
			if last == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after %v: %w", c.addrs[i], wait, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func readyOnce(cl guber.V1Client, req *guber.GetRateLimitsReq, peers int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if peers > 0 {
		h, err := cl.HealthCheck(ctx, &guber.HealthCheckReq{})
		if err != nil {
			return err
		}
		if int(h.GetPeerCount()) < peers {
			return fmt.Errorf("%d peers of %d (%s)", h.GetPeerCount(), peers, h.GetMessage())
		}
	}
	resp, err := cl.GetRateLimits(ctx, req)
	if err != nil {
		return err
	}
	if r := resp.GetResponses(); len(r) != 1 || r[0].GetError() != "" {
		return fmt.Errorf("answer %v", r)
	}
	return nil
}
