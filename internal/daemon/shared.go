package daemon

import (
	"os"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

// The shared table: with listen.share_table, the table lives in memory
// that processes connecting to the Unix socket may map and decide from
// (docs/shared-table.md). The daemon offers it on the query socket and
// beats in it, so that those processes stop deciding from it within a
// second of the daemon leaving, and marks it retired on a clean stop.

// beatEvery is how often the daemon beats in the shared table; callers
// give up on a table silent for a second.
const beatEvery = 100 * time.Millisecond

// beating runs the heartbeat until stop is closed, then retires the table.
type beating struct {
	stop chan struct{}
	done chan struct{}
}

// offerTable lets srv's Unix connections attach to the table, and starts
// the heartbeat, when the table is shared.
func (d *Daemon) offerTable(srv *protocol.Server) {
	if tf, _ := d.table.SharedFiles(); tf == nil {
		return
	}
	d.table.Beat(time.Now()) // before the first attach: a table is never handed out stale
	srv.OfferTable(func() (table, state *os.File) { return d.table.SharedFiles() })
	b := &beating{stop: make(chan struct{}), done: make(chan struct{})}
	d.beat = b
	go func() {
		defer close(b.done)
		t := time.NewTicker(beatEvery)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				d.table.Retire()
				return
			case now := <-t.C:
				d.table.Beat(now)
			}
		}
	}()
}

// stopBeat retires the shared table, if there is one.
func (d *Daemon) stopBeat() {
	if d.beat != nil {
		close(d.beat.stop)
		<-d.beat.done
	}
}
