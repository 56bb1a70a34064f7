package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/logtest"
)

// testNode is a node over an in-memory network that records what it
// applies, with its log captured.
type testNode struct {
	*Node
	tr      *transport.MemTransport
	log     *logtest.Buffer
	mu      sync.Mutex
	applied map[string]uint32
	pending []Hit
}

func newTestNode(t *testing.T, net *transport.MemNetwork, name string, key []byte, fingerprint uint64) *testNode {
	t.Helper()
	return newTestNodeWith(t, net.Join(name), func(c *Config) { c.Key, c.Fingerprint = key, fingerprint })
}

// newTestNodeWith is newTestNode on transport tr, with its Config changed
// by set.
func newTestNodeWith(t *testing.T, tr *transport.MemTransport, set func(*Config)) *testNode {
	t.Helper()
	tn := &testNode{tr: tr, log: &logtest.Buffer{}, applied: map[string]uint32{}}
	cfg := Config{
		Since:    simT0,
		Interval: time.Second,
		Drain: func(dst []Hit) []Hit {
			tn.mu.Lock()
			defer tn.mu.Unlock()
			dst = append(dst, tn.pending...)
			tn.pending = nil
			return dst
		},
		Apply: func(now time.Time, hits []Hit) {
			tn.mu.Lock()
			defer tn.mu.Unlock()
			for _, h := range hits {
				tn.applied[h.Key] += h.Count
			}
		},
		Logger: slog.New(slog.NewTextHandler(tn.log, nil)),
	}
	set(&cfg)
	n, err := newNode(cfg, tn.tr)
	if err != nil {
		t.Fatal(err)
	}
	tn.Node = n
	return tn
}

func (tn *testNode) serve(key string, hits uint32) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.pending = append(tn.pending, Hit{Key: key, Count: hits})
}

func (tn *testNode) receiveAll() {
	for {
		select {
		case p := <-tn.tr.Packets():
			tn.Receive(p)
		default:
			return
		}
	}
}

func TestNodeIntegrity(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 3}, func() time.Time { return now })
	key := []byte("0123456789abcdef")
	a := newTestNode(t, net, "a", key, 1)
	b := newTestNode(t, net, "b", key, 1)
	other := newTestNode(t, net, "other", key, 2) // different policies
	forger := newTestNode(t, net, "forger", []byte("wrong key, wrong"), 1)

	a.serve("x", 3)
	other.serve("y", 1)
	forger.serve("x", 1000)
	for _, n := range []*testNode{a, other, forger} {
		if err := n.Report(now); err != nil {
			t.Fatal(err)
		}
	}
	net.Deliver(now)
	b.receiveAll()
	if b.applied["x"] != 3 || b.applied["y"] != 1 {
		t.Fatalf("b applied %v, want x=3 (not the forger's 1000) and y=1", b.applied)
	}
	st := b.Stats()
	if st.DroppedAuth != 1 || st.FingerprintMismatch != 1 || st.PacketsReceived != 2 {
		t.Fatalf("stats %+v: want 1 auth drop, 1 fingerprint mismatch, 2 accepted", st)
	}
	// b's report reaches a; b's own datagram coming back is ignored.
	b.serve("z", 5)
	if err := b.Report(now); err != nil {
		t.Fatal(err)
	}
	net.Deliver(now)
	a.receiveAll()
	if a.applied["z"] != 5 {
		t.Fatalf("a applied z=%d, want 5", a.applied["z"])
	}
	var own []byte
	enc := wire.Encoder{Node: b.id, MaxPacket: 1400, Key: key}
	enc.Encode(now, []Hit{{Key: "own", Count: 1}}, func(pkt []byte) error { own = append([]byte(nil), pkt...); return nil })
	b.Receive(transport.Packet{Data: own, From: "b", At: now})
	if b.Stats().Own != 1 || b.applied["own"] != 0 {
		t.Fatalf("own datagram: stats %+v, applied %v", b.Stats(), b.applied)
	}
	// Replaying a's datagram: a duplicate, not applied twice.
	a.serve("r", 2)
	tap := net.Join("tap")
	a.Report(now)
	net.Deliver(now)
	replay := (<-tap.Packets()).Data
	b.receiveAll()
	b.Receive(transport.Packet{Data: replay, From: "replayer", At: now})
	if b.applied["r"] != 2 || b.Stats().DroppedDuplicate != 1 {
		t.Fatalf("replay: applied r=%d dup=%d, want 2 and 1", b.applied["r"], b.Stats().DroppedDuplicate)
	}
	// Garbage is counted, never applied.
	for _, g := range [][]byte{nil, []byte("DT"), bytes.Repeat([]byte{0xff}, 100), append([]byte("DT\x02"), make([]byte, 60)...)} {
		b.Receive(transport.Packet{Data: g, From: "junk", At: now})
	}
	if st := b.Stats(); st.DroppedMalformed+st.DroppedVersion+st.DroppedAuth != 4+1 {
		t.Fatalf("garbage: %+v", st)
	}

	// The peers view and its log lines.
	peers := b.Peers()
	if len(peers) != 2 {
		t.Fatalf("b heard %d peers, want 2 (a and other): %+v", len(peers), peers)
	}
	for _, pi := range peers {
		if pi.Node == other.id && pi.FingerprintMatch || pi.Node == a.id && !pi.FingerprintMatch {
			t.Errorf("fingerprint match wrong: %+v", pi)
		}
	}
	log := b.log.String()
	if strings.Count(log, "peer joined") != 2 || strings.Count(log, "policies differ") != 1 ||
		strings.Count(log, "without a valid signature") != 1 {
		t.Errorf("log:\n%s", log)
	}
	other.Report(now.Add(time.Second))
	net.Deliver(now.Add(time.Second))
	b.receiveAll()
	if strings.Count(b.log.String(), "policies differ") != 1 {
		t.Errorf("fingerprint warning repeated:\n%s", b.log.String())
	}
	b.checkSilence(now.Add(10 * time.Second))
	if strings.Count(b.log.String(), "peer went silent") != 2 {
		t.Errorf("silence not logged once per peer:\n%s", b.log.String())
	}
	b.checkSilence(now.Add(11 * time.Second))
	if strings.Count(b.log.String(), "peer went silent") != 2 {
		t.Errorf("silence logged twice:\n%s", b.log.String())
	}
}

// TestNodeStopSendsLastHits checks a clean stop reports what was served
// since the last report.
func TestNodeStopSendsLastHits(t *testing.T) {
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 1}, nil)
	a := newTestNode(t, net, "a", nil, 1)
	b := newTestNode(t, net, "b", nil, 1)
	a.Start()
	a.serve("last", 7)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	net.Deliver(time.Now().Add(time.Second))
	b.receiveAll()
	if b.applied["last"] != 7 {
		t.Fatalf("b applied %v after a stopped, want last=7", b.applied)
	}
}

// TestNodeUpdate changes the key and the fingerprint of a running pair of
// nodes: reports signed with the new key are accepted by a peer with it,
// and the node keeps its id and sequence.
func TestNodeUpdate(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 5}, func() time.Time { return now })
	oldKey, newKey := []byte("old key old key!"), []byte("new key new key!")
	a := newTestNode(t, net, "a", oldKey, 1)
	b := newTestNode(t, net, "b", newKey, 2)
	a.serve("x", 1)
	a.Report(now)
	net.Deliver(now)
	b.receiveAll()
	if b.Stats().DroppedAuth != 1 {
		t.Fatalf("report under the old key accepted: %+v", b.Stats())
	}
	if err := a.Update(Update{Interval: time.Second, MaxPacket: 1400, Key: newKey, Fingerprint: 2}); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(Update{Interval: 0, MaxPacket: 1400}); err == nil {
		t.Fatal("zero interval accepted")
	}
	a.serve("y", 2)
	a.Report(now)
	net.Deliver(now)
	b.receiveAll()
	if b.applied["y"] != 2 {
		t.Fatalf("report under the new key not applied: %v", b.applied)
	}
	peers := b.Peers()
	if len(peers) != 1 || peers[0].Node != a.ID() || !peers[0].FingerprintMatch || peers[0].Lost != 0 {
		t.Fatalf("peers after update: %+v (want a's id, matching fingerprint, the sequence carried on)", peers)
	}
}

// TestReplayAfterRestart: a datagram a node applied is never applied again
// by the node restarted (it has no memory of sequence numbers, so the
// send time decides), nor by any node once it is older than the peers
// table remembers.
func TestReplayAfterRestart(t *testing.T) {
	now := simT0
	net := transport.NewMemNetwork(transport.MemConfig{Seed: 9}, func() time.Time { return now })
	key := []byte("0123456789abcdef")
	a := newTestNode(t, net, "a", key, 1)
	b := newTestNode(t, net, "b", key, 1)
	tap := net.Join("tap")
	a.serve("x", 4)
	a.Report(now)
	net.Deliver(now)
	b.receiveAll()
	captured := (<-tap.Packets()).Data
	if b.applied["x"] != 4 {
		t.Fatalf("b applied %v", b.applied)
	}
	// b restarts a second later: a new node, started after the datagram
	// was sent.
	now = now.Add(time.Second)
	b2 := newTestNode(t, transport.NewMemNetwork(transport.MemConfig{}, nil), "b2", key, 1)
	b2.cfg.Since = now
	b2.Receive(transport.Packet{Data: captured, From: "replayer", At: now})
	if b2.applied["x"] != 0 || b2.Stats().DroppedStale != 1 {
		t.Fatalf("restarted node applied a replay: applied %v, stats %+v", b2.applied, b2.Stats())
	}
	// A node that never saw it, much later: too old to be applied.
	c := newTestNode(t, transport.NewMemNetwork(transport.MemConfig{}, nil), "c", key, 1)
	c.Receive(transport.Packet{Data: captured, From: "replayer", At: simT0.Add(time.Hour)})
	if c.applied["x"] != 0 || c.Stats().DroppedStale != 1 {
		t.Fatalf("an hour-old datagram applied: %v %+v", c.applied, c.Stats())
	}
	// Fresh from a's next report, the restarted node takes it.
	a.serve("y", 1)
	a.Report(now)
	var fresh []byte
	net.Deliver(now)
	fresh = (<-tap.Packets()).Data
	b2.Receive(transport.Packet{Data: fresh, From: "a", At: now})
	if b2.applied["y"] != 1 {
		t.Fatalf("restarted node dropped a fresh datagram: %v %+v", b2.applied, b2.Stats())
	}
}
