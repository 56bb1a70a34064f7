package daemon

import (
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/views/top"
)

// This file owns "who is throttled" in the daemon: the Board (package
// top) fed at every gossip report with the refusals the table harvested
// and the hits the report drained, whose report the node carries to its
// peers and whose peers' reports it takes in; with gossip off, a loop of
// its own feeds it, draining the table itself. The admin
// endpoint's /v1/top and status page read it (view).

// With gossip off, the board is fed refusals every topEvery, and the
// hits served every servedEvery: draining a large table costs in
// proportion to the tags served since the last drain, so a drain per
// part of the board's window (10 s) loses nothing the view shows.
const topEvery = time.Second

// servedEvery is how many feeds go between two drains; a variable so that
// tests may drain at every feed.
var servedEvery = 10

// topRun is the daemon's board and what feeds it.
type topRun struct {
	board *top.Board
	table *bucket.Table
	now   func() time.Time

	mu      sync.Mutex // one feeding at a time; guards refused
	refused []bucket.Refusals
	hits    []bucket.Hit // the loop's own drains, when gossip is off

	stop, stopped chan struct{} // the loop's, when gossip is off
}

// newTop returns a board for table whose peers report every interval (0:
// gossip is off): a peer's report counts until it is as old as a peer may
// go unheard before it is called silent (at the interval the daemon
// started with: a reload that changes it leaves the expiry as it was).
func newTop(table *bucket.Table, interval time.Duration, now func() time.Time) (*topRun, error) {
	cfg := top.DefaultConfig()
	if interval > 0 {
		cfg.Expire = gossip.SilentAfter(interval)
	}
	b, err := top.New(cfg)
	if err != nil {
		return nil, err
	}
	return &topRun{board: b, table: table, now: now}, nil
}

// report is gossip.Config.Top: it counts the refusals since the last
// report and the hits this one drained, and returns this node's report.
func (r *topRun) report(now time.Time, drained []gossip.Hit) wire.TopReport {
	r.feed(now, drained)
	return r.board.Report(now)
}

// heard is gossip.Config.HeardTop.
func (r *topRun) heard(node uint64, now time.Time, rep wire.TopReport) {
	r.board.AddPeer(node, now, rep)
}

// feed counts the refusals the table harvests now and the hits served.
func (r *topRun) feed(now time.Time, served []bucket.Hit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused, _ = r.table.TakeRefusals(r.refused[:0])
	r.board.AddRefused(now, r.refused)
	if len(served) > 0 {
		r.board.AddServed(now, served, r.table.PolicyName)
	}
	clear(r.refused) // keep no keys alive between feeds
}

// start feeds the board every topEvery until stopTop, for a daemon
// without gossip: the hits it drains would otherwise stay unreported.
func (r *topRun) start() {
	r.stop, r.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.stopped)
		t := time.NewTicker(topEvery)
		defer t.Stop()
		for tick := 1; ; tick++ {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.hits = r.hits[:0]
				if tick%servedEvery == 0 {
					r.hits = r.table.Drain(r.hits)
				}
				r.feed(r.now(), r.hits)
				if cap(r.hits) > 4096 {
					r.hits = nil // do not keep a flood's worth of memory
				}
			}
		}
	}()
}

// stopTop ends the loop start began, if it did.
func (r *topRun) stopTop() {
	if r.stop != nil {
		close(r.stop)
		<-r.stopped
	}
}

// view is admin.Sources.Top.
func (r *topRun) view(by, scope, policy string, n int) api.Top {
	return r.board.View(by, scope, policy, n, r.now())
}
