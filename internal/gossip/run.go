package gossip

import (
	"context"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/warm"
)

// kickLoop wakes the running loop to pace warm start.
func (n *Node) kickLoop() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// This file owns a node's running: the loop that reports every interval
// and takes in what its transports (and a relay's link) receive, and the
// clean stop that sends the hits not yet reported.

// Start reports every interval and applies what arrives, in a goroutine of
// its own, until Stop. Call it at most once.
func (n *Node) Start() {
	n.started.Store(true)
	go n.run()
}

func (n *Node) run() {
	defer close(n.stopped)
	n.mu.Lock()
	interval := n.cfg.Interval
	n.mu.Unlock()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	packets := n.transport.Packets()
	var link <-chan transport.Packet
	if l := n.relay.Link(); l != nil {
		link = l.Packets()
	}
	var pace <-chan time.Time
	var paceTicker *time.Ticker
	defer func() {
		if paceTicker != nil {
			paceTicker.Stop()
		}
	}()
	for {
		select {
		case <-n.stop:
			return
		case <-n.kick:
			if paceTicker == nil {
				paceTicker = time.NewTicker(warm.PaceEvery)
				pace = paceTicker.C
			}
		case now := <-pace:
			if !n.Pace(now) {
				paceTicker.Stop()
				paceTicker, pace = nil, nil
			}
		case d := <-n.retick:
			tick.Reset(d)
		case now := <-tick.C:
			if err := n.Report(now); err != nil {
				n.log.Warn("report not sent", "err", err)
			}
			n.checkSilence(now)
			n.checkMembers(now)
		case p, ok := <-packets:
			if !ok {
				packets = nil
				continue
			}
			n.Receive(p)
		case p, ok := <-link:
			if !ok {
				link = nil
				continue
			}
			n.Receive(p)
		}
	}
}

// Stop ends the loop Start began, sends the hits not yet reported, so a
// clean stop loses no served hit, says goodbye (members.go), and closes
// the transport. Stop queries first. Safe to call twice; ctx bounds the
// wait for the loop.
func (n *Node) Stop(ctx context.Context) error {
	var err error
	n.once.Do(func() {
		close(n.stop)
		if n.started.Load() {
			select {
			case <-n.stopped:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		n.relay.Final() // a relay passes on all it holds
		if rerr := n.Report(time.Now()); rerr != nil && err == nil {
			err = rerr
		}
		if gerr := n.sayGoodbye(time.Now()); gerr != nil && err == nil {
			err = gerr
		}
		if cerr := n.transport.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if l := n.relay.Link(); l != nil {
			if cerr := l.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	})
	return err
}
