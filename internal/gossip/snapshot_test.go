package gossip

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// fakeTable is a hand-written table of levels: Export hands it out in
// parts of partSize sorted keys, Merge keeps the lower level.
type fakeTable struct {
	mu     sync.Mutex
	levels map[string]float64
}

const partSize = 100

func (f *fakeTable) export(_ time.Time, part int, dst []Level, keys []byte) ([]Level, []byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.levels))
	for k := range f.levels {
		names = append(names, k)
	}
	sort.Strings(names)
	lo, hi := min(part*partSize, len(names)), min((part+1)*partSize, len(names))
	for _, k := range names[lo:hi] {
		keys = append(keys, k...)
		dst = append(dst, Level{Key: keys[len(keys)-len(k):], Tokens: f.levels[k]})
	}
	return dst, keys, hi < len(names)
}

func (f *fakeTable) merge(_ time.Time, ls []Level) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, l := range ls {
		if old, ok := f.levels[string(l.Key)]; !ok || l.Tokens < old {
			f.levels[string(l.Key)] = l.Tokens
			n++
		}
	}
	return n
}

func (f *fakeTable) get(k string) (float64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.levels[k]
	return v, ok
}

type warmNode struct {
	*Node
	tr    *transport.MemTransport
	table *fakeTable
}

func newWarmNode(t *testing.T, net *transport.MemNetwork, name string, key []byte, rate float64, levels map[string]float64) *warmNode {
	t.Helper()
	w := &warmNode{tr: net.Join(name), table: &fakeTable{levels: levels}}
	if w.table.levels == nil {
		w.table.levels = map[string]float64{}
	}
	n, err := newNode(Config{
		Since: simT0, Interval: time.Second, Key: key, SnapshotRate: rate,
		Drain:  func(dst []Hit) []Hit { return dst },
		Apply:  func(time.Time, []Hit) {},
		Export: w.table.export, Merge: w.table.merge,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, w.tr)
	if err != nil {
		t.Fatal(err)
	}
	w.Node = n
	return w
}

func (w *warmNode) receiveAll() {
	for {
		select {
		case p := <-w.tr.Packets():
			w.Receive(p)
		default:
			return
		}
	}
}

// step runs the cluster to now: pace every node, deliver, receive.
func step(net *transport.MemNetwork, now time.Time, nodes ...*warmNode) {
	for _, n := range nodes {
		n.Pace(now)
	}
	net.Deliver(now)
	for _, n := range nodes {
		n.receiveAll()
	}
}

func levelsN(n int, tokens float64) map[string]float64 {
	m := map[string]float64{}
	for i := range n {
		m[fmt.Sprintf("203.0.113.%d:%d", i%256, i)] = tokens - float64(i%3)
	}
	return m
}

func TestWarmStartMergesTheLowestLevel(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1, Delay: time.Millisecond}, func() time.Time { return now })
	key := []byte("0123456789abcdef")
	a := newWarmNode(t, net, "a", key, 1000, levelsN(1000, 2))
	b := newWarmNode(t, net, "b", key, 1000, map[string]float64{"203.0.113.0:0": -5, "only-b": 1})
	c := newWarmNode(t, net, "c", key, 1000, map[string]float64{"203.0.113.0:0": -1, "mine": 3})
	if err := c.Warm(now); err != nil {
		t.Fatal(err)
	}
	start := now
	for c.WarmStats().Warming && now.Sub(start) < 5*time.Second {
		now = now.Add(10 * time.Millisecond)
		step(net, now, a, b, c)
	}
	st := c.WarmStats()
	if !st.Warm || st.WarmDuration > 2*time.Second {
		t.Fatalf("not warm within two intervals: %+v", st)
	}
	if st.PeersAnswered != 2 || st.RequestsSent != 1 || st.TagsReceived != 1002 {
		t.Errorf("warm stats %+v: want 2 peers answered, 1 request, 1002 tags", st)
	}
	for k, want := range map[string]float64{"203.0.113.0:0": -5, "203.0.113.1:1": 1, "only-b": 1, "mine": 3} {
		if got, ok := c.table.get(k); !ok || got != want {
			t.Errorf("%s: %v (%v), want %v", k, got, ok, want)
		}
	}
	// a's 999 new tags (its 2 for 203.0.113.0:0 is above c's -1), b's -5
	// for that one and only-b.
	if st.TagsAdopted != 1001 {
		t.Errorf("adopted %d, want 1001", st.TagsAdopted)
	}
	if got := c.table.levels; len(got) != 1002 {
		t.Errorf("c has %d tags, want 1002", len(got))
	}
	as := a.WarmStats()
	if as.RequestsReceived != 1 || as.AnswersSent < 10 || as.TagsSent != 1000 || as.AnswerBytesSent == 0 {
		t.Errorf("a's stats %+v: want one request, 1000 tags over 10 or more datagrams", as)
	}
	// Nothing is sent to the nodes that did not ask.
	if bs := b.WarmStats(); bs.DroppedUnasked != 0 || bs.AnswersReceived != 0 {
		t.Errorf("b received answers meant for c: %+v", bs)
	}
	// A report loses nothing to the answers' sequence: b saw no gap from a.
	if err := a.Report(now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	step(net, now, a, b, c)
	if lost := b.Stats().Lost; lost != 0 {
		t.Errorf("b counts %d datagrams of a lost: answers to c took report sequence numbers", lost)
	}
}

func TestWarmStartPaced(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	a := newWarmNode(t, net, "a", nil, 100, levelsN(5000, 0)) // 100 datagrams a second
	c := newWarmNode(t, net, "c", nil, 100, nil)
	c.Warm(now)
	step(net, now, a, c)
	first := a.WarmStats().AnswersSent
	if first > 8 {
		t.Fatalf("%d datagrams at once, want at most the pace's burst of 8", first)
	}
	for range 100 {
		now = now.Add(10 * time.Millisecond)
		step(net, now, a, c)
	}
	// One second at 100 a second: about 100 more.
	if sent := a.WarmStats().AnswersSent; sent < 100 || sent > 110 {
		t.Fatalf("%d datagrams in a second at a pace of 100", sent)
	}
}

func TestWarmStartNotAmplified(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	a := newWarmNode(t, net, "a", nil, 1000, levelsN(50, 0))
	c := newWarmNode(t, net, "c", nil, 1000, nil)
	c.Warm(now)
	host{c.Node}.Request(now, func(error) {}) // asked again: same node id
	host{c.Node}.Request(now, func(error) {})
	for range 300 {
		now = now.Add(10 * time.Millisecond)
		step(net, now, a, c)
	}
	as := a.WarmStats()
	if as.RequestsReceived != 3 || as.RequestsRefused != 2 || as.TagsSent != 50 {
		t.Fatalf("a's stats %+v: want 3 requests, 2 refused, one answer of 50 tags", as)
	}
}

func TestWarmStartBadAnswersDropped(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	key := []byte("0123456789abcdef")
	c := newWarmNode(t, net, "c", key, 1000, nil)
	c.Warm(now)
	net.Deliver(now) // the request goes nowhere: no one else yet
	enc := &wire.Encoder{Node: 77, MaxPacket: 1400, Key: key}
	answer := func(e *wire.Encoder, to uint64, ls []Level) []byte {
		var out []byte
		e.EncodeSnapshot(now, to, ls, true, func(p []byte) error { out = bytes.Clone(p); return nil })
		return out
	}
	good := answer(enc, c.ID(), []Level{{Key: []byte("x"), Tokens: -1}})
	forged := answer(&wire.Encoder{Node: 78, MaxPacket: 1400, Key: []byte("not the key, no!")}, c.ID(), []Level{{Key: []byte("y"), Tokens: -9}})
	unasked := answer(&wire.Encoder{Node: 79, MaxPacket: 1400, Key: key}, c.ID()+1, []Level{{Key: []byte("z"), Tokens: -9}})
	version := bytes.Clone(good)
	version[2] = 9
	truncated := good[:len(good)-40]
	recv := func(b []byte) { c.Receive(transport.Packet{Data: b, From: "x", At: now}) }
	recv(good)
	recv(good) // replayed
	recv(forged)
	recv(unasked)
	recv(version)
	recv(truncated)
	st, ws := c.Stats(), c.WarmStats()
	if ws.AnswersReceived != 1 || ws.DroppedDuplicate != 1 || ws.DroppedUnasked != 1 || st.DroppedAuth != 1 ||
		st.DroppedVersion != 1 || st.DroppedMalformed+st.DroppedAuth != 2 {
		t.Errorf("counts: %+v %+v", st, ws)
	}
	for _, k := range []string{"y", "z"} {
		if _, ok := c.table.get(k); ok {
			t.Errorf("%s merged from a bad answer", k)
		}
	}
	if v, _ := c.table.get("x"); v != -1 {
		t.Errorf("x = %v, want -1", v)
	}
	// Once warm, even a sound answer to it is unasked for.
	for c.WarmStats().Warming {
		now = now.Add(100 * time.Millisecond)
		c.Pace(now)
	}
	later := answer(enc, c.ID(), []Level{{Key: []byte("w"), Tokens: -3}})
	recv(later)
	if ws := c.WarmStats(); ws.DroppedUnasked != 2 {
		t.Errorf("answer after warming: %d unasked, want 2", ws.DroppedUnasked)
	}
	// A node that never warms counts every answer as unasked.
	d := newWarmNode(t, net, "d", key, 1000, nil)
	d.Receive(transport.Packet{Data: answer(enc, d.ID(), []Level{{Key: []byte("v"), Tokens: -3}}), From: "x", At: now})
	if ws := d.WarmStats(); ws.DroppedUnasked != 1 || len(d.table.levels) != 0 {
		t.Errorf("answer to a node that did not ask: %+v", ws)
	}
}

func TestWarmStartAsksAgainWhenUnanswered(t *testing.T) {
	now := simT0.Add(time.Second)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	c := newWarmNode(t, net, "c", nil, 1000, nil)
	c.Warm(now)
	for c.WarmStats().Warming {
		now = now.Add(100 * time.Millisecond)
		step(net, now, c)
	}
	ws := c.WarmStats()
	if ws.RequestsSent != 2 || ws.WarmDuration != 2*time.Second {
		t.Fatalf("alone: %+v; want 2 requests (one resent after an interval) and done after 2 intervals", ws)
	}
}

// TestWarmStartAnswerFromABehindClock: an answer stamped before the asker
// started (the answering peer's clock behind, or a pacing tick taken just
// before the request arrived) still warms the asker: it names the asker's
// node id, so no former self of the asker can have applied it.
func TestWarmStartAnswerFromABehindClock(t *testing.T) {
	now := simT0.Add(10 * time.Millisecond)
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, func() time.Time { return now })
	key := []byte("0123456789abcdef")
	a := newWarmNode(t, net, "a", key, 1000, map[string]float64{"spent": -2})
	c := newWarmNode(t, net, "c", key, 1000, nil)
	if err := c.Warm(now); err != nil {
		t.Fatal(err)
	}
	for start := now; c.WarmStats().Warming && now.Sub(start) < 5*time.Second; {
		now = now.Add(10 * time.Millisecond)
		a.Pace(now.Add(-time.Second)) // a's clock is a second behind c's start
		c.Pace(now)
		net.Deliver(now)
		a.receiveAll()
		c.receiveAll()
	}
	if got, ok := c.table.get("spent"); !ok || got != -2 {
		t.Fatalf("c's level for the spent tag: %v (%v), want -2 (warm stats %+v, node stats %+v)", got, ok, c.WarmStats(), c.Stats())
	}
	// Nothing c heard was dropped as stale.
	if st := c.Stats(); st.DroppedStale != 0 {
		t.Errorf("c dropped %d datagrams as stale during its warm start", st.DroppedStale)
	}
}
