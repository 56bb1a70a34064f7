package warm

import (
	"sync"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// fakeHost is a node reduced to what warm start asks of it: the datagrams
// it is given to send are kept, decoded, for the test to read.
type fakeHost struct {
	mu      sync.Mutex
	sent    []wire.Message
	kicks   int
	heard   []uint64
	noReply bool
}

func (h *fakeHost) ID() uint64                { return 1 }
func (h *fakeHost) Interval() time.Duration   { return time.Second }
func (h *fakeHost) Configure(e *wire.Encoder) { e.MaxPacket = wire.MaxPacket }
func (h *fakeHost) Request(_ time.Time, sent func(error)) {
	sent(nil)
}
func (h *fakeHost) SendTo(pkt []byte, _ string) error {
	if h.noReply {
		return transport.ErrNoUnicast
	}
	m, err := wire.Decode(pkt, nil)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.sent = append(h.sent, m)
	h.mu.Unlock()
	return nil
}
func (h *fakeHost) CanReply() bool                        { return !h.noReply }
func (h *fakeHost) Heard(node uint64, _ transport.Packet) { h.heard = append(h.heard, node) }
func (h *fakeHost) SendFailed()                           {}
func (h *fakeHost) Kick()                                 { h.kicks++ }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// export hands out the same three levels in one part.
func export(_ time.Time, _ int, dst []wire.Level, keys []byte) ([]wire.Level, []byte, bool) {
	for _, k := range []string{"a", "b", "c"} {
		keys = append(keys, k...)
		dst = append(dst, wire.Level{Key: keys[len(keys)-1:], Tokens: 10})
	}
	return dst, keys, false
}

// TestAnswerLeavesOutWhatPeersLearnLater: an answer's levels take in the
// hits a report sends before the answer goes out (Known), leave out the
// asker's hits applied since its request (Theirs), and leave out the
// node's own hits still at a relay (Pending); all through the Host alone.
func TestAnswerLeavesOutWhatPeersLearnLater(t *testing.T) {
	h := &fakeHost{}
	pending := map[string]float64{"c": 4}
	w := New(Config{Export: export, Rate: 1000, Pending: func(levels []wire.Level, sign float64) {
		for i := range levels {
			levels[i].Tokens += sign * pending[string(levels[i].Key)]
		}
	}}, h)
	w.ReceiveRequest(wire.Message{Header: wire.Header{Node: 9, Type: wire.MsgSnapshotRequest}}, transport.Packet{From: "peer", At: t0})
	if h.kicks != 1 {
		t.Fatalf("a request kicked the loop %d times, want 1", h.kicks)
	}
	w.Lock()
	if !w.Theirs(9, []wire.Hit{{Key: "b", Count: 2}}) || w.Theirs(8, []wire.Hit{{Key: "b", Count: 1}}) {
		t.Fatal("Theirs: want true for the asker only")
	}
	w.Unlock()
	// The answer's part is exported as Pace would (b +2, c +4), and a
	// report goes before it is sent, moving what is unsent (a -3).
	w.mu.Lock()
	w.answers[0].levels, w.answers[0].keys, w.answers[0].more = export(t0, 0, nil, nil)
	w.answers[0].part = 1
	w.unknown(w.answers[0].levels, +1, w.answers[0].theirs)
	w.Known([]wire.Hit{{Key: "a", Count: 3}}, true)
	w.mu.Unlock()
	if w.Pace(t0) {
		t.Fatal("Pace: more to do after a one-datagram answer")
	}
	if len(h.sent) != 1 || h.sent[0].Snapshot == nil || !h.sent[0].Snapshot.Last || h.sent[0].Snapshot.To != 9 {
		t.Fatalf("sent %+v, want one last snapshot datagram to node 9", h.sent)
	}
	want := map[string]float64{"a": 7, "b": 12, "c": 14}
	for _, l := range h.sent[0].Snapshot.Levels {
		if want[string(l.Key)] != l.Tokens {
			t.Errorf("level %q = %v, want %v", l.Key, l.Tokens, want[string(l.Key)])
		}
	}
	if st := w.Stats(); st.RequestsReceived != 1 || st.AnswersSent != 1 || st.TagsSent != 3 {
		t.Errorf("stats %+v: want 1 request, 1 datagram, 3 tags", st)
	}
}

// TestRequestRefused: a second request from one node, and any request
// when the node cannot reply to one peer, are refused.
func TestRequestRefused(t *testing.T) {
	h := &fakeHost{}
	w := New(Config{Export: export}, h)
	req := wire.Message{Header: wire.Header{Node: 9, Type: wire.MsgSnapshotRequest}}
	w.ReceiveRequest(req, transport.Packet{From: "peer", At: t0})
	w.ReceiveRequest(req, transport.Packet{From: "peer", At: t0})
	h.noReply = true
	req.Node = 10
	w.ReceiveRequest(req, transport.Packet{From: "peer", At: t0})
	if st := w.Stats(); st.RequestsReceived != 3 || st.RequestsRefused != 2 {
		t.Errorf("stats %+v: want 3 requests, 2 refused", st)
	}
}

// TestWarmingRecordsWhatIsReportedSince: while warming, hits reported to
// every peer are spent again on the levels merged (the answers leave them
// out); hits a relay brings back are not, and nothing is after warming.
func TestWarmingRecordsWhatIsReportedSince(t *testing.T) {
	h := &fakeHost{}
	var merged []wire.Level
	w := New(Config{Merge: func(_ time.Time, ls []wire.Level) int {
		merged = append(merged, ls...)
		return len(ls)
	}}, h)
	if err := w.Warm(t0); err != nil {
		t.Fatal(err)
	}
	w.Lock()
	w.Known([]wire.Hit{{Key: "a", Count: 2}}, true)
	w.Known([]wire.Hit{{Key: "a", Count: 5}}, false) // come back from a relay
	w.Unlock()
	w.ReceiveAnswer(wire.Message{Header: wire.Header{Node: 9, Seq: 1, Type: wire.MsgSnapshot},
		Snapshot: &wire.Snapshot{To: 1, Last: true, Levels: []wire.Level{{Key: []byte("a"), Tokens: 10}, {Key: []byte("b"), Tokens: 10}}}},
		transport.Packet{From: "peer", At: t0.Add(100 * time.Millisecond)})
	if len(merged) != 2 || merged[0].Tokens != 8 || merged[1].Tokens != 10 {
		t.Fatalf("merged %+v, want a at 8 (2 reported since the request), b at 10", merged)
	}
	if len(h.heard) != 1 || h.heard[0] != 9 {
		t.Errorf("heard %v, want the answering node", h.heard)
	}
	w.Pace(t0.Add(1500 * time.Millisecond))
	if st := w.Stats(); !st.Warm || st.Warming || st.PeersAnswered != 1 {
		t.Errorf("stats %+v: want warm after a whole answer and an interval", st)
	}
}
