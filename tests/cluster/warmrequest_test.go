package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestSnapshotRequestsFromStrangers sends a real daemon, from a stranger
// on its bridge, snapshot requests: a sound one, which it answers to the
// request's source address only; the same datagram again (a replay); a new
// request from the same node id (a second answer stream would amplify);
// one forged under another key; one truncated; and one of another format
// version. Only the first is answered, each other one is dropped or
// refused and counted, and the daemon keeps serving.
func TestSnapshotRequestsFromStrangers(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	key, c, tp, d := warmedStranger(t)
	if got := harness.Pipeline(t, d.Sock, strings.Repeat("hot\n", c.Burst+1)); !strings.HasSuffix(got, "NO\n") {
		t.Fatalf("spending the tag: %q, want the last query refused", got)
	}
	// An answer leaves out the hits no peer knows yet: once reported,
	// they are part of it.
	d.AwaitReportAfter(t, time.Now())
	const asker = 0x5eed
	enc := wire.Encoder{Node: asker, MaxPacket: 1400, Key: key}
	request := func(e *wire.Encoder) []byte {
		var out []byte
		if err := e.EncodeRequest(time.Now(), func(p []byte) error {
			out = append([]byte(nil), p...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	type counts struct{ received, refused, sent, dup, auth, malformed, version float64 }
	read := func() counts {
		f := harness.Scrape(t, d.AdminAddr(t))
		return counts{
			harness.Metric(t, f, "dthrottle_warm_requests_total", "direction=received"),
			harness.Metric(t, f, "dthrottle_warm_requests_total", "direction=refused"),
			harness.Metric(t, f, "dthrottle_warm_answer_packets_total", "direction=sent"),
			harness.Metric(t, f, "dthrottle_gossip_packets_dropped_total", "reason=duplicate"),
			harness.Metric(t, f, "dthrottle_gossip_packets_dropped_total", "reason=auth"),
			harness.Metric(t, f, "dthrottle_gossip_packets_dropped_total", "reason=malformed"),
			harness.Metric(t, f, "dthrottle_gossip_packets_dropped_total", "reason=version"),
		}
	}
	c0 := read()

	first := request(&enc)
	tp.Send(t, first)
	_, m := tp.Capture(t, key, func(_ transport.Packet, m wire.Message) bool {
		return m.Snapshot != nil && m.Snapshot.To == asker && m.Snapshot.Last
	})
	harness.Poll(t, 5*time.Second, "the answer to be counted", func() bool {
		c := read()
		return c.received-c0.received == 1 && c.sent-c0.sent >= 1
	})
	answered := read()
	var hot bool
	for _, lv := range m.Snapshot.Levels {
		hot = hot || string(lv.Key) == "hot"
	}
	if !hot && answered.sent-c0.sent == 1 {
		t.Errorf("the one-datagram answer %+v does not hold the spent tag", m.Snapshot)
	}

	tp.Send(t, first)         // a replay
	tp.Send(t, request(&enc)) // the same node asking again
	forger := wire.Encoder{Node: asker + 1, MaxPacket: 1400, Key: []byte("not the cluster's secret, 32 b..")}
	tp.Send(t, request(&forger))
	stranger := wire.Encoder{Node: asker + 2, MaxPacket: 1400, Key: key}
	sound := request(&stranger)
	tp.Send(t, sound[:len(sound)-5])
	other := request(&stranger)
	other[2] = 9 // the version byte, as TestSnapshotAnswersDropped does
	tp.Send(t, other)
	harness.Poll(t, 5*time.Second, "every bad request to be dropped or refused, and counted", func() bool {
		c := read()
		return c.dup-answered.dup >= 1 && c.refused-answered.refused == 1 &&
			c.auth-answered.auth == 1 && c.malformed-answered.malformed == 1 &&
			c.version-answered.version == 1
	})
	end := read()
	if end.sent != answered.sent {
		t.Errorf("answer packets sent went from %v to %v: a bad request was answered", answered.sent, end.sent)
	}
	if end.received-c0.received != 2 {
		t.Errorf("requests received: %v, want the first and the same node asking again", end.received-c0.received)
	}
	if got := harness.Pipeline(t, d.Sock, "other\n"); got != "OK\n" {
		t.Errorf("after the bad requests: %q, want the daemon serving", got)
	}
	t.Logf("dropped or refused: %v duplicate, %v refused, %v auth, %v malformed, %v version", end.dup-answered.dup,
		end.refused-answered.refused, end.auth-answered.auth, end.malformed-answered.malformed, end.version-answered.version)
}
