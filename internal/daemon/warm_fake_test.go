package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// Warm start between whole daemons on fake time: tests/cluster's
// warmboth_test.go, warmdrop_test.go and warmrequest_test.go. The
// networks deliver every datagram a fixed fakeDelay after it was sent,
// so none overtakes another, as on the real tests' bridge (see
// rollingDelay for what overtaking does to an answer).

const warmInterval = 200 * time.Millisecond

// inOrder is a network that delivers every datagram fakeDelay after its
// send, on the bubble's clock.
func inOrder() *transport.MemNetwork {
	n := transport.NewMemNetwork(transport.MemConfig{Delay: fakeDelay}, nil)
	n.DeliverOnTime()
	return n
}

// deaf is a transport whose sends go nowhere: one path of a node's two
// cut on the way out, as an nftables rule on the bridge drops a port's
// datagrams. What it receives still arrives.
type deaf struct {
	transport.Transport
}

// Send drops b.
func (deaf) Send([]byte) error { return nil }

// SendTo drops b.
func (deaf) SendTo([]byte, string) error { return nil }

// awaitWarm lets three intervals pass, past the two a warm start waits
// with nobody answering, and fails t unless n's warm start is then over,
// unanswered.
func awaitWarm(t *testing.T, n *fakeNode, interval time.Duration) {
	t.Helper()
	time.Sleep(3 * interval)
	if w := n.WarmStats(); !w.Warm || w.PeersAnswered != 0 {
		t.Fatalf("%s three intervals after its start, alone: warm start %+v, want it over, unanswered", n.name, w)
	}
}

// awaitReport lets an interval and a delivery pass, and fails t unless n
// has reported since since: the hits it served before are then known to
// its peers, and part of the levels it answers a snapshot request with.
func awaitReport(t *testing.T, n *fakeNode, since time.Time, interval time.Duration) {
	t.Helper()
	time.Sleep(interval + fakeDelay + time.Millisecond)
	if last := n.gossip.node.Stats().LastReport; !last.After(since) {
		t.Fatalf("%s has not reported in the interval since %v (last report %v)", n.name, since, last)
	}
}

// TestWarmStartGroupAndPeersOnFakeTime is tests/cluster's
// TestWarmStartGroupAndPeers on fake time: a node with both a group and
// unicast peers starts while another holds a spent tag. Its snapshot
// request goes out on both paths, and the answering node answers
// whichever copy it hears first, once: the other copy, in its sequence,
// is a duplicate. Whether the copy answered is the group's (the asker's
// unicast datagrams dropped on their way out), the unicast one (the
// group's dropped), or whichever came first (nothing dropped), the answer
// reaches the asker, which adopts the spent bucket at the answerer's very
// level, less one delivery's refill, and refuses the tag.
func TestWarmStartGroupAndPeersOnFakeTime(t *testing.T) {
	for _, drop := range []string{"none", "group", "unicast"} {
		t.Run("drop="+drop, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { warmGroupAndPeers(t, drop) })
		})
	}
}

// warmGroupAndPeers is one case of TestWarmStartGroupAndPeersOnFakeTime.
func warmGroupAndPeers(t *testing.T, drop string) {
	// A slow refill, so the spent bucket is still far below its burst
	// when the asker is looked at.
	const rate, burst = 0.5, 10
	group, unicast := inOrder(), inOrder()
	both := func(name string, cut string) fakeSpec {
		return fakeSpec{name: name,
			text: fakeConfig(rate, burst, warmInterval, true, "bind = \"127.0.0.1:7788\"\npeers = [\"192.0.2.1:7788\"]\n"),
			opts: func(o *Options) {
				o.Transports = func(config.Gossip) (transport.Transport, error) {
					g, u := transport.Transport(group.Join(name)), transport.Transport(unicast.Join(name))
					switch cut {
					case "group":
						g = deaf{g}
					case "unicast":
						u = deaf{u}
					}
					return transport.Multi(g, u), nil
				}
			}}
	}
	a := startFake(t, both("answerer", ""))
	awaitWarm(t, a, warmInterval)
	if got := a.askN(t, "hot", burst+2); got != burst {
		t.Fatalf("spending the tag: %d of %d served, want its burst of %d", got, burst+2, burst)
	}
	awaitReport(t, a, time.Now(), warmInterval)

	b := startFake(t, both("asker", drop))
	time.Sleep(warmInterval)
	wa, wb := a.WarmStats(), b.WarmStats()
	if wb.TagsAdopted != 1 || wb.PeersAnswered != 1 {
		t.Fatalf("the new node's warm start an interval after its start: %+v, want the answerer's answer and the spent bucket adopted", wb)
	}
	va, vb := a.tagView("hot"), b.tagView("hot")
	if short := rate * fakeDelay.Seconds(); !vb.Tracked || vb.Tokens > va.Tokens+1e-9 || vb.Tokens < va.Tokens-short-1e-9 {
		t.Errorf("the new node's bucket for the spent tag: %+v, want it at the answerer's level %.6f, less at most %.6f", vb, va.Tokens, short)
	}
	if wa.RequestsReceived != 1 || wa.RequestsRefused != 0 || wa.AnswersSent < 1 {
		t.Errorf("the answering node counts %d requests received, %d refused, %d answer datagrams sent; want one answered, none refused",
			wa.RequestsReceived, wa.RequestsRefused, wa.AnswersSent)
	}
	// Every datagram of the asker's, its request among them, reaches the
	// answerer twice when no path is cut, once when one is.
	switch dup := a.gossip.node.Stats().DroppedDuplicate; {
	case drop == "none" && dup == 0:
		t.Error("no duplicate dropped: the answering node heard the asker on one path only")
	case drop != "none" && dup != 0:
		t.Errorf("%d duplicates dropped: the answering node heard the asker on the path cut", dup)
	}
	if b.ask(t, "hot") {
		t.Errorf("the new node served the spent tag at %.3f tokens", vb.Tokens)
	}
	t.Logf("drop=%s: requests received %d, refused %d; answer datagrams sent %d; the answerer's level %.6f, the asker's %.6f",
		drop, wa.RequestsReceived, wa.RequestsRefused, wa.AnswersSent, va.Tokens, vb.Tokens)
}

// warmSecret is the cluster's secret in the stranger tests.
var warmSecret = []byte("the cluster's secret, 32 bytes..")

// warmedStranger starts, on a network of its own, one daemon with a
// secret (rate 20/s, burst 10) and a stranger beside it, which hears and
// sends what any node of the network does, and lets the daemon's own
// warm start end (nobody answers it). It returns the network too.
func warmedStranger(t *testing.T) (*fakeNode, *transport.MemTransport, *transport.MemNetwork) {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, warmSecret, 0o600); err != nil {
		t.Fatal(err)
	}
	mem := inOrder()
	d := startFake(t, fakeSpec{name: "d", net: mem,
		text: fakeConfig(20, 10, warmInterval, true, fmt.Sprintf("secret_file = %q\n", secret))})
	stranger := mem.Join("stranger")
	t.Cleanup(func() { stranger.Close() })
	awaitWarm(t, d, warmInterval)
	return d, stranger, mem
}

// delivered lets what was just sent arrive and be taken in.
func delivered() { time.Sleep(fakeDelay + time.Millisecond) }

// TestSnapshotAnswersDroppedOnFakeTime is tests/cluster's
// TestSnapshotAnswersDropped on fake time: a stranger sends a warmed
// daemon snapshot answers it must not merge: unasked-for (to it, and to
// another node), the same again (a replay), forged under another key,
// truncated, and of another format version. A delivery later each is
// dropped and counted, exactly, no bucket is lowered, and the daemon
// keeps serving.
func TestSnapshotAnswersDroppedOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, stranger, _ := warmedStranger(t)
		answer := func(k []byte, to uint64) []byte {
			e := wire.Encoder{Node: 0x5eed, MaxPacket: 1400, Key: k}
			var out []byte
			if _, _, err := e.EncodeSnapshot(time.Now(), to, []wire.Level{{Key: []byte("victim"), Tokens: -50}}, true, func(p []byte) error {
				out = append([]byte(nil), p...)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		before := d.gossip.node.Stats()
		good := answer(warmSecret, d.id())
		other := append([]byte(nil), good...)
		other[2] = 9 // the version byte
		for _, b := range [][]byte{
			good,                         // unasked: the daemon is not warming
			good,                         // the same again
			answer(warmSecret, d.id()+1), // to another node
			answer([]byte("not the cluster's secret, 32 b.."), d.id()),
			good[:len(good)-10],
			other,
		} {
			if err := stranger.Send(b); err != nil {
				t.Fatal(err)
			}
		}
		delivered()
		after := d.gossip.node.Stats()
		if u, a, v := after.Warm.DroppedUnasked-before.Warm.DroppedUnasked, after.DroppedAuth-before.DroppedAuth, after.DroppedVersion-before.DroppedVersion; u != 3 || a != 2 || v != 1 {
			t.Errorf("dropped %d unasked, %d for their signature, %d of another version; want 3, 2 (forged, truncated) and 1", u, a, v)
		}
		if w := after.Warm; w.AnswersReceived != 0 || w.TagsAdopted != 0 {
			t.Errorf("warm start took answers in: %+v", w)
		}
		if v := d.tagView("victim"); v.Tracked {
			t.Errorf("a dropped answer lowered a bucket: %+v", v)
		}
		if !d.ask(t, "victim") {
			t.Error("after the bad answers: the daemon refused, want it serving")
		}
	})
}

// TestSnapshotRequestsFromStrangersOnFakeTime is tests/cluster's
// TestSnapshotRequestsFromStrangers on fake time: a stranger sends a
// daemon snapshot requests. A sound one it answers, to the stranger only
// (a bystander on the same network hears none of the answer), with the
// spent tag in it; the same datagram again (a replay), a new request
// from the same node id (a second answer stream would amplify), one
// forged under another key, one truncated and one of another format
// version are each dropped or refused and counted, exactly, and answered
// with nothing; the daemon keeps serving.
func TestSnapshotRequestsFromStrangersOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, stranger, mem := warmedStranger(t)
		if got := d.askN(t, "hot", 11); got != 10 {
			t.Fatalf("spending the tag: %d of 11 served, want its burst of 10", got)
		}
		awaitReport(t, d, time.Now(), warmInterval)
		bystander := mem.Join("bystander")
		t.Cleanup(func() { bystander.Close() })
		const asker = 0x5eed
		enc := wire.Encoder{Node: asker, MaxPacket: 1400, Key: warmSecret}
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
		send := func(b []byte) {
			if err := stranger.Send(b); err != nil {
				t.Fatal(err)
			}
		}
		type counts struct{ received, refused, sent, dup, auth, malformed, version uint64 }
		read := func() counts {
			st := d.gossip.node.Stats()
			return counts{st.Warm.RequestsReceived, st.Warm.RequestsRefused, st.Warm.AnswersSent,
				st.DroppedDuplicate, st.DroppedAuth, st.DroppedMalformed, st.DroppedVersion}
		}
		c0 := read()

		first := request(&enc)
		send(first)
		// An answer is paced: let an interval pass, more than it takes.
		time.Sleep(warmInterval)
		answered := read()
		if answered.received-c0.received != 1 || answered.sent-c0.sent < 1 {
			t.Fatalf("after a sound request: %+v, then %+v; want it received and answered", c0, answered)
		}
		var hot, last bool
		var answers uint64
		for _, p := range drain(stranger) {
			m, err := wire.Decode(p.Data, warmSecret)
			if err != nil || m.Snapshot == nil {
				continue
			}
			if m.Snapshot.To != asker || last {
				t.Errorf("an answer datagram %+v to %x after the last, or to another node", m.Snapshot, m.Snapshot.To)
			}
			answers++
			last = m.Snapshot.Last
			for _, lv := range m.Snapshot.Levels {
				hot = hot || string(lv.Key) == "hot"
			}
		}
		if !last || !hot || answers != answered.sent-c0.sent {
			t.Errorf("the stranger heard %d answer datagrams of the %d sent (the last among them: %v), holding the spent tag: %v; want all, the last, and the tag",
				answers, answered.sent-c0.sent, last, hot)
		}
		for _, p := range drain(bystander) {
			if m, err := wire.Decode(p.Data, warmSecret); err == nil && m.Snapshot != nil {
				t.Errorf("a bystander heard an answer datagram meant for the stranger: %+v", m.Snapshot)
			}
		}

		send(first)         // a replay
		send(request(&enc)) // the same node asking again
		forger := wire.Encoder{Node: asker + 1, MaxPacket: 1400, Key: []byte("not the cluster's secret, 32 b..")}
		send(request(&forger))
		other := wire.Encoder{Node: asker + 2, MaxPacket: 1400, Key: warmSecret}
		sound := request(&other)
		send(sound[:len(sound)-5])
		version := request(&other)
		version[2] = 9 // the version byte, as TestSnapshotAnswersDroppedOnFakeTime does
		send(version)
		time.Sleep(warmInterval)
		end := read()
		if got := (counts{end.received - answered.received, end.refused - answered.refused, end.sent - answered.sent,
			end.dup - answered.dup, end.auth - answered.auth, end.malformed - answered.malformed, end.version - answered.version}); got != (counts{received: 1, refused: 1, dup: 1, auth: 1, malformed: 1, version: 1}) {
			t.Errorf("the bad requests counted %+v; want the same node asking again received and refused, and one each duplicate, forged, malformed and of another version, none answered", got)
		}
		for _, p := range drain(stranger) {
			if m, err := wire.Decode(p.Data, warmSecret); err == nil && m.Snapshot != nil {
				t.Errorf("a bad request was answered: %+v", m.Snapshot)
			}
		}
		if !d.ask(t, "other") {
			t.Error("after the bad requests: the daemon refused, want it serving")
		}
	})
}

// drain returns what tr received so far.
func drain(tr *transport.MemTransport) []transport.Packet {
	var out []transport.Packet
	for {
		select {
		case p := <-tr.Packets():
			out = append(out, p)
		default:
			return out
		}
	}
}
