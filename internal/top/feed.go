package top

import (
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/bucket"
)

// This file feeds a Board from the table: at every gossip report, the
// refusals the table harvested and the hits the report drained, whose
// Report the node carries to its peers and whose peers' reports it
// takes in (Feed.Report, Feed.Heard); with gossip off, a loop of its own
// (Feed.Start) feeds it, draining the table itself. The admin endpoint's
// /v1/top and status page read it (Feed.View).

// FeedEvery is how often the loop Start begins feeds the board refusals,
// with gossip off; every DefaultDrainEvery-th feed it also drains the
// hits served: draining a large table costs in proportion to the tags
// served since the last drain, so a drain per part of the board's window
// (10 s) loses nothing the view shows.
const (
	FeedEvery         = time.Second
	DefaultDrainEvery = 10
)

// Feed is a Board and what feeds it from a table. It is safe for
// concurrent use; its zero value is not usable: see NewFeed.
type Feed struct {
	board *Board
	table *bucket.Table
	now   func() time.Time
	drain int // feeds between two drains of the loop

	mu      sync.Mutex // one feeding at a time; guards refused
	refused []bucket.Refusals
	hits    []bucket.Hit // the loop's own drains, when gossip is off

	stop, stopped chan struct{} // the loop's, when gossip is off
}

// NewFeed returns a Feed of a board sized by cfg for table, reading the
// time from now; the loop, if started, drains the table's hits every
// drainEvery feeds (DefaultDrainEvery when < 1).
func NewFeed(table *bucket.Table, cfg Config, now func() time.Time, drainEvery int) (*Feed, error) {
	b, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if drainEvery < 1 {
		drainEvery = DefaultDrainEvery
	}
	return &Feed{board: b, table: table, now: now, drain: drainEvery}, nil
}

// Report is gossip.Config.Top: it counts the refusals since the last
// report and the hits this one drained, and returns this node's report.
func (f *Feed) Report(now time.Time, drained []bucket.Hit) Report {
	f.feed(now, drained)
	return f.board.Report(now)
}

// Heard is gossip.Config.HeardTop: a peer's report.
func (f *Feed) Heard(node uint64, now time.Time, rep Report) {
	f.board.AddPeer(node, now, rep)
}

// feed counts the refusals the table harvests now and the hits served.
func (f *Feed) feed(now time.Time, served []bucket.Hit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused, _ = f.table.TakeRefusals(f.refused[:0])
	f.board.AddRefused(now, f.refused)
	if len(served) > 0 {
		f.board.AddServed(now, served, f.table.PolicyName)
	}
	clear(f.refused) // keep no keys alive between feeds
}

// Start feeds the board every FeedEvery until Stop, for a node without
// gossip: the hits it drains would otherwise stay unreported.
func (f *Feed) Start() {
	f.stop, f.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.stopped)
		t := time.NewTicker(FeedEvery)
		defer t.Stop()
		for tick := 1; ; tick++ {
			select {
			case <-f.stop:
				return
			case <-t.C:
				f.hits = f.hits[:0]
				if tick%f.drain == 0 {
					f.hits = f.table.Drain(f.hits)
				}
				f.feed(f.now(), f.hits)
				if cap(f.hits) > 4096 {
					f.hits = nil // do not keep a flood's worth of memory
				}
			}
		}
	}()
}

// Stop ends the loop Start began, if it did.
func (f *Feed) Stop() {
	if f.stop != nil {
		close(f.stop)
		<-f.stopped
	}
}

// View is admin.Sources.Top: the board's view now.
func (f *Feed) View(by, scope, policy string, n int) api.Top {
	return f.board.View(by, scope, policy, n, f.now())
}
