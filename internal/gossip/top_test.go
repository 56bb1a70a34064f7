package gossip

import (
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/top"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// TestTopExchanged: every report carries the node's heaviest tags to its
// peers, signed like the rest, and a peer hands them on as they came; a
// list that empties is sent once more, empty, then no more.
func TestTopExchanged(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	key := []byte("0123456789abcdef")
	var list []top.List
	a := newTestNodeWith(t, net.Join("a"), func(c *Config) {
		c.Key = key
		c.Top = func(time.Time, []Hit) wire.TopReport { return wire.TopReport{Lists: list} }
	})
	var mu sync.Mutex
	var heard []wire.TopReport
	var from []uint64
	b := newTestNodeWith(t, net.Join("b"), func(c *Config) {
		c.Key = key
		c.HeardTop = func(node uint64, _ time.Time, r wire.TopReport) {
			mu.Lock()
			defer mu.Unlock()
			heard, from = append(heard, r), append(from, node)
		}
	})
	round := func() int {
		now = now.Add(time.Second)
		if err := a.Report(now); err != nil {
			t.Fatal(err)
		}
		net.Deliver(now)
		b.receiveAll()
		mu.Lock()
		defer mu.Unlock()
		return len(heard)
	}
	if n := round(); n != 0 {
		t.Fatalf("%d reports heard from a node with nothing to tell, want 0", n)
	}
	list = []top.List{{Policy: "api", By: top.Refused, Summary: topk.Summary{
		Items: []topk.Item{{Key: "198.51.100.7", Count: 40, Err: 2}}, Total: 55, Floor: 3}}}
	if n := round(); n != 1 {
		t.Fatalf("%d reports heard, want 1", n)
	}
	mu.Lock()
	got := heard[0]
	if from[0] != a.ID() || len(got.Lists) != 1 || got.Lists[0].Policy != "api" || got.Lists[0].By != top.Refused ||
		got.Lists[0].Total != 55 || got.Lists[0].Floor != 3 || len(got.Lists[0].Items) != 1 ||
		got.Lists[0].Items[0] != (topk.Item{Key: "198.51.100.7", Count: 40, Err: 2}) {
		t.Fatalf("heard %+v from %x, want a's list", got, from[0])
	}
	mu.Unlock()
	list = nil
	if n := round(); n != 2 {
		t.Fatalf("%d reports heard, want the emptied list sent once", n)
	}
	if n := round(); n != 2 {
		t.Fatalf("%d reports heard, want nothing more while nothing is to tell", n)
	}
	if st := b.Stats(); st.DroppedAuth != 0 || st.DroppedMalformed != 0 || st.Lost != 0 {
		t.Errorf("b's stats %+v: want nothing dropped or lost", st)
	}
}
